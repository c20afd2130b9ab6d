//! The SOCKS codec as both ends read hostile bytes: the server's greeting, RFC 1929
//! credentials, SOCKS5 request, SOCKS4/4a request and UDP header; the client's method choice,
//! status and reply. Each parser sees the bytes grow piece by piece as a reader's buffer does:
//! never a panic, never a length past the buffer, and once a prefix parses (or fails) the whole
//! parses the same (or fails). A UDP header re-encodes to one that parses back the same.
#![no_main]
mod feed;

use ferry::proxy::socks::codec::{self, Parsed};

/// Feeds `buf` to `parse` growing by `step`, as a reader would; returns what the first
/// non-"need more" answer consumed.
fn grow<'a, T: PartialEq + std::fmt::Debug>(buf: &'a [u8], step: usize, parse: impl Fn(&'a [u8]) -> Parsed<T>) -> Option<usize> {
    let mut len = 0;
    loop {
        len = (len + step).min(buf.len());
        match parse(&buf[..len]) {
            Ok(None) if len == buf.len() => {
                assert!(codec::complete(parse(buf)).is_err());
                return None;
            }
            Ok(None) => {}
            Ok(Some((v, n))) => {
                assert!(n <= len, "used {n} of {len}");
                assert_eq!(parse(buf).unwrap(), Some((v, n)), "a longer buffer parses differently");
                return Some(n);
            }
            Err(e) => {
                assert!(parse(buf).is_err(), "{e:?} on a prefix, fine on the whole");
                return None;
            }
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (ctl, step, rest) = feed::split(data);
    // Server, SOCKS5: greeting, then credentials when asked for, then the request.
    let mut at = 0;
    if let Some(n) = grow(rest, step, codec::parse_greeting) {
        at += n;
        if ctl & 1 != 0 {
            match grow(&rest[at..], step, codec::parse_userpass) {
                Some(n) => at += n,
                None => at = rest.len(),
            }
        }
        grow(&rest[at..], step, codec::parse_request);
    }
    // Server, SOCKS4/4a.
    if let Some(n) = grow(rest, step, codec::parse_socks4) {
        let (r, _) = codec::parse_socks4(rest).unwrap().unwrap();
        assert!(r.user_id.len() <= codec::SOCKS4_MAX_FIELD && n <= rest.len());
    }
    // UDP: a whole datagram.
    if let Ok((dest, n)) = codec::parse_udp(rest) {
        assert!(n <= rest.len());
        let mut again = Vec::new();
        codec::encode_udp_header(&dest, &mut again);
        assert_eq!(again.len(), codec::udp_header_len(&dest));
        assert_eq!(codec::parse_udp(&again), Ok((dest, again.len())));
    }
    // Client: the method choice, the credentials status, the reply.
    let mut at = 0;
    if let Some(n) = grow(rest, step, |b| codec::parse_two(b, codec::VER5)) {
        at += n;
        if ctl & 2 != 0 {
            match grow(&rest[at..], step, |b| codec::parse_two(b, 1)) {
                Some(n) => at += n,
                None => at = rest.len(),
            }
        }
        grow(&rest[at..], step, codec::parse_reply);
    }
});
