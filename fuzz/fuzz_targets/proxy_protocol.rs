//! PROXY protocol v1/v2 parser and the fallback selector's HTTP path reader: never panic on
//! any bytes; a parsed header lies inside the input and every prefix of it is incomplete; a
//! header with addresses re-encodes (v1 and v2) to one that parses to the same addresses.
#![no_main]
use ferry::proxy::fallback::request_path;
use ferry::session::Endpoint;
use ferry::transport::proxy_protocol::{encode, parse, Parsed};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(p) = request_path(data) {
        assert!(p.starts_with('/') && p.len() < 64);
    }
    if let Parsed::Header { len, source, dest } = parse(data) {
        assert!(len <= data.len());
        assert_eq!(parse(&data[..len - 1]), Parsed::Incomplete);
        if let (Some(s), Some(d)) = (source, dest) {
            for v in [1u8, 2] {
                let h = encode(v, &Endpoint::Ip(s), &Endpoint::Ip(d));
                match parse(&h) {
                    Parsed::Header { len, source: Some(s2), dest: Some(d2) } => {
                        assert_eq!(len, h.len());
                        // Mixed families are written as IPv6 (mapped), ports always kept.
                        assert_eq!((s2.port(), d2.port()), (s.port(), d.port()));
                        if s.is_ipv4() == d.is_ipv4() {
                            assert_eq!((s2, d2), (s, d));
                        }
                    }
                    other => panic!("re-encoded header parsed as {other:?}"),
                }
            }
        }
    }
});
