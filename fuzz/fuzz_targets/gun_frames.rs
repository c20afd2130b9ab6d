//! The gRPC (gun) message reader: any bytes, cut into DATA frames of any size, never panic,
//! never yield more payload than came in, and what `encode` frames reads back unchanged.
#![no_main]
use bytes::BytesMut;
use ferry::transport::grpc::gun::{encode, Decoder, Step};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let step = ctl as usize + 1;
    let mut d = Decoder::default();
    let mut buf = BytesMut::new();
    let mut total = 0usize;
    'feed: for chunk in rest.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match d.step(&mut buf) {
                Ok(Step::Data(n)) => {
                    assert!(n <= buf.len());
                    let take = n.min(ctl as usize % 7 + 1);
                    let _ = buf.split_to(take);
                    d.consume(take);
                    total += take;
                }
                Ok(Step::More) => break,
                Err(_) => break 'feed,
            }
        }
    }
    assert!(total <= rest.len());
    // Round trip.
    let mut wire = BytesMut::new();
    for piece in rest.chunks(step * 3) {
        encode(piece, &mut wire);
    }
    let mut d = Decoder::default();
    let mut got = Vec::new();
    while let Ok(Step::Data(n)) = d.step(&mut wire) {
        got.extend_from_slice(&wire.split_to(n));
        d.consume(n);
    }
    assert_eq!(got, rest);
    assert!(d.at_boundary() && wire.is_empty());
});
