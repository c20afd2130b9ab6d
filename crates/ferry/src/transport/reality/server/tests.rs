//! The server's decisions driven with bytes: authentication, the target's flight, the answer.

use std::time::Duration;

use super::super::cert::Temporary;
use super::super::hello::{self, ClientHello};
use super::super::keys;
use super::super::record;
use super::super::ServerSettings;
use super::*;
use crate::common::{Address, Destination};
use crate::transport::reality::{fingerprint, RateLimit};

fn settings() -> ServerSettings {
    ServerSettings {
        target: Destination::new(Address::Domain("t".into()), 443),
        xver: 0,
        server_names: vec!["reality.test".into()],
        private_key: [7u8; 32],
        short_ids: vec![[0u8; 8], [1, 2, 3, 4, 5, 6, 7, 8]],
        min_client_ver: Some([1, 8, 0]),
        max_client_ver: None,
        max_time_diff: Some(Duration::from_secs(60)),
        limit_upload: RateLimit::default(),
        limit_download: RateLimit::default(),
        mldsa65_seed: None,
    }
}

/// A hello from our own client side, sealed for `settings()`'s key.
fn hello(sni: &str, version: [u8; 3], time: u32, short_id: [u8; 8]) -> ClientHello {
    let (mut ch, k) = hello::build(&fingerprint::CHROME, Some(sni));
    let random: [u8; 32] = ch[6..38].try_into().unwrap();
    let shared = keys::x25519(k.auth_private().unwrap(), &keys::x25519_public(&[7u8; 32])).unwrap();
    let auth = keys::auth_key(&shared, &random);
    let mut plain = [0u8; 16];
    plain[..3].copy_from_slice(&version);
    plain[4..8].copy_from_slice(&time.to_be_bytes());
    plain[8..].copy_from_slice(&short_id);
    let sid = keys::seal_session_id(&auth, &random, &plain, &ch);
    ch[hello::SESSION_ID_AT..hello::SESSION_ID_AT + 32].copy_from_slice(&sid);
    ClientHello::parse(&ch).unwrap()
}

#[test]
fn only_a_sealed_hello_with_listed_name_id_version_and_time_is_ours() {
    let s = settings();
    let now = 1_800_000_000u32;
    let ms = now as i64 * 1000;
    let ok = hello("reality.test", [26, 7, 28], now, [0; 8]);
    assert!(authenticate(&ok, &s, ms).is_ok());
    assert_eq!(
        authenticate(&hello("other.test", [26, 7, 28], now, [0; 8]), &s, ms).unwrap_err(),
        Stranger::Sni(Some("other.test".into()))
    );
    assert_eq!(
        authenticate(&hello("reality.test", [1, 7, 9], now, [0; 8]), &s, ms).unwrap_err(),
        Stranger::Version([1, 7, 9])
    );
    assert!(matches!(
        authenticate(
            &hello("reality.test", [26, 7, 28], now - 120, [0; 8]),
            &s,
            ms
        ),
        Err(Stranger::Time(_))
    ));
    assert_eq!(
        authenticate(&hello("reality.test", [26, 7, 28], now, [9; 8]), &s, ms).unwrap_err(),
        Stranger::ShortId([9; 8])
    );
    // Another server's key: the session id does not open.
    let mut other = settings();
    other.private_key = [8u8; 32];
    assert_eq!(
        authenticate(&ok, &other, ms).unwrap_err(),
        Stranger::SessionId
    );
    // One byte of the hello changed (it is the AAD): not ours.
    let mut raw = ok.raw.clone();
    let last = raw.len() - 1;
    raw[last] ^= 1;
    if let Ok(ch) = ClientHello::parse(&raw) {
        assert!(authenticate(&ch, &s, ms).is_err());
    }
}

/// A target's first flight: its ServerHello (X25519, AES-128-GCM), CCS, four encrypted
/// records of the given lengths, and a ticket record.
fn target_flight(ch: &ClientHello, lengths: &[usize], ticket: Option<usize>) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[0x5a; 32]);
    body.push(32);
    body.extend_from_slice(&ch.session_id);
    body.extend_from_slice(&[0x13, 0x01, 0]);
    let mut exts = vec![0, 0x2b, 0, 2, 3, 4, 0, 0x33, 0, 0x24, 0, 0x1d, 0, 32];
    exts.extend_from_slice(&[0x77; 32]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut sh = Vec::new();
    hello::message(hello::SERVER_HELLO, &body, &mut sh);
    let mut out = vec![22, 3, 3];
    out.extend_from_slice(&(sh.len() as u16).to_be_bytes());
    out.extend_from_slice(&sh);
    out.extend_from_slice(&[20, 3, 3, 0, 1, 1]);
    for len in lengths.iter().chain(ticket.iter()) {
        out.extend_from_slice(&[23, 3, 3]);
        out.extend_from_slice(&((len - 5) as u16).to_be_bytes());
        out.resize(out.len() + len - 5, 0xee);
    }
    out
}

/// Splits a flight into its records' lengths.
fn record_lengths(mut b: &[u8]) -> Vec<usize> {
    let mut v = Vec::new();
    while let Some(n) = record::complete(b) {
        v.push(n);
        b = &b[n..];
    }
    assert!(b.is_empty());
    v
}

#[test]
fn a_short_combined_flight_is_whole_once_the_target_is_quiet() {
    let ch = hello("reality.test", [26, 7, 28], 0, [0; 8]);
    // One encrypted record of 480 bytes (rustls with a small certificate).
    let t = target_flight(&ch, &[480], None);
    assert!(matches!(TargetFlight::parse(&t), Ok(None)));
    let f = TargetFlight::parse_quiet(&t).unwrap().unwrap();
    assert!(f.combined);
    assert_eq!(f.lengths.len(), 1);
    // Quiet in the middle of a record is still not a flight.
    assert!(matches!(
        TargetFlight::parse_quiet(&t[..t.len() - 1]),
        Ok(None)
    ));
}

#[test]
fn the_answer_has_the_targets_server_hello_and_record_lengths() {
    let s = settings();
    let ch = hello("reality.test", [26, 7, 28], 0, [0; 8]);
    let mut s2 = s.clone();
    s2.max_time_diff = None;
    let a = authenticate(&ch, &s2, 0).unwrap();
    let cert = Temporary::generate();
    for (lengths, ticket) in [
        (vec![41usize, 1234, 100, 58], Some(250usize)),
        (vec![4321], None),
    ] {
        let t = target_flight(&ch, &lengths, ticket);
        // Every cut of the flight before its end needs more bytes; the whole one parses.
        for cut in [0, 3, 10, 100, t.len() - 1] {
            if ticket.is_none() || cut < t.len() - ticket.unwrap() {
                assert!(
                    matches!(TargetFlight::parse(&t[..cut]), Ok(None)),
                    "cut {cut}"
                );
            }
        }
        let f = TargetFlight::parse(&t).unwrap().unwrap();
        assert_eq!(f.combined, lengths.len() == 1);
        let ans = respond(&ch, &a, &f, &cert).unwrap();
        let got = record_lengths(&ans.bytes);
        let want = record_lengths(&t);
        assert_eq!(got, want, "record lengths");
        // The ServerHello is the target's but for the key share.
        let sh_len = want[0];
        let share = f.server_hello.share.clone();
        let (ours, theirs) = (&ans.bytes[5..sh_len], &t[5..sh_len]);
        assert_eq!(ours[..share.start], theirs[..share.start]);
        assert_eq!(ours[share.end..], theirs[share.end..]);
        assert_ne!(ours[share.clone()], theirs[share]);
    }
    // A target record too short for our message is refused, not truncated.
    let t = target_flight(&ch, &[41, 100, 100, 58], None);
    let f = TargetFlight::parse(&t).unwrap().unwrap();
    assert!(matches!(
        respond(&ch, &a, &f, &cert),
        Err(FlightError::Shape(_))
    ));
    // Not a ServerHello: the client goes to the target.
    assert!(matches!(
        TargetFlight::parse(b"HTTP/1.1 400 Bad Request\r\n"),
        Err(FlightError::NotServerHello(_))
    ));
}
