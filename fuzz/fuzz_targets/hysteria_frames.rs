//! Hysteria 2's decoders: TCP requests and responses, UDP messages and their reassembly,
//! Salamander: garbage never panics; a request, response or UDP packet built from the input
//! reads back as it was.
#![no_main]
use bytes::Bytes;
use ferry::common::Destination;
use ferry::proxy::hysteria::codec::{self, Defrag, UdpMessage};
use ferry::transport::udpmask::{Salamander, UdpMask};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    codec::fuzz_one(data);
    // Fragments of arbitrary messages into one reassembly slot.
    let mut d = Defrag::default();
    for chunk in data.split(|b| *b == 0xfe) {
        if let Some(m) = UdpMessage::decode(&Bytes::copy_from_slice(chunk)) {
            if let Some((_, whole)) = d.feed(m) {
                assert!(whole.len() <= codec::MAX_UDP + 255 * 2048);
            }
        }
    }
    // What we build reads back.
    if let Ok(s) = std::str::from_utf8(data) {
        if let Some(dest) = Destination::parse(s).filter(|d| d.to_string().len() <= 2048) {
            let req = codec::tcp_request(&dest);
            let (back, n) = codec::read_tcp_request(&req).unwrap().unwrap();
            assert_eq!((back, n), (dest, req.len()));
        }
    }
    let payload = &data[..data.len().min(codec::MAX_UDP)];
    if !payload.is_empty() {
        let max = 64 + usize::from(data[0]) * 8;
        let parts = codec::udp_datagrams(7, "127.0.0.1:53", payload, max);
        let mut d = Defrag::default();
        let mut got = None;
        for p in &parts {
            assert!(p.len() <= max);
            got = d.feed(UdpMessage::decode(p).unwrap());
        }
        if !parts.is_empty() {
            assert_eq!(&got.unwrap().1[..], payload);
        }
    }
    let s = Salamander::new(b"fuzz-pass");
    let mut buf = data.to_vec();
    if let Some(r) = s.decode(&mut buf) {
        let mut wire = Vec::new();
        s.encode(&buf[r.clone()], &mut wire);
        assert_eq!(wire.len(), r.len() + 8);
    }
});
