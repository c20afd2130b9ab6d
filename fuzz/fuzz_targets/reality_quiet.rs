//! REALITY's reading of the target's first flight on hostile bytes, as the server reads it:
//! the flight grows read by read, each prefix is parsed as if more may come and as if the
//! target went quiet there (`parse_quiet`), and a flight either parser takes is answered
//! (`respond`) for a genuine client. Never a panic; a flight lies inside the bytes read; an
//! answer has the target's record lengths exactly.
#![no_main]
mod feed;

use std::sync::OnceLock;

use ferry::transport::reality::cert::Temporary;
use ferry::transport::reality::hello::{self, ClientHello};
use ferry::transport::reality::server::{respond, Authenticated, TargetFlight};
use ferry::transport::reality::fingerprint;
use ferry::transport::tls13::record;

struct Fixed {
    ch: ClientHello,
    auth: Authenticated,
    cert: Temporary,
}

/// A client hello (X25519 and X25519MLKEM768 shares) and a certificate, made once.
fn fixed() -> &'static Fixed {
    static F: OnceLock<Fixed> = OnceLock::new();
    F.get_or_init(|| {
        let (raw, _) = hello::build(&fingerprint::CHROME, Some("reality.test"));
        Fixed {
            ch: ClientHello::parse(&raw).unwrap(),
            auth: Authenticated { auth: [5; 32], version: [26, 7, 28], short_id: [0; 8] },
            cert: Temporary::generate(),
        }
    })
}

fn check(b: &[u8], f: &TargetFlight) {
    let x = fixed();
    let sh_len = record::complete(b).expect("a flight starts with a whole record");
    let total = sh_len + 6 + f.lengths.iter().sum::<usize>() + f.ticket.unwrap_or(0);
    assert!(total <= b.len(), "a flight of {total} bytes out of {}", b.len());
    assert!(matches!(f.lengths.len(), 1 | 4));
    assert_eq!(f.combined, f.lengths.len() == 1);
    assert!(f.server_hello.share.end <= f.server_hello.raw.len());
    if let Ok(a) = respond(&x.ch, &x.auth, f, &x.cert) {
        assert_eq!(a.bytes.len(), total, "the answer's length is not the flight's");
        let mut at = 0;
        let mut want = 0;
        while at < a.bytes.len() {
            let n = record::complete(&a.bytes[at..]).expect("whole records");
            let m = record::complete(&b[want..]).expect("the target's records");
            assert_eq!(n, m, "record lengths differ");
            at += n;
            want += m;
        }
    }
}

/// The record header of a ServerHello for the fixed client hello: X25519 (or
/// X25519MLKEM768), TLS_AES_128_GCM_SHA256, then the ChangeCipherSpec.
fn server_hello(mlkem: bool) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[0x5a; 32]);
    body.push(32);
    body.extend_from_slice(&fixed().ch.session_id);
    body.extend_from_slice(&[0x13, 0x01, 0]);
    let (group, share) = if mlkem {
        (hello::X25519MLKEM768, hello::MLKEM_SERVER_SHARE)
    } else {
        (hello::X25519, 32)
    };
    let mut exts = vec![0, 0x2b, 0, 2, 3, 4, 0, 0x33];
    exts.extend_from_slice(&(share as u16 + 4).to_be_bytes());
    exts.extend_from_slice(&group.to_be_bytes());
    exts.extend_from_slice(&(share as u16).to_be_bytes());
    exts.resize(exts.len() + share, 0x77);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut sh = Vec::new();
    hello::message(hello::SERVER_HELLO, &body, &mut sh);
    let mut out = vec![22, 3, 3];
    out.extend_from_slice(&(sh.len() as u16).to_be_bytes());
    out.extend_from_slice(&sh);
    out.extend_from_slice(&[20, 3, 3, 0, 1, 1]);
    out
}

/// Records from a compact description: `[type selector, length (BE16)]` per record.
fn records(d: &[u8], out: &mut Vec<u8>) {
    for r in d.chunks_exact(3) {
        let ty = [23, 23, 23, 22, 20, 21, 0, 0xff][r[0] as usize & 7];
        let len = u16::from_be_bytes([r[1], r[2]]) & 0x3fff;
        out.extend_from_slice(&[ty, 3, 3]);
        out.extend_from_slice(&len.to_be_bytes());
        out.resize(out.len() + len as usize, 0xee);
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (ctl, step, rest) = feed::split(data);
    // The flight: the raw input, or a genuine ServerHello and CCS followed by the input raw or
    // read as a list of records (so the parsers see well-formed records of any lengths).
    let flight;
    let rest = match ctl & 3 {
        0 => rest,
        mode => {
            let mut f = server_hello(mode == 2);
            if mode == 3 || ctl & 4 != 0 {
                records(rest, &mut f);
            } else {
                f.extend_from_slice(rest);
            }
            flight = f;
            &flight[..]
        }
    };
    let step = step * [1, 1, 16, 256][(ctl as usize >> 6) & 3];
    let mut len = 0;
    loop {
        len = (len + step).min(rest.len());
        let b = &rest[..len];
        match TargetFlight::parse(b) {
            Ok(Some(f)) => {
                check(b, &f);
                return;
            }
            Ok(None) => {
                if let Ok(Some(f)) = TargetFlight::parse_quiet(b) {
                    check(b, &f);
                }
            }
            Err(_) => {
                // The quiet parse refuses what the other does.
                assert!(TargetFlight::parse_quiet(b).is_err());
                return;
            }
        }
        if len == rest.len() {
            return;
        }
    }
});
