//! The server name of a QUIC Initial (routing.md §3.5): each long-header Initial of the
//! (concatenated) datagrams is unprotected with the RFC 9001 initial keys, its CRYPTO frames are
//! laid into one buffer, and the ClientHello parser of [`super::tls`] runs on it after each
//! packet. Versions 1 and draft-29 as Xray; version 2 (RFC 9369) too. Sans-IO.

use aws_lc_rs::aead::{self, quic, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hkdf;

use super::{tls, Outcome};

/// The CRYPTO reassembly buffer (Xray's 32767 bytes); data beyond it is not QUIC to us.
pub const MAX_CRYPTO: usize = 32767;

const V1: u32 = 1;
const DRAFT29: u32 = 0xff00_001d;
const V2: u32 = 0x6b33_43cf;

const SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad,
    0xcc, 0xbb, 0x7f, 0x0a,
];
const SALT_DRAFT29: [u8; 20] = [
    0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11, 0xe0,
    0x43, 0x90, 0xa8, 0x99,
];
const SALT_V2: [u8; 20] = [
    0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb,
    0xf9, 0xbd, 0x2e, 0xd9,
];

struct Len(usize);
impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (TLS 1.3) with an empty context.
fn expand_label(prk: &hkdf::Prk, label: &str, out: &mut [u8]) -> Option<()> {
    let full = format!("tls13 {label}");
    let len = (out.len() as u16).to_be_bytes();
    let llen = [full.len() as u8];
    let info: [&[u8]; 4] = [&len, &llen, full.as_bytes(), &[0]];
    prk.expand(&info, Len(out.len())).ok()?.fill(out).ok()
}

/// The client's Initial key, IV and header-protection key for `dcid`.
fn client_keys(version: u32, dcid: &[u8]) -> Option<([u8; 16], [u8; 12], [u8; 16])> {
    let (salt, pre) = match version {
        V1 => (&SALT_V1, "quic"),
        DRAFT29 => (&SALT_DRAFT29, "quic"),
        _ => (&SALT_V2, "quicv2"),
    };
    let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(dcid);
    let mut secret = [0u8; 32];
    expand_label(&initial, "client in", &mut secret)?;
    let client = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &secret);
    let (mut key, mut iv, mut hp) = ([0u8; 16], [0u8; 12], [0u8; 16]);
    expand_label(&client, &format!("{pre} key"), &mut key)?;
    expand_label(&client, &format!("{pre} iv"), &mut iv)?;
    expand_label(&client, &format!("{pre} hp"), &mut hp)?;
    Some((key, iv, hp))
}

/// A QUIC variable-length integer.
fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let first = *b.get(*pos)?;
    let n = 1usize << (first >> 6);
    let bytes = b.get(*pos..*pos + n)?;
    let mut v = u64::from(first & 0x3f);
    for &x in &bytes[1..] {
        v = v << 8 | u64::from(x);
    }
    *pos += n;
    Some(v)
}

/// Sniffs the first datagrams of a UDP session.
pub fn sniff(mut b: &[u8]) -> Outcome {
    let mut crypto: Vec<u8> = Vec::new();
    let mut max_end = 0usize;
    while !b.is_empty() {
        let b0 = b[0];
        if b0 & 0x80 == 0 || b0 & 0x40 == 0 {
            return Outcome::Not;
        }
        let Some(v) = b.get(1..5) else {
            return Outcome::Not;
        };
        let version = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
        let initial_type = match version {
            V1 | DRAFT29 => 0,
            V2 => 1,
            _ => return Outcome::Not,
        };
        let is_initial = (b0 & 0x30) >> 4 == initial_type;
        let mut pos = 5;
        let Some(&dl) = b.get(pos) else {
            return Outcome::Not;
        };
        let Some(dcid) = b.get(pos + 1..pos + 1 + usize::from(dl)) else {
            return Outcome::Not;
        };
        pos += 1 + usize::from(dl);
        let Some(&sl) = b.get(pos) else {
            return Outcome::Not;
        };
        pos += 1 + usize::from(sl);
        if is_initial {
            let Some(tl) = varint(b, &mut pos).filter(|&t| t <= 65535) else {
                return Outcome::Not;
            };
            pos += tl as usize;
        }
        let Some(len) = varint(b, &mut pos).filter(|&l| (4..=65535).contains(&l)) else {
            return Outcome::Not;
        };
        let (hdr, len) = (pos, len as usize);
        if b.len() < hdr + len {
            return Outcome::NoClue;
        }
        let rest = &b[hdr + len..];
        if !is_initial {
            b = rest;
            continue;
        }
        if len < 20 {
            return Outcome::Not;
        }
        let Some((key, iv, hp)) = client_keys(version, dcid) else {
            return Outcome::Not;
        };
        let Ok(hpk) = quic::HeaderProtectionKey::new(&quic::AES_128, &hp) else {
            return Outcome::Not;
        };
        let Ok(mask) = hpk.new_mask(&b[hdr + 4..hdr + 20]) else {
            return Outcome::Not;
        };
        let mut packet = b[..hdr + len].to_vec();
        packet[0] ^= mask[0] & 0x0f;
        let pn_len = usize::from(packet[0] & 3) + 1;
        let mut pn: u64 = 0;
        for i in 0..pn_len {
            packet[hdr + i] ^= mask[1 + i];
            pn = pn << 8 | u64::from(packet[hdr + i]);
        }
        let mut nonce = iv;
        for (i, x) in pn.to_be_bytes().iter().enumerate() {
            nonce[4 + i] ^= x;
        }
        let Ok(ukey) = UnboundKey::new(&aead::AES_128_GCM, &key) else {
            return Outcome::Not;
        };
        let (head, body) = packet.split_at_mut(hdr + pn_len);
        let Ok(plain) = LessSafeKey::new(ukey).open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&head[..]),
            body,
        ) else {
            return Outcome::Not;
        };
        if !frames(plain, &mut crypto, &mut max_end) {
            return Outcome::Not;
        }
        if let Outcome::Found(mut s) = tls::client_hello_sni(&crypto[..max_end]) {
            s.protocol = "quic";
            return Outcome::Found(s);
        }
        b = rest;
    }
    Outcome::NeedMore
}

/// Walks the frames of a decrypted Initial, writing CRYPTO data into `crypto`. `false` for a
/// frame an Initial may not carry, a malformed frame, or crypto data past [`MAX_CRYPTO`].
fn frames(p: &[u8], crypto: &mut Vec<u8>, max_end: &mut usize) -> bool {
    let mut pos = 0;
    while pos < p.len() {
        let t = p[pos];
        pos += 1;
        match t {
            0x00 | 0x01 => {}
            0x02 | 0x03 => {
                let mut fields = || varint(p, &mut pos);
                let (Some(_), Some(_), Some(ranges), Some(_)) =
                    (fields(), fields(), fields(), fields())
                else {
                    return false;
                };
                for _ in 0..ranges {
                    if varint(p, &mut pos).is_none() || varint(p, &mut pos).is_none() {
                        return false;
                    }
                }
                if t == 0x03 {
                    for _ in 0..3 {
                        if varint(p, &mut pos).is_none() {
                            return false;
                        }
                    }
                }
            }
            0x06 => {
                let (Some(off), Some(n)) = (varint(p, &mut pos), varint(p, &mut pos)) else {
                    return false;
                };
                let (off, n) = (off as usize, n as usize);
                let Some(data) = p.get(pos..pos.saturating_add(n)) else {
                    return false;
                };
                let end = off.saturating_add(n);
                if end > MAX_CRYPTO {
                    return false;
                }
                if crypto.len() < end {
                    crypto.resize(end, 0);
                }
                crypto[off..end].copy_from_slice(data);
                *max_end = (*max_end).max(end);
                pos += n;
            }
            0x1c => {
                let (Some(_), Some(_), Some(n)) = (
                    varint(p, &mut pos),
                    varint(p, &mut pos),
                    varint(p, &mut pos),
                ) else {
                    return false;
                };
                pos = match pos.checked_add(n as usize) {
                    Some(e) if e <= p.len() => e,
                    _ => return false,
                };
            }
            _ => return false,
        }
    }
    true
}

/// Builds a client Initial carrying `crypto` (a CRYPTO frame at offset `off`), padded towards
/// `pad_to` bytes: the test vectors of the scenario tests and the fuzzer's seeds.
#[doc(hidden)]
pub fn build_initial(
    version: u32,
    dcid: &[u8],
    off: u64,
    crypto: &[u8],
    pad_to: usize,
) -> Option<Vec<u8>> {
    let (key, iv, hp) = client_keys(version, dcid)?;
    let mut payload = vec![0x06];
    let put_varint = |v: &mut Vec<u8>, x: u64| {
        if x < 64 {
            v.push(x as u8);
        } else if x < 16384 {
            v.extend_from_slice(&((x as u16) | 0x4000).to_be_bytes());
        } else {
            v.extend_from_slice(&((x as u32) | 0x8000_0000).to_be_bytes());
        }
    };
    put_varint(&mut payload, off);
    put_varint(&mut payload, crypto.len() as u64);
    payload.extend_from_slice(crypto);
    while payload.len() + 16 + 60 < pad_to {
        payload.push(0);
    }
    let pn_len = 2;
    let len = pn_len + payload.len() + 16;
    if len > 0x3fff {
        return None;
    }
    let ty: u8 = if version == V2 { 1 } else { 0 };
    let mut h = vec![0xc0 | ty << 4 | (pn_len as u8 - 1)];
    h.extend_from_slice(&version.to_be_bytes());
    h.push(dcid.len() as u8);
    h.extend_from_slice(dcid);
    h.push(0);
    h.push(0);
    h.extend_from_slice(&((len as u16) | 0x4000).to_be_bytes());
    let hdr = h.len();
    let pn: u16 = 1;
    h.extend_from_slice(&pn.to_be_bytes());
    let mut nonce = iv;
    nonce[11] ^= 1;
    let k = LessSafeKey::new(UnboundKey::new(&aead::AES_128_GCM, &key).ok()?);
    let mut body = payload;
    k.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(&h[..]),
        &mut body,
    )
    .ok()?;
    h.extend_from_slice(&body);
    let hpk = quic::HeaderProtectionKey::new(&quic::AES_128, &hp).ok()?;
    let mask = hpk.new_mask(h.get(hdr + 4..hdr + 20)?).ok()?;
    h[0] ^= mask[0] & 0x0f;
    for i in 0..pn_len {
        h[hdr + i] ^= mask[1 + i];
    }
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9001 Appendix A: the client Initial's keys for DCID 0x8394c8f03e515708.
    #[test]
    fn rfc9001_initial_keys() {
        let dcid = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
        let (key, iv, hp) = client_keys(V1, &dcid).unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(&key), "1f369613dd76d5467730efcbe3b1a22d");
        assert_eq!(hex(&iv), "fa044b2f42a3fd3b46fb255c");
        assert_eq!(hex(&hp), "9f50449e04a0e810283a1e9933adedd2");
        let (key, iv, hp) = client_keys(V2, &dcid).unwrap();
        assert_eq!(hex(&key), "8b1a0bc121284290a29e0971b5cd045d");
        assert_eq!(hex(&iv), "91f73e2351d8fa91660e909f");
        assert_eq!(hex(&hp), "45b95e15235d6f45a6b19cbcb0294ba9");
    }

    fn hello() -> Vec<u8> {
        // The ClientHello handshake message (without the TLS record header).
        tls::tests::client_hello("quic.example")[5..].to_vec()
    }

    #[test]
    fn initial_sni_v1_draft29_v2() {
        for v in [V1, DRAFT29, V2] {
            let pkt = build_initial(v, &[1, 2, 3, 4, 5, 6, 7, 8], 0, &hello(), 1200).unwrap();
            match sniff(&pkt) {
                Outcome::Found(s) => {
                    assert_eq!((s.protocol, s.domain.as_str()), ("quic", "quic.example"))
                }
                other => panic!("{v:x}: {other:?}"),
            }
            for cut in 0..pkt.len() {
                assert_ne!(
                    std::mem::discriminant(&sniff(&pkt[..cut])),
                    std::mem::discriminant(&Outcome::Found(Default::default())),
                    "cut {cut}"
                );
            }
        }
    }

    #[test]
    fn split_over_two_datagrams() {
        let h = hello();
        let (a, b) = h.split_at(40);
        let p1 = build_initial(V1, &[9; 8], 0, a, 0).unwrap();
        let p2 = build_initial(V1, &[9; 8], a.len() as u64, b, 0).unwrap();
        assert_eq!(sniff(&p1), Outcome::NeedMore);
        let mut both = p1.clone();
        both.extend_from_slice(&p2);
        assert!(matches!(sniff(&both), Outcome::Found(_)));
        // Reversed order also reassembles.
        let mut rev = p2.clone();
        rev.extend_from_slice(&p1);
        assert!(matches!(sniff(&rev), Outcome::Found(_)));
    }

    #[test]
    fn bad_input_is_not_quic() {
        assert_eq!(sniff(b"\x40short"), Outcome::Not);
        assert_eq!(
            sniff(&[0xc0, 0, 0, 0, 2, 0]),
            Outcome::Not,
            "unknown version"
        );
        let mut pkt = build_initial(V1, &[1; 8], 0, &hello(), 1200).unwrap();
        let n = pkt.len();
        pkt[n - 1] ^= 1;
        assert_eq!(sniff(&pkt), Outcome::Not, "tag fails");
        // Crypto data past the 32767-byte buffer.
        let pkt = build_initial(V1, &[1; 8], 40000, &hello(), 1200).unwrap();
        assert_eq!(sniff(&pkt), Outcome::Not);
        assert_eq!(sniff(&[]), Outcome::NeedMore);
    }
}
