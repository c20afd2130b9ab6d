//! The client's check of the server's certificate chain, as Xray's `verifyPeerCert`:
//! - the roots and the name dialed, unless `allowInsecure`, a pin or `verifyPeerCertByName`
//!   takes over (Go's own verification);
//! - `pinnedPeerCertSha256`: a match on the leaf accepts the server as it is; a match on a CA
//!   certificate of the chain makes it the only trust anchor, and the chain and name are then
//!   verified as usual (a pinned CA is public: appended to a forged leaf it proves nothing);
//! - `verifyPeerCertByName`: the chain verified against one of these names instead;
//! - the legacy pins of older Xray: `pinnedPeerCertificateChainSha256` (the whole chain sent)
//!   and `pinnedPeerCertificatePublicKeySha256` (a key of the verified chain).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, TrustAnchor, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct};

use super::certs::{sha256, system_roots};
use super::{provider, TlsSettings, Usage};

#[derive(Debug)]
pub(super) struct Verifier {
    /// System roots and `usage: "verify"` certificates.
    roots: Vec<TrustAnchor<'static>>,
    /// `pinnedPeerCertSha256`.
    pins: Vec<[u8; 32]>,
    /// `verifyPeerCertByName` / `verifyPeerCertInNames`.
    names: Vec<ServerName<'static>>,
    /// `pinnedPeerCertificateChainSha256`.
    chain_pins: Vec<[u8; 32]>,
    /// `pinnedPeerCertificatePublicKeySha256`.
    key_pins: Vec<[u8; 32]>,
    /// `allowInsecure`.
    insecure: bool,
    provider: Arc<CryptoProvider>,
}

impl Verifier {
    pub(super) fn new(s: &TlsSettings) -> Result<Verifier, String> {
        let names = s
            .verify_names
            .iter()
            .map(|n| {
                ServerName::try_from(n.as_str())
                    .map(|n| n.to_owned())
                    .map_err(|e| format!("verifyPeerCertByName {n:?}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let own_check = !s.allow_insecure && s.pins.is_empty();
        let mut roots = Vec::new();
        if own_check || !names.is_empty() {
            let mut store = rustls::RootCertStore::empty();
            if !s.disable_system_root {
                store.add_parsable_certificates(system_roots().iter().cloned());
            }
            for c in &s.certificates {
                if c.usage == Usage::Verify {
                    for der in c.chain() {
                        store
                            .add(der.clone())
                            .map_err(|e| format!("verify certificate: {e}"))?;
                    }
                }
            }
            // A pinned CA may stand in for the roots; nothing else can.
            if store.is_empty() && s.pins.is_empty() {
                return Err("no root certificates to verify the server with".into());
            }
            roots = store.roots;
        }
        Ok(Verifier {
            roots,
            pins: s.pins.clone(),
            names,
            chain_pins: s.chain_pins.clone(),
            key_pins: s.key_pins.clone(),
            insecure: s.allow_insecure,
            provider: provider(),
        })
    }

    /// Verifies the chain up to one of `anchors` and the leaf for one of `names`; returns the
    /// SHA-256 of each key of the chain built (leaf to anchor).
    fn chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        anchors: &[TrustAnchor<'_>],
        names: &[&ServerName<'_>],
        now: UnixTime,
    ) -> Result<Vec<[u8; 32]>, rustls::Error> {
        let ee = webpki::EndEntityCert::try_from(end_entity).map_err(pki_error)?;
        let path = ee
            .verify_for_usage(
                self.provider.signature_verification_algorithms.all,
                anchors,
                intermediates,
                now,
                webpki::KeyUsage::server_auth(),
                None,
                None,
            )
            .map_err(pki_error)?;
        if !names
            .iter()
            .any(|n| ee.verify_is_valid_for_subject_name(n).is_ok())
        {
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ));
        }
        let mut keys = vec![sha256(ee.subject_public_key_info().as_ref())];
        for c in path.intermediate_certificates() {
            keys.push(sha256(c.subject_public_key_info().as_ref()));
        }
        keys.push(sha256(webpki::spki_for_anchor(path.anchor()).as_ref()));
        Ok(keys)
    }
}

/// What a `pinnedPeerCertSha256` matched.
enum Pinned<'a> {
    Leaf,
    Ca(&'a CertificateDer<'a>),
    Nothing,
}

fn pinned<'a>(
    pins: &[[u8; 32]],
    end_entity: &CertificateDer<'_>,
    intermediates: &'a [CertificateDer<'a>],
) -> Pinned<'a> {
    if pins.contains(&sha256(end_entity)) {
        return Pinned::Leaf;
    }
    // As Xray: a pinned certificate further up counts only if it is a CA.
    match intermediates
        .iter()
        .find(|c| pins.contains(&sha256(c)) && super::der::is_ca(c))
    {
        Some(c) => Pinned::Ca(c),
        None => Pinned::Nothing,
    }
}

/// `pinnedPeerCertificateChainSha256`'s hash of the chain as sent: SHA-256 of the first
/// certificate, then of (that hash, the next certificate's SHA-256) for each next one.
pub fn chain_hash<'a>(certs: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut h: Option<[u8; 32]> = None;
    for c in certs {
        let one = sha256(c);
        h = Some(match h {
            None => one,
            Some(prev) => {
                let mut both = [0u8; 64];
                both[..32].copy_from_slice(&prev);
                both[32..].copy_from_slice(&one);
                sha256(&both)
            }
        });
    }
    h.unwrap_or_else(|| sha256(&[]))
}

fn refuse(m: &str) -> rustls::Error {
    rustls::Error::General(m.to_string())
}

fn pki_error(e: webpki::Error) -> rustls::Error {
    use webpki::Error as E;
    rustls::Error::InvalidCertificate(match e {
        E::BadDer | E::BadDerTime => CertificateError::BadEncoding,
        E::CertExpired { .. } => CertificateError::Expired,
        E::CertNotValidYet { .. } => CertificateError::NotValidYet,
        E::UnknownIssuer => CertificateError::UnknownIssuer,
        E::CertNotValidForName(_) => CertificateError::NotValidForName,
        E::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        e => CertificateError::Other(rustls::OtherError(Arc::new(e))),
    })
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // Go's own verification, unless something else takes its place.
        let mut keys = None;
        if !self.insecure && self.pins.is_empty() && self.names.is_empty() {
            keys = Some(self.chain(end_entity, intermediates, &self.roots, &[server_name], now)?);
        }
        let mut ca = None;
        if !self.pins.is_empty() {
            match pinned(&self.pins, end_entity, intermediates) {
                Pinned::Leaf => return Ok(ServerCertVerified::assertion()),
                Pinned::Ca(c) => {
                    ca = Some(webpki::anchor_from_trusted_cert(c).map_err(pki_error)?);
                }
                Pinned::Nothing => {
                    return Err(refuse("peer certificate matches no pinnedPeerCertSha256"))
                }
            }
        }
        let anchors = match &ca {
            Some(a) => std::slice::from_ref(a),
            None => &self.roots[..],
        };
        if !self.names.is_empty() {
            let names: Vec<&ServerName<'_>> = self.names.iter().collect();
            match self.chain(end_entity, intermediates, anchors, &names, now) {
                Ok(_) => return Ok(ServerCertVerified::assertion()),
                // Older Xray: a chain pin still accepts what the names did not.
                Err(_) if !self.chain_pins.is_empty() => {}
                Err(e) => {
                    tracing::debug!("TLS: verifyPeerCertByName: {e}");
                    return Err(refuse(match ca {
                        Some(_) => "peer certificate is invalid (against the pinned CA and verifyPeerCertByName)",
                        None => "peer certificate is invalid (against the roots and verifyPeerCertByName)",
                    }));
                }
            }
        } else if ca.is_some() {
            self.chain(end_entity, intermediates, anchors, &[server_name], now)?;
        }
        if !self.chain_pins.is_empty() {
            let h = chain_hash(
                std::iter::once(end_entity)
                    .chain(intermediates)
                    .map(|c| c.as_ref()),
            );
            if !self.chain_pins.contains(&h) {
                return Err(refuse(
                    "peer certificate chain matches no pinnedPeerCertificateChainSha256",
                ));
            }
        }
        if !self.key_pins.is_empty() {
            // As older Xray: the keys of the chain Go verified (none without that check).
            let hit = keys.iter().flatten().any(|k| self.key_pins.contains(k));
            if !hit {
                return Err(refuse(
                    "peer public key matches no pinnedPeerCertificatePublicKeySha256",
                ));
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose, PublicKeyData,
    };

    use super::*;
    use crate::transport::tls::{CertSource, CertificateEntry};

    /// A root, an intermediate it signed, a leaf for `ferry.test` the intermediate signed, and
    /// an attacker's self-signed leaf for the same name.
    struct Pki {
        root: CertifiedIssuer<'static, KeyPair>,
        inter: CertificateDer<'static>,
        leaf: CertificateDer<'static>,
        forged: CertificateDer<'static>,
    }

    fn ca(name: &str) -> CertificateParams {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p
    }

    fn pki() -> Pki {
        let root = CertifiedIssuer::self_signed(ca("root"), KeyPair::generate().unwrap()).unwrap();
        let inter =
            CertifiedIssuer::signed_by(ca("inter"), KeyPair::generate().unwrap(), &root).unwrap();
        let leaf_params = CertificateParams::new(vec!["ferry.test".to_string()]).unwrap();
        let leaf = leaf_params
            .signed_by(&KeyPair::generate().unwrap(), &inter)
            .unwrap();
        let forged = leaf_params
            .self_signed(&KeyPair::generate().unwrap())
            .unwrap();
        Pki {
            inter: inter.der().clone(),
            root,
            leaf: leaf.der().clone(),
            forged: forged.der().clone(),
        }
    }

    /// Settings with the root as the only root certificate.
    fn with_root(p: &Pki) -> TlsSettings {
        let root = CertificateEntry::load(
            CertSource::Inline {
                cert: p.root.pem(),
                key: None,
            },
            Usage::Verify,
            true,
        )
        .unwrap();
        TlsSettings {
            disable_system_root: true,
            certificates: vec![Arc::new(root)],
            ..Default::default()
        }
    }

    fn check(
        s: &TlsSettings,
        chain: &[&CertificateDer<'static>],
        name: &str,
    ) -> Result<(), rustls::Error> {
        let v = Verifier::new(s).map_err(rustls::Error::General)?;
        let rest: Vec<CertificateDer<'static>> = chain[1..].iter().map(|c| (*c).clone()).collect();
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(chain[0], &rest, &name, &[], UnixTime::now())
            .map(|_| ())
    }

    fn pin(c: &[u8]) -> [u8; 32] {
        sha256(c)
    }

    #[test]
    fn a_pinned_ca_appended_to_a_forged_leaf_is_refused() {
        let p = pki();
        let s = TlsSettings {
            pins: vec![pin(&p.inter)],
            ..Default::default()
        };
        let e = check(&s, &[&p.forged, &p.inter], "ferry.test").unwrap_err();
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e:?}");
        // The pinned CA as the only anchor: the chain it issued passes for its name only.
        check(&s, &[&p.leaf, &p.inter], "ferry.test").unwrap();
        let e = check(&s, &[&p.leaf, &p.inter], "other.test").unwrap_err();
        assert_eq!(
            e,
            rustls::Error::InvalidCertificate(CertificateError::NotValidForName)
        );
        // A pinned root that is not in the chain sent matches nothing.
        let s = TlsSettings {
            pins: vec![pin(p.root.der())],
            ..Default::default()
        };
        assert!(check(&s, &[&p.leaf, &p.inter], "ferry.test").is_err());
    }

    #[test]
    fn a_pinned_leaf_is_accepted_as_it_is() {
        let p = pki();
        let s = TlsSettings {
            pins: vec![pin(&p.forged)],
            ..Default::default()
        };
        // Self-signed, no roots, any name: the pin is the whole check.
        check(&s, &[&p.forged], "whatever.test").unwrap();
        check(&s, &[&p.forged, &p.inter], "ferry.test").unwrap();
        assert!(check(&s, &[&p.leaf, &p.inter], "ferry.test").is_err());
        // A pinned leaf further up the chain is no CA: it anchors nothing.
        let s = TlsSettings {
            pins: vec![pin(&p.leaf)],
            ..Default::default()
        };
        assert!(check(&s, &[&p.forged, &p.leaf], "ferry.test").is_err());
    }

    #[test]
    fn the_roots_verify_unless_allow_insecure() {
        let p = pki();
        let s = with_root(&p);
        check(&s, &[&p.leaf, &p.inter], "ferry.test").unwrap();
        assert!(check(&s, &[&p.leaf, &p.inter], "other.test").is_err());
        assert!(check(&s, &[&p.forged, &p.inter], "ferry.test").is_err());
        let s = TlsSettings {
            allow_insecure: true,
            ..with_root(&p)
        };
        check(&s, &[&p.forged], "other.test").unwrap();
    }

    #[test]
    fn a_chain_pin_holds_under_allow_insecure() {
        let p = pki();
        let h = chain_hash([p.leaf.as_ref(), p.inter.as_ref()]);
        let mut two = [0u8; 64];
        two[..32].copy_from_slice(&sha256(&p.leaf));
        two[32..].copy_from_slice(&sha256(&p.inter));
        assert_eq!(h, sha256(&two), "Xray's chain hash");
        let s = TlsSettings {
            allow_insecure: true,
            chain_pins: vec![h],
            ..Default::default()
        };
        check(&s, &[&p.leaf, &p.inter], "other.test").unwrap();
        assert!(check(&s, &[&p.forged, &p.inter], "ferry.test").is_err());
        assert!(check(&s, &[&p.leaf], "ferry.test").is_err());
        // Without allowInsecure the roots verify too.
        let s = TlsSettings {
            chain_pins: vec![h],
            ..with_root(&p)
        };
        check(&s, &[&p.leaf, &p.inter], "ferry.test").unwrap();
        assert!(check(&s, &[&p.leaf, &p.inter], "other.test").is_err());
    }

    #[test]
    fn a_key_pin_matches_a_key_of_the_verified_chain() {
        let p = pki();
        let root_key = sha256(&p.root.key().subject_public_key_info());
        let s = TlsSettings {
            key_pins: vec![root_key],
            ..with_root(&p)
        };
        check(&s, &[&p.leaf, &p.inter], "ferry.test").unwrap();
        let s = TlsSettings {
            key_pins: vec![[7; 32]],
            ..with_root(&p)
        };
        assert!(check(&s, &[&p.leaf, &p.inter], "ferry.test").is_err());
        // Nothing verified, nothing to match (as older Xray).
        let s = TlsSettings {
            key_pins: vec![root_key],
            allow_insecure: true,
            ..with_root(&p)
        };
        assert!(check(&s, &[&p.leaf, &p.inter], "ferry.test").is_err());
    }

    #[test]
    fn verify_peer_cert_by_name_replaces_the_name_dialed() {
        let p = pki();
        let s = TlsSettings {
            verify_names: vec!["nope.test".into(), "ferry.test".into()],
            ..with_root(&p)
        };
        check(&s, &[&p.leaf, &p.inter], "cdn.example").unwrap();
        assert!(check(&s, &[&p.forged, &p.inter], "ferry.test").is_err());
        let s = TlsSettings {
            verify_names: vec!["nope.test".into()],
            ..with_root(&p)
        };
        assert!(check(&s, &[&p.leaf, &p.inter], "ferry.test").is_err());
        // With a pinned CA, the names are verified against it alone.
        let s = TlsSettings {
            verify_names: vec!["ferry.test".into()],
            pins: vec![pin(&p.inter)],
            ..Default::default()
        };
        check(&s, &[&p.leaf, &p.inter], "cdn.example").unwrap();
        assert!(check(&s, &[&p.forged, &p.inter], "cdn.example").is_err());
    }
}
