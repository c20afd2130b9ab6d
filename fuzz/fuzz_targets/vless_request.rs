//! VLESS request and response header decoders: never panic; what decodes re-encodes to a
//! header that decodes to the same request.
#![no_main]
use ferry::proxy::vless::codec;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = codec::decode_response(data);
    if let Ok(Some((req, n))) = codec::decode_request(data) {
        assert!(n <= data.len());
        if req.flow.is_empty() {
            let mut again = Vec::new();
            codec::encode_request(&req.uuid, req.cmd, req.dest.as_ref(), &mut again);
            let (back, m) = codec::decode_request(&again).unwrap().unwrap();
            assert_eq!(m, again.len());
            assert_eq!((back.uuid, back.cmd, &back.dest), (req.uuid, req.cmd, &req.dest));
        }
    }
});
