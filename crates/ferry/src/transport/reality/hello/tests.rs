//! The builder's hellos read back by the parser; hostile hellos refused.

use super::reader::Reader;
use super::*;
use crate::transport::reality::fingerprint::{CHROME, EDGE, FIREFOX, IOS, SAFARI};

#[test]
fn every_template_builds_a_hello_the_parser_reads_back() {
    for t in [&CHROME, &FIREFOX, &SAFARI, &IOS, &EDGE] {
        let (msg, keys) = build(t, Some("reality.test"));
        let ch = ClientHello::parse(&msg).unwrap();
        assert_eq!(ch.sni.as_deref(), Some("reality.test"));
        assert_eq!(ch.session_id, vec![0u8; 32]);
        assert!(ch.versions.contains(&TLS13));
        assert!(ch.share(X25519).is_some_and(|s| s.len() == 32));
        assert!(keys.auth_private().is_some());
        assert_eq!(ch.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    }
    // Chrome: the hybrid share comes before X25519, GREASE first in the suites.
    let (msg, _) = build(&CHROME, None);
    let ch = ClientHello::parse(&msg).unwrap();
    assert_eq!(ch.sni, None);
    let groups: Vec<u16> = ch.key_shares.iter().map(|(g, _)| *g).collect();
    assert_eq!(&groups[1..], &[X25519MLKEM768, X25519]);
    assert!(is_grease(groups[0]) && is_grease(ch.cipher_suites[0]));
    assert_eq!(ch.share(X25519MLKEM768).unwrap().len(), MLKEM_CLIENT_SHARE);
    // uTLS Chrome 133 without SNI: 1552 bytes plus an ECH payload of 144 to 240.
    assert!(
        [144, 176, 208, 240].contains(&(msg.len() - 1552)),
        "{}",
        msg.len()
    );
}

#[test]
fn chrome_shuffles_its_extensions_but_keeps_grease_at_both_ends() {
    let order = |msg: &[u8]| -> Vec<u16> {
        let ch = ClientHello::parse(msg).unwrap();
        let mut r = Reader::new(&ch.raw[4..]);
        r.take(2 + 32).unwrap();
        r.vec8().unwrap();
        r.vec16().unwrap();
        r.vec8().unwrap();
        let mut e = Reader::new(r.vec16().unwrap());
        let mut v = Vec::new();
        while !e.done() {
            v.push(e.u16().unwrap());
            e.vec16().unwrap();
        }
        v
    };
    let orders: Vec<Vec<u16>> = (0..8)
        .map(|_| order(&build(&CHROME, Some("a.b")).0))
        .collect();
    for o in &orders {
        assert!(is_grease(o[0]) && is_grease(*o.last().unwrap()));
        assert_ne!(o[0], *o.last().unwrap());
        assert_eq!(o.len(), 18);
    }
    assert!(orders.iter().any(|o| o[1..17] != orders[0][1..17]));
}

/// Rewrites the key_share extension of a built hello with `shares`, fixing the lengths.
fn with_key_share(msg: &[u8], shares: &[u8]) -> Vec<u8> {
    let ch = ClientHello::parse(msg).unwrap();
    // key_share's data begins 2 bytes (its list length) before the first share.
    let first = ch.key_shares[0].1.start - 4;
    let list_at = first - 2;
    let ext_at = list_at - 4;
    let old_len = u16::from_be_bytes([msg[ext_at + 2], msg[ext_at + 3]]) as usize;
    let mut data = (shares.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(shares);
    let mut out = msg[..ext_at + 2].to_vec();
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(&data);
    out.extend_from_slice(&msg[ext_at + 4 + old_len..]);
    let grow = data.len() as isize - old_len as isize;
    // The extensions block length and the message length.
    let body_len = out.len() - 4;
    out[1..4].copy_from_slice(&(body_len as u32).to_be_bytes()[1..]);
    let mut r = Reader::new(&out[4..]);
    r.take(34).unwrap();
    r.vec8().unwrap();
    r.vec16().unwrap();
    r.vec8().unwrap();
    let exts_len_at = 4 + r.at;
    let old = u16::from_be_bytes([out[exts_len_at], out[exts_len_at + 1]]) as isize;
    out[exts_len_at..exts_len_at + 2].copy_from_slice(&((old + grow) as u16).to_be_bytes());
    out
}

#[test]
fn duplicate_key_shares_and_oversized_extensions_are_refused() {
    let (msg, _) = build(&EDGE, Some("reality.test"));
    let mut x = vec![0x00, 0x1d, 0x00, 0x20];
    x.extend_from_slice(&[9u8; 32]);
    let one = with_key_share(&msg, &x);
    assert_eq!(ClientHello::parse(&one).unwrap().key_shares.len(), 1);
    let two = with_key_share(&msg, &[x.clone(), x.clone()].concat());
    assert_eq!(
        ClientHello::parse(&two).unwrap_err(),
        Malformed("duplicate key share")
    );
    // A share that claims more bytes than the extension holds.
    let mut long = x.clone();
    long[3] = 0xff;
    assert!(ClientHello::parse(&with_key_share(&msg, &long)).is_err());
    // An extension whose length runs past the message: the first one's, made 0xffff.
    let mut bad = one.clone();
    let mut r = Reader::new(&bad[4..]);
    r.take(34).unwrap();
    r.vec8().unwrap();
    r.vec16().unwrap();
    r.vec8().unwrap();
    let first_len_at = 4 + r.at + 2 + 2;
    bad[first_len_at..first_len_at + 2].copy_from_slice(&[0xff, 0xff]);
    assert!(ClientHello::parse(&bad).is_err());
}

#[test]
fn hellos_split_across_records_are_joined_and_bad_ones_refused() {
    let (msg, _) = build(&CHROME, Some("reality.test"));
    let mut recs = Vec::new();
    for part in msg.chunks(700) {
        recs.extend_from_slice(&[22, 3, 1]);
        recs.extend_from_slice(&(part.len() as u16).to_be_bytes());
        recs.extend_from_slice(part);
    }
    for cut in [0, 3, 5, 700, recs.len() - 1] {
        assert_eq!(message_from_records(&recs[..cut], 1 << 16), Ok(None));
    }
    let (got, used) = message_from_records(&recs, 1 << 16).unwrap().unwrap();
    assert_eq!((got, used), (msg.clone(), recs.len()));
    assert!(message_from_records(b"GET / HTTP/1.1\r\n", 1 << 16).is_err());
    // Every truncation of the message itself is refused by the parser, never a panic.
    for cut in 0..msg.len() {
        assert!(ClientHello::parse(&msg[..cut]).is_err());
    }
}
