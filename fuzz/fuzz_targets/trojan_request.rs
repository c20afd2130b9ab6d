//! Trojan request and UDP frame decoders: never panic; what decodes re-encodes to the same.
#![no_main]
use ferry::proxy::trojan::codec;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(Some((req, n))) = codec::decode_request(data) {
        assert!(n <= data.len());
        let mut again = Vec::new();
        codec::encode_request(&req.hash, req.cmd, &req.dest, &mut again);
        let (back, m) = codec::decode_request(&again).unwrap().unwrap();
        assert_eq!((m, back), (again.len(), req));
    }
    let mut rest = data;
    while let Ok(Some((addr, payload, n))) = codec::decode_udp(rest) {
        assert!(payload.end <= n && n <= rest.len() && n > 0);
        let mut again = Vec::new();
        codec::encode_udp(&addr, &rest[payload.clone()], &mut again);
        assert_eq!(codec::decode_udp(&again).unwrap().unwrap().2, again.len());
        rest = &rest[n..];
    }
});
