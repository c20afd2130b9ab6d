//! The HTTP proxy codec as both ends read hostile bytes: the head scanner over a buffer that
//! grows piece by piece (it must find the end the one-shot scan finds), the request head, its
//! credentials, its target and the forward rewrite (which must be a head that scans to its own
//! length and parses, with the same method); the client's status line and response head.
#![no_main]
mod feed;

use ferry::proxy::http::codec::{self, Target};

/// The scanner as a reader drives it: the buffer grows by `step` until it says where the head
/// ends (or that it is too long).
fn scan(buf: &[u8], step: usize) -> Option<usize> {
    let mut s = codec::head_scanner();
    let mut len = 0;
    loop {
        len = (len + step).min(buf.len());
        match s(&buf[..len]) {
            Ok(Some(n)) => {
                assert!(n <= len);
                assert_eq!(codec::head_len(&buf[..len], 0), Ok(Some(n)), "incremental scan differs");
                return Some(n);
            }
            Ok(None) if len == buf.len() => {
                assert_eq!(codec::head_len(buf, 0), Ok(None));
                return None;
            }
            Ok(None) => {}
            Err(_) => {
                assert!(len > codec::MAX_HEAD);
                return None;
            }
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (ctl, step, rest) = feed::split(data);
    let Some(n) = scan(rest, step) else {
        return;
    };
    let head = &rest[..n];
    if let Ok(req) = codec::parse_request(head) {
        if let Some(v) = req.header("Proxy-Authorization") {
            let _ = codec::parse_basic(v);
        }
        if let Ok(Target::Forward { host, path, .. }) = codec::target(&req, ctl & 1 != 0) {
            let out = codec::rewrite_forward(&req, &host, &path);
            assert_eq!(codec::head_len(&out, 0), Ok(Some(out.len())), "{:?}", String::from_utf8_lossy(&out));
            let again = codec::parse_request(&out).expect("the rewritten head parses");
            assert_eq!(again.method, req.method);
            assert_eq!(again.header("Host"), Some(host.as_bytes()));
        }
    }
    if let Ok(r) = codec::parse_response(head) {
        assert_eq!(codec::parse_status(head), Ok(r.status));
        assert!((0..=999).contains(&r.status));
    }
    let _ = codec::parse_authority(&String::from_utf8_lossy(head), 80);
});
