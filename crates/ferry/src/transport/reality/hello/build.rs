//! Building a ClientHello from a browser [`Template`]: its extensions in the template's
//! order (shuffled as Chrome does), GREASE, key shares and padding.

use super::super::fingerprint::{self, Ext, Order, Template};
use super::super::keys;
use super::{
    message, CLIENT_HELLO, EXT_ALPN, EXT_KEY_SHARE, EXT_SERVER_NAME, EXT_SIGNATURE_ALGORITHMS,
    EXT_SUPPORTED_GROUPS, EXT_SUPPORTED_VERSIONS, MLKEM_CLIENT_SHARE, MLKEM_SERVER_SHARE, X25519,
    X25519MLKEM768,
};

/// The private halves of the key shares a built ClientHello carries.
pub struct ClientKeys {
    /// The stand-alone X25519 share (REALITY's auth key is agreed with it).
    pub x25519: Option<[u8; 32]>,
    /// The X25519MLKEM768 share: ML-KEM decapsulation key and its own X25519 key.
    pub hybrid: Option<(
        aws_lc_rs::kem::DecapsulationKey<aws_lc_rs::kem::AlgorithmId>,
        [u8; 32],
    )>,
}

impl ClientKeys {
    /// The X25519 key REALITY authenticates with: the stand-alone share, else the hybrid's.
    pub fn auth_private(&self) -> Option<&[u8; 32]> {
        self.x25519
            .as_ref()
            .or(self.hybrid.as_ref().map(|(_, x)| x))
    }

    /// The shared secret for the group and share the server chose.
    pub fn agree(&self, group: u16, server_share: &[u8]) -> Option<Vec<u8>> {
        match group {
            X25519 => Some(keys::x25519(self.x25519.as_ref()?, server_share)?.to_vec()),
            X25519MLKEM768 => {
                let (dk, x) = self.hybrid.as_ref()?;
                if server_share.len() != MLKEM_SERVER_SHARE {
                    return None;
                }
                let ct = aws_lc_rs::kem::Ciphertext::from(&server_share[..1088]);
                let ss = dk.decapsulate(ct).ok()?;
                let mut out = ss.as_ref().to_vec();
                out.extend_from_slice(&keys::x25519(x, &server_share[1088..])?);
                Some(out)
            }
            _ => None,
        }
    }
}

/// Per-connection GREASE values, as BoringSSL draws them: one per use, the two GREASE
/// extensions never equal, the key share's the same as the group list's.
struct Grease {
    suite: u16,
    group: u16,
    ext1: u16,
    ext2: u16,
    version: u16,
}

fn grease_value(b: u8) -> u16 {
    let v = (b & 0xf0) | 0x0a;
    u16::from_be_bytes([v, v])
}

impl Grease {
    fn new() -> Grease {
        let mut r = [0u8; 5];
        crate::common::rand::fill(&mut r);
        let ext1 = grease_value(r[2]);
        let mut ext2 = grease_value(r[3]);
        if ext2 == ext1 {
            ext2 ^= 0x1010;
        }
        Grease {
            suite: grease_value(r[0]),
            group: grease_value(r[1]),
            ext1,
            ext2,
            version: grease_value(r[4]),
        }
    }
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_list16(out: &mut Vec<u8>, vals: &[u16], grease: u16) {
    put_u16(out, (vals.len() * 2) as u16);
    for v in vals {
        put_u16(out, if *v == fingerprint::G { grease } else { *v });
    }
}

/// Builds a ClientHello handshake message from `t` with a zero session id (REALITY fills it in
/// afterwards), and the private keys of its shares.
pub fn build(t: &Template, sni: Option<&str>) -> (Vec<u8>, ClientKeys) {
    build_with_alpn(t, sni, t.alpn)
}

/// [`build`] offering `alpn` instead of the template's (none: no ALPN extension, and no ALPS
/// without h2).
pub fn build_with_alpn(t: &Template, sni: Option<&str>, alpn: &[&str]) -> (Vec<u8>, ClientKeys) {
    let g = Grease::new();
    let mut keys = ClientKeys {
        x25519: None,
        hybrid: None,
    };
    let mut exts: Vec<(Ext, Vec<u8>, u16)> = Vec::new();
    for e in t.extensions {
        let mut d = Vec::new();
        let Some(ty) = extension(*e, t, sni, alpn, &g, &mut keys, &mut d) else {
            continue;
        };
        exts.push((*e, d, ty));
    }
    if t.order == Order::ChromeShuffle {
        shuffle(&mut exts);
    }
    (assemble(t, &g, &exts), keys)
}

/// The type of extension `e`, its data written to `d`; None: left out of this hello.
fn extension(
    e: Ext,
    t: &Template,
    sni: Option<&str>,
    alpn: &[&str],
    g: &Grease,
    keys: &mut ClientKeys,
    d: &mut Vec<u8>,
) -> Option<u16> {
    let ty = match e {
        Ext::Grease => g.ext1,
        Ext::GreaseOne => {
            d.push(0);
            g.ext2
        }
        Ext::Sni => {
            let name = sni?;
            put_u16(d, (name.len() + 3) as u16);
            d.push(0);
            put_u16(d, name.len() as u16);
            d.extend_from_slice(name.as_bytes());
            EXT_SERVER_NAME
        }
        Ext::Raw(ty, data) => {
            d.extend_from_slice(data);
            ty
        }
        Ext::Groups(list) => {
            put_list16(d, list, g.group);
            EXT_SUPPORTED_GROUPS
        }
        Ext::SigAlgs(list) => {
            put_list16(d, list, 0);
            EXT_SIGNATURE_ALGORITHMS
        }
        Ext::Alpn => {
            if alpn.is_empty() {
                return None;
            }
            let mut l = Vec::new();
            for p in alpn {
                l.push(p.len() as u8);
                l.extend_from_slice(p.as_bytes());
            }
            put_u16(d, l.len() as u16);
            d.extend_from_slice(&l);
            EXT_ALPN
        }
        Ext::Alps(cp) => {
            if !alpn.contains(&"h2") {
                return None;
            }
            put_u16(d, 3);
            d.push(2);
            d.extend_from_slice(b"h2");
            cp
        }
        Ext::KeyShares(groups) => {
            key_shares(groups, t, g, keys, d);
            EXT_KEY_SHARE
        }
        Ext::Versions(list) => {
            d.push((list.len() * 2) as u8);
            for v in list {
                put_u16(d, if *v == fingerprint::G { g.version } else { *v });
            }
            EXT_SUPPORTED_VERSIONS
        }
        Ext::EchGrease { aeads, payloads } => {
            let mut r = [0u8; 3];
            crate::common::rand::fill(&mut r);
            d.push(0); // outer
            put_u16(d, 0x0001); // HKDF-SHA256
            put_u16(d, aeads[r[0] as usize % aeads.len()]);
            d.push(r[1]); // config id
                          // enc: a real X25519 public key, as an HPKE sender's would be.
            let mut k = [0u8; 32];
            crate::common::rand::fill(&mut k);
            put_u16(d, 32);
            d.extend_from_slice(&keys::x25519_public(&k));
            let len = payloads[r[2] as usize % payloads.len()];
            let mut p = vec![0u8; len];
            crate::common::rand::fill(&mut p);
            put_u16(d, len as u16);
            d.extend_from_slice(&p);
            0xfe0d
        }
        Ext::Padding => 0x0015, // sized below, once the rest is known
    };
    Some(ty)
}

/// The key_share extension's data: one share per group of `groups`, the private keys kept in
/// `keys`.
#[allow(
    clippy::expect_used,
    reason = "key generation from the system generator, which rand::fill already treats as fatal"
)]
fn key_shares(groups: &[u16], t: &Template, g: &Grease, keys: &mut ClientKeys, d: &mut Vec<u8>) {
    let mut l = Vec::new();
    for grp in groups {
        match *grp {
            fingerprint::G => {
                put_u16(&mut l, g.group);
                put_u16(&mut l, 1);
                l.push(0);
            }
            X25519 => {
                let k = match (&keys.hybrid, t.reuse_hybrid_x25519) {
                    (Some((_, k)), true) => *k,
                    _ => {
                        let mut k = [0u8; 32];
                        crate::common::rand::fill(&mut k);
                        k
                    }
                };
                put_u16(&mut l, X25519);
                put_u16(&mut l, 32);
                l.extend_from_slice(&keys::x25519_public(&k));
                keys.x25519 = Some(k);
            }
            0x0017 => {
                use aws_lc_rs::agreement::{PrivateKey, ECDH_P256};
                let k = PrivateKey::generate(&ECDH_P256).expect("P-256 key");
                let p = k.compute_public_key().expect("P-256 public key");
                put_u16(&mut l, 0x0017);
                put_u16(&mut l, p.as_ref().len() as u16);
                l.extend_from_slice(p.as_ref());
            }
            X25519MLKEM768 => {
                use aws_lc_rs::kem::{DecapsulationKey, ML_KEM_768};
                let dk = DecapsulationKey::generate(&ML_KEM_768).expect("ML-KEM key");
                let ek = dk
                    .encapsulation_key()
                    .and_then(|e| e.key_bytes())
                    .expect("ML-KEM encapsulation key");
                let mut k = [0u8; 32];
                crate::common::rand::fill(&mut k);
                put_u16(&mut l, X25519MLKEM768);
                put_u16(&mut l, MLKEM_CLIENT_SHARE as u16);
                l.extend_from_slice(ek.as_ref());
                l.extend_from_slice(&keys::x25519_public(&k));
                keys.hybrid = Some((dk, k));
            }
            other => {
                // A group the template lists but Ferry cannot use: an empty
                // share would be malformed, so it is left out.
                let _ = other;
            }
        }
    }
    put_u16(d, l.len() as u16);
    d.extend_from_slice(&l);
}

/// Chrome's extension order: shuffled, but for GREASE and padding.
fn shuffle(exts: &mut [(Ext, Vec<u8>, u16)]) {
    // Fisher-Yates over every extension but GREASE and padding, which keep their places.
    let movable: Vec<usize> = (0..exts.len())
        .filter(|i| !matches!(exts[*i].0, Ext::Grease | Ext::GreaseOne | Ext::Padding))
        .collect();
    let mut r = vec![0u8; movable.len() * 2];
    crate::common::rand::fill(&mut r);
    for k in (1..movable.len()).rev() {
        let j = u16::from_be_bytes([r[2 * k], r[2 * k + 1]]) as usize % (k + 1);
        exts.swap(movable[k], movable[j]);
    }
}

/// The ClientHello message: version, random, a zero session id, suites and the extensions,
/// padded as BoringSSL pads.
fn assemble(t: &Template, g: &Grease, exts: &[(Ext, Vec<u8>, u16)]) -> Vec<u8> {
    let mut body = Vec::with_capacity(2048);
    put_u16(&mut body, 0x0303);
    let mut random = [0u8; 32];
    crate::common::rand::fill(&mut random);
    body.extend_from_slice(&random);
    body.push(32);
    body.extend_from_slice(&[0u8; 32]);
    put_list16(&mut body, t.suites, g.suite);
    body.extend_from_slice(&[1, 0]);
    let ext_len: usize = exts
        .iter()
        .filter(|(e, _, _)| !matches!(e, Ext::Padding))
        .map(|(_, d, _)| 4 + d.len())
        .sum();
    let mut ext_bytes = Vec::with_capacity(ext_len + 512);
    for (e, d, ty) in exts {
        if matches!(e, Ext::Padding) {
            // BoringSSL: a hello of 256..511 bytes (record payload) is padded to 512.
            let unpadded = 4 + body.len() + 2 + ext_len;
            if unpadded > 256 && unpadded < 512 {
                let pad = (512 - unpadded).saturating_sub(4).max(1);
                put_u16(&mut ext_bytes, 0x0015);
                put_u16(&mut ext_bytes, pad as u16);
                ext_bytes.resize(ext_bytes.len() + pad, 0);
            }
            continue;
        }
        put_u16(&mut ext_bytes, *ty);
        put_u16(&mut ext_bytes, d.len() as u16);
        ext_bytes.extend_from_slice(d);
    }
    put_u16(&mut body, ext_bytes.len() as u16);
    body.extend_from_slice(&ext_bytes);
    let mut msg = Vec::with_capacity(body.len() + 4);
    message(CLIENT_HELLO, &body, &mut msg);
    msg
}
