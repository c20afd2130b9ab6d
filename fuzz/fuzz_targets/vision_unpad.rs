//! XTLS Vision: the unpadder never panics on any bytes cut into any buffers, and never makes
//! content out of nothing; what the padder frames unpads to the very same bytes.
#![no_main]
use ferry::proxy::vless::vision::{Padder, TlsFilter, Unpadder, DEFAULT_SEEDS};

const UUID: [u8; 16] = *b"fuzz-vision-uuid";

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (cut, rest) = data.split_at(data.len().min(1));
    let step = cut.first().map(|&c| c as usize + 1).unwrap_or(1);
    // Arbitrary blocks behind the UUID, in buffers of `step` bytes (the first one whole).
    let mut input = UUID.to_vec();
    input.extend_from_slice(rest);
    let mut u = Unpadder::new(UUID);
    let mut out = Vec::new();
    let first = input.len().min(step.max(21));
    u.unpad(&input[..first], &mut out);
    u.end_batch();
    for chunk in input[first..].chunks(step) {
        u.unpad(chunk, &mut out);
        u.end_batch();
    }
    assert!(out.len() <= input.len());
    // Round trip: whatever a batch is, framed and read back as one buffer it is unchanged.
    let mut f = TlsFilter::default();
    let mut p = Padder::new(UUID, DEFAULT_SEEDS);
    let mut wire = Vec::new();
    let raw_from = p.write(rest, &mut f, &mut wire);
    let mut u = Unpadder::new(UUID);
    let mut got = Vec::new();
    u.unpad(&wire, &mut got);
    got.extend_from_slice(&rest[raw_from..]);
    assert_eq!(got, rest);
});
