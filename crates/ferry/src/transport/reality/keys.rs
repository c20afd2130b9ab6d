//! The TLS 1.3 key schedule (RFC 8446 §7.1) and REALITY's auth key, on aws-lc-rs.

use aws_lc_rs::{aead, agreement, digest, hmac};

pub use crate::transport::tls13::keys::{Hash, Suite, TrafficKey};

/// The running hash of the handshake messages.
#[derive(Clone)]
pub struct Transcript {
    ctx: digest::Context,
}

impl Transcript {
    pub fn new(hash: Hash) -> Transcript {
        Transcript {
            ctx: digest::Context::new(hash.digest()),
        }
    }

    pub fn add(&mut self, msg: &[u8]) {
        self.ctx.update(msg);
    }

    /// The hash of everything added so far.
    pub fn current(&self) -> Vec<u8> {
        self.ctx.clone().finish().as_ref().to_vec()
    }
}

/// The handshake and application secrets of one connection.
pub struct Schedule {
    pub suite: Suite,
    handshake_secret: Vec<u8>,
    pub client_hs: Vec<u8>,
    pub server_hs: Vec<u8>,
}

impl Schedule {
    /// From the (EC)DHE shared secret and the hash of ClientHello..ServerHello.
    pub fn new(suite: Suite, shared: &[u8], hello_hash: &[u8]) -> Schedule {
        let h = suite.hash();
        let zeros = vec![0u8; h.size()];
        let early = h.extract(&zeros, &zeros);
        let derived = h.derive(&early, "derived", &h.hash(&[]));
        let hs = h.extract(&derived, shared);
        Schedule {
            suite,
            client_hs: h.derive(&hs, "c hs traffic", hello_hash),
            server_hs: h.derive(&hs, "s hs traffic", hello_hash),
            handshake_secret: hs,
        }
    }

    /// The application traffic secrets (client, server) from the hash of
    /// ClientHello..server Finished.
    pub fn application(&self, hash: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let h = self.suite.hash();
        let zeros = vec![0u8; h.size()];
        let derived = h.derive(&self.handshake_secret, "derived", &h.hash(&[]));
        let master = h.extract(&derived, &zeros);
        (
            h.derive(&master, "c ap traffic", hash),
            h.derive(&master, "s ap traffic", hash),
        )
    }

    /// The Finished verify_data of the side whose handshake secret is `base`.
    pub fn finished(&self, base: &[u8], transcript_hash: &[u8]) -> Vec<u8> {
        let h = self.suite.hash();
        let key = h.expand_label(base, "finished", &[], h.size());
        h.mac(&key, transcript_hash)
    }
}

/// The X25519 public key of `private`.
#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "fixed-size keys and tags"
)]
pub fn x25519_public(private: &[u8; 32]) -> [u8; 32] {
    let k = agreement::PrivateKey::from_private_key(&agreement::X25519, private)
        .expect("32-byte X25519 key");
    let p = k.compute_public_key().expect("X25519 public key");
    let mut out = [0u8; 32];
    out.copy_from_slice(p.as_ref());
    out
}

/// X25519(private, peer); `None` for a bad peer key (all-zero result included).
pub fn x25519(private: &[u8; 32], peer: &[u8]) -> Option<[u8; 32]> {
    let k = agreement::PrivateKey::from_private_key(&agreement::X25519, private).ok()?;
    let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, peer);
    agreement::agree(&k, peer, (), |s| {
        let mut out = [0u8; 32];
        out.copy_from_slice(s);
        Ok(out)
    })
    .ok()
    .filter(|s| s.iter().any(|b| *b != 0))
}

/// REALITY's auth key: HKDF-SHA256(shared, salt = random[..20], info = "REALITY"), 32 bytes.
pub fn auth_key(shared: &[u8; 32], random: &[u8; 32]) -> [u8; 32] {
    let h = Hash::Sha256;
    let prk = h.extract(&random[..20], shared);
    let mut out = [0u8; 32];
    out.copy_from_slice(&h.expand(&prk, b"REALITY", 32));
    out
}

/// The session id the client sends: AES-256-GCM(auth key) over the 16-byte plaintext, nonce =
/// random[20..], AAD = the ClientHello with its session id zeroed. 16 bytes ciphertext + tag.
#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "fixed-size keys and tags"
)]
pub fn seal_session_id(
    auth: &[u8; 32],
    random: &[u8; 32],
    plain: &[u8; 16],
    aad: &[u8],
) -> [u8; 32] {
    let key = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_256_GCM, auth).expect("32"));
    let mut n = [0u8; 12];
    n.copy_from_slice(&random[20..]);
    let mut buf = *plain;
    let tag = key
        .seal_in_place_separate_tag(
            aead::Nonce::assume_unique_for_key(n),
            aead::Aad::from(aad),
            &mut buf,
        )
        .expect("16 bytes");
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&buf);
    out[16..].copy_from_slice(tag.as_ref());
    out
}

/// Opens a session id sealed by [`seal_session_id`]; `None` when it was not.
pub fn open_session_id(
    auth: &[u8; 32],
    random: &[u8; 32],
    sid: &[u8; 32],
    aad: &[u8],
) -> Option<[u8; 16]> {
    let key = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_256_GCM, auth).ok()?);
    let mut n = [0u8; 12];
    n.copy_from_slice(&random[20..]);
    let mut buf = *sid;
    let p = key
        .open_in_place(
            aead::Nonce::assume_unique_for_key(n),
            aead::Aad::from(aad),
            &mut buf,
        )
        .ok()?;
    let mut out = [0u8; 16];
    out.copy_from_slice(p);
    Some(out)
}

/// HMAC-SHA512(auth key, msg): the signature of REALITY's temporary certificate.
pub fn cert_hmac(auth: &[u8; 32], msg: &[u8]) -> [u8; 64] {
    let k = hmac::Key::new(hmac::HMAC_SHA512, auth);
    let mut out = [0u8; 64];
    out.copy_from_slice(hmac::sign(&k, msg).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn range(a: u8, b: u8) -> Vec<u8> {
        (a..=b).collect()
    }

    /// transports2.md §1.2's test vector: shared secret, AuthKey, session id, HMAC.
    #[test]
    fn the_spec_vector_holds() {
        let server_priv: [u8; 32] = range(1, 0x20).try_into().unwrap();
        let server_pub = x25519_public(&server_priv);
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        assert_eq!(
            b64.encode(server_priv),
            "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA"
        );
        assert_eq!(
            b64.encode(server_pub),
            "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9_AsrhtHHw"
        );
        let client_priv: [u8; 32] = range(0x40, 0x5f).try_into().unwrap();
        assert_eq!(
            x25519_public(&client_priv).to_vec(),
            unhex("79a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a")
        );
        let shared = x25519(&client_priv, &server_pub).unwrap();
        assert_eq!(
            shared.to_vec(),
            unhex("ae4440cc8d7faddb2894172b78e3d745cafa0098bcc10d7ee0fda08fa85a9a2e")
        );
        // Both ends agree.
        assert_eq!(
            x25519(&server_priv, &x25519_public(&client_priv)).unwrap(),
            shared
        );
        let random: [u8; 32] = range(0xa0, 0xbf).try_into().unwrap();
        let auth = auth_key(&shared, &random);
        assert_eq!(
            auth.to_vec(),
            unhex("9a8772d2d41e16f1b1887a0538992a2ebc54492c2cdd4acfdb04591373ad8c33")
        );
        let mut aad = unhex("0100004b 0303");
        aad.extend_from_slice(&random);
        aad.push(0x20);
        aad.extend_from_slice(&[0u8; 32]);
        aad.extend_from_slice(&unhex("0002 1301 0100 0000"));
        let plain: [u8; 16] = unhex("1a071c00 6a000000 0123456789abcdef")
            .try_into()
            .unwrap();
        let sid = seal_session_id(&auth, &random, &plain, &aad);
        assert_eq!(
            sid.to_vec(),
            unhex("4184e4c7b986c87fee5924557b1f386dc04e06912ddcad96653217c0b992f608")
        );
        assert_eq!(open_session_id(&auth, &random, &sid, &aad), Some(plain));
        let mut bad = aad.clone();
        bad[10] ^= 1;
        assert_eq!(open_session_id(&auth, &random, &sid, &bad), None);
        let pubkey = unhex("7776e870b93354f2a0b24c23f2a36cc4e80e223218c1b97926fdd018396a2b9b");
        assert_eq!(
            cert_hmac(&auth, &pubkey).to_vec(),
            unhex(
                "0845a51a43173938a0fcc32f924d958f1dfb407f0faae649d1524a12aad9fdaa
                 f5774d3617d970ff6dc9bda7a34e137762da3eaf151a6d328d6cf278837d36cb"
            )
        );
    }

    /// RFC 8448 §3 (simple 1-RTT): the handshake traffic secrets from its shared key.
    #[test]
    fn the_key_schedule_matches_rfc8448() {
        let shared = unhex("8b d4 05 4f b5 5b 9d 63 fd fb ac f9 f0 4b 9f 0d 35 e6 d6 3f 53 75 63 ef d4 62 72 90 0f 89 49 2d");
        let hello_hash = unhex("86 0c 06 ed c0 78 58 ee 8e 78 f0 e7 42 8c 58 ed d6 b4 3f 2c a3 e6 e9 5f 02 ed 06 3c f0 e1 ca d8");
        let s = Schedule::new(Suite::Aes128Gcm, &shared, &hello_hash);
        assert_eq!(
            s.client_hs,
            unhex("b3 ed db 12 6e 06 7f 35 a7 80 b3 ab f4 5e 2d 8f 3b 1a 95 07 38 f5 2e 96 00 74 6a 0e 27 a5 5a 21")
        );
        assert_eq!(
            s.server_hs,
            unhex("b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4 e9 c9 12 bc de d9 10 5d 42 be fd 59 d3 91 ad 38")
        );
        // The application secrets use the same Derive-Secret; interop with Xray and sing-box
        // proves them (tests/interop/interop_reality.rs).
        let (c, sv) = s.application(&hello_hash);
        assert_ne!(c, sv);
        assert_eq!(c.len(), 32);
    }
}
