//! The temporary certificate of a REALITY server (transports2.md §1.4): one Ed25519 key per
//! process in a fixed 178-byte self-signed template; per connection its signature field holds
//! HMAC-SHA512(auth key, public key), which is what the client checks.

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};

use super::keys;

/// Where the public key and the signature lie in [`Temporary::der`].
pub const PUB: std::ops::Range<usize> = 72..104;
pub const SIG: std::ops::Range<usize> = 114..178;

/// The DER Go's `x509.CreateCertificate` makes from `{SerialNumber: 0}` with an Ed25519 key:
/// empty issuer and subject, validity from year 1 to year 1, no extensions.
#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "fixed-size keys, templates and signatures"
)]
fn template(public: &[u8; 32]) -> [u8; 178] {
    let mut d = Vec::with_capacity(178);
    d.extend_from_slice(&[0x30, 0x81, 0xaf, 0x30, 0x63]);
    d.extend_from_slice(&[0xa0, 0x03, 0x02, 0x01, 0x02]); // v3
    d.extend_from_slice(&[0x02, 0x01, 0x00]); // serial 0
    d.extend_from_slice(&[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70]); // Ed25519
    d.extend_from_slice(&[0x30, 0x00]); // issuer
    d.extend_from_slice(&[0x30, 0x22, 0x18, 0x0f]);
    d.extend_from_slice(b"00010101000000Z");
    d.extend_from_slice(&[0x18, 0x0f]);
    d.extend_from_slice(b"00010101000000Z");
    d.extend_from_slice(&[0x30, 0x00]); // subject
    d.extend_from_slice(&[
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ]);
    d.extend_from_slice(public);
    d.extend_from_slice(&[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x41, 0x00]);
    d.resize(178, 0);
    d.try_into().expect("178 bytes")
}

/// ML-DSA-65 signature length, and where it lies in the certificate with the extension.
pub const MLDSA65_SIG: usize = 3309;
pub const MLDSA65_AT: usize = 126;
/// Length of the certificate that carries the ML-DSA-65 extension.
pub const MLDSA65_CERT: usize = 3509;

/// The template with one extension (OID 0.0, a 3309-byte OCTET STRING) that holds the
/// ML-DSA-65 signature (`mldsa65Seed`), as Go encodes it: 3509 bytes, the value at offset 126.
fn template_mldsa65(public: &[u8; 32]) -> Vec<u8> {
    let mut d = Vec::with_capacity(MLDSA65_CERT);
    d.extend_from_slice(&[0x30, 0x82, 0x0d, 0xb1, 0x30, 0x82, 0x0d, 0x63]);
    d.extend_from_slice(&[0xa0, 0x03, 0x02, 0x01, 0x02]);
    d.extend_from_slice(&[0x02, 0x01, 0x00]);
    d.extend_from_slice(&[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70]);
    d.extend_from_slice(&[0x30, 0x00]);
    d.extend_from_slice(&[0x30, 0x22, 0x18, 0x0f]);
    d.extend_from_slice(b"00010101000000Z");
    d.extend_from_slice(&[0x18, 0x0f]);
    d.extend_from_slice(b"00010101000000Z");
    d.extend_from_slice(&[0x30, 0x00]);
    d.extend_from_slice(&[
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ]);
    d.extend_from_slice(public);
    // [3] { SEQUENCE { SEQUENCE { OID 0.0, OCTET STRING (3309) } } }
    d.extend_from_slice(&[
        0xa3, 0x82, 0x0c, 0xfc, 0x30, 0x82, 0x0c, 0xf8, 0x30, 0x82, 0x0c, 0xf4,
    ]);
    d.extend_from_slice(&[0x06, 0x01, 0x00, 0x04, 0x82, 0x0c, 0xed]);
    debug_assert_eq!(d.len(), MLDSA65_AT);
    d.resize(MLDSA65_AT + MLDSA65_SIG, 0);
    d.extend_from_slice(&[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x41, 0x00]);
    d.resize(MLDSA65_CERT, 0);
    d
}

/// The ML-DSA-65 key of `mldsa65Seed`.
pub fn mldsa65_key(seed: &[u8; 32]) -> Option<aws_lc_rs::signature::PqdsaKeyPair> {
    aws_lc_rs::signature::PqdsaKeyPair::from_seed(&aws_lc_rs::signature::ML_DSA_65_SIGNING, seed)
        .ok()
}

/// The ML-DSA-65 public key (`mldsa65Verify`) of a seed.
pub fn mldsa65_public(seed: &[u8; 32]) -> Option<Vec<u8>> {
    use aws_lc_rs::signature::KeyPair;
    Some(mldsa65_key(seed)?.public_key().as_ref().to_vec())
}

/// What the ML-DSA-65 signature covers: HMAC-SHA512(auth key, public key ‖ ClientHello ‖
/// ServerHello), the messages with their headers.
#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "fixed-size keys, templates and signatures"
)]
pub fn mldsa65_message(auth: &[u8; 32], public: &[u8], ch: &[u8], sh: &[u8]) -> [u8; 64] {
    let k = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA512, auth);
    let mut c = aws_lc_rs::hmac::Context::with_key(&k);
    c.update(public);
    c.update(ch);
    c.update(sh);
    c.sign().as_ref().try_into().expect("64 bytes")
}

/// The server's certificate key and template.
pub struct Temporary {
    key: Ed25519KeyPair,
    der: [u8; 178],
    mldsa65: Option<(aws_lc_rs::signature::PqdsaKeyPair, Vec<u8>)>,
}

impl Temporary {
    /// A fresh key.
    pub fn generate() -> Temporary {
        let mut seed = [0u8; 32];
        crate::common::rand::fill(&mut seed);
        Temporary::from_seed(&seed)
    }

    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "fixed-size keys, templates and signatures"
    )]
    pub fn from_seed(seed: &[u8; 32]) -> Temporary {
        let key = Ed25519KeyPair::from_seed_unchecked(seed).expect("32-byte seed");
        let public: [u8; 32] = key.public_key().as_ref().try_into().expect("32 bytes");
        Temporary {
            der: template(&public),
            key,
            mldsa65: None,
        }
    }

    /// With `mldsa65Seed`: the certificate also carries an ML-DSA-65 signature.
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "fixed-size keys, templates and signatures"
    )]
    pub fn with_mldsa65(mut self, seed: &[u8; 32]) -> Option<Temporary> {
        let key = mldsa65_key(seed)?;
        let public: [u8; 32] = self.public().try_into().expect("32");
        self.mldsa65 = Some((key, template_mldsa65(&public)));
        Some(self)
    }

    /// The certificate for one connection whose hellos are `ch` and `sh`.
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "fixed-size keys, templates and signatures"
    )]
    pub fn der_for(&self, auth: &[u8; 32], ch: &[u8], sh: &[u8]) -> Vec<u8> {
        let Some((key, template)) = &self.mldsa65 else {
            return self.der(auth).to_vec();
        };
        let mut d = template.clone();
        let n = d.len();
        d[n - 64..].copy_from_slice(&keys::cert_hmac(auth, self.public()));
        let msg = mldsa65_message(auth, self.public(), ch, sh);
        let mut sig = vec![0u8; MLDSA65_SIG];
        let len = key.sign(&msg, &mut sig).expect("ML-DSA-65 signature");
        debug_assert_eq!(len, MLDSA65_SIG);
        d[MLDSA65_AT..MLDSA65_AT + MLDSA65_SIG].copy_from_slice(&sig);
        d
    }

    pub fn public(&self) -> &[u8] {
        &self.der[PUB]
    }

    /// The certificate for one connection.
    pub fn der(&self, auth: &[u8; 32]) -> [u8; 178] {
        let mut d = self.der;
        d[SIG].copy_from_slice(&keys::cert_hmac(auth, self.public()));
        d
    }

    /// A genuine Ed25519 signature (for CertificateVerify).
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "fixed-size keys, templates and signatures"
    )]
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.key.sign(msg).as_ref().try_into().expect("64 bytes")
    }
}

/// Client side with `mldsa65Verify`: the certificate's extension holds an ML-DSA-65 signature
/// by `public` over the hellos.
pub fn verify_mldsa65(
    der: &[u8],
    auth: &[u8; 32],
    verify_key: &[u8],
    ch: &[u8],
    sh: &[u8],
) -> bool {
    if der.len() != MLDSA65_CERT {
        return false;
    }
    let Some(public) = verify(der, auth) else {
        return false;
    };
    let msg = mldsa65_message(auth, &public, ch, sh);
    let key =
        aws_lc_rs::signature::UnparsedPublicKey::new(&aws_lc_rs::signature::ML_DSA_65, verify_key);
    key.verify(&msg, &der[MLDSA65_AT..MLDSA65_AT + MLDSA65_SIG])
        .is_ok()
}

/// Client side: the certificate is a REALITY one for this auth key (Ed25519 key at the template
/// offsets, signature field = HMAC of it). Returns the Ed25519 public key.
pub fn verify(der: &[u8], auth: &[u8; 32]) -> Option<[u8; 32]> {
    // The Ed25519 SubjectPublicKeyInfo: find it rather than trust fixed offsets, since a
    // server may send the ML-DSA variant with an extension.
    const SPKI: [u8; 12] = [
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ];
    let at = der.windows(SPKI.len()).position(|w| w == SPKI)? + SPKI.len();
    let public: [u8; 32] = der.get(at..at + 32)?.try_into().ok()?;
    let sig = der.get(der.len().checked_sub(64)?..)?;
    let want = keys::cert_hmac(auth, &public);
    aws_lc_rs::constant_time::verify_slices_are_equal(sig, &want).ok()?;
    Some(public)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transports2.md §1.4: 178 bytes, the layout byte for byte, the key and HMAC where the
    /// spec puts them, and x509 parsers accept it.
    #[test]
    fn the_certificate_is_gos_der_byte_for_byte() {
        let seed: [u8; 32] = (0x10..=0x2f).collect::<Vec<u8>>().try_into().unwrap();
        let t = Temporary::from_seed(&seed);
        let public = t.public().to_vec();
        assert_eq!(
            crate::transport::tls::hex(&public),
            "7776e870b93354f2a0b24c23f2a36cc4e80e223218c1b97926fdd018396a2b9b"
        );
        let auth = [9u8; 32];
        let der = t.der(&auth);
        let mut want = String::from("3081af3063a003020102020100300506032b65703000");
        want += "3022180f30303031303130313030303030305a180f30303031303130313030303030305a";
        want += "3000302a300506032b6570032100";
        want += &crate::transport::tls::hex(&public);
        want += "300506032b6570034100";
        want += &crate::transport::tls::hex(&keys::cert_hmac(&auth, &public));
        assert_eq!(crate::transport::tls::hex(&der), want);
        assert_eq!(verify(&der, &auth).unwrap().to_vec(), public);
        assert_eq!(verify(&der, &[8u8; 32]), None);
        // webpki parses it as a certificate (the client side of rustls-based peers would).
        let c = rustls_pki_types::CertificateDer::from(der.to_vec());
        assert!(webpki::EndEntityCert::try_from(&c).is_ok());
    }

    /// §1.4 with `mldsa65Seed`: 3509 bytes, the signature at 126, verified over the hellos;
    /// other hellos or another verify key fail.
    #[test]
    fn the_mldsa65_certificate_signs_the_hellos() {
        let seed = [5u8; 32];
        let t = Temporary::from_seed(&[6u8; 32])
            .with_mldsa65(&seed)
            .unwrap();
        let auth = [9u8; 32];
        let der = t.der_for(&auth, b"client hello", b"server hello");
        assert_eq!(der.len(), MLDSA65_CERT);
        assert_eq!(
            &der[MLDSA65_AT - 7..MLDSA65_AT],
            &[0x06, 0x01, 0x00, 0x04, 0x82, 0x0c, 0xed]
        );
        let c = rustls_pki_types::CertificateDer::from(der.clone());
        assert!(webpki::EndEntityCert::try_from(&c).is_ok());
        let public = mldsa65_public(&seed).unwrap();
        assert_eq!(public.len(), 1952);
        assert!(verify_mldsa65(
            &der,
            &auth,
            &public,
            b"client hello",
            b"server hello"
        ));
        assert!(!verify_mldsa65(
            &der,
            &auth,
            &public,
            b"client hellO",
            b"server hello"
        ));
        assert!(!verify_mldsa65(
            &der,
            &auth,
            &mldsa65_public(&[4u8; 32]).unwrap(),
            b"client hello",
            b"server hello"
        ));
        // Without the option the short certificate is sent.
        assert_eq!(
            Temporary::from_seed(&[6u8; 32])
                .der_for(&auth, b"", b"")
                .len(),
            178
        );
    }
}
