//! Micro-benchmark of the FNV-1a checksum VMess's legacy body uses (run with
//! `cargo run --release --example fnv_bench`). FNV-1a is one serial xor-multiply chain, so a
//! single buffer is bound by the multiply latency; independent chunks interleave.

use std::hint::black_box;
use std::time::Instant;

use ferry::proxy::vmess::body::{fnv1a32, fnv1a32_many};

fn byte_loop(d: &[u8]) -> u32 {
    d.iter().fold(0x811c9dc5u32, |h, b| {
        (h ^ *b as u32).wrapping_mul(0x01000193)
    })
}

fn report(name: &str, bytes: usize, f: impl FnOnce() -> u32) {
    let t = Instant::now();
    let sink = f();
    let e = t.elapsed().as_secs_f64();
    println!("{name:<24} {:.2} GB/s ({sink:08x})", bytes as f64 / e / 1e9);
}

fn main() {
    let data: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let n = 40_000usize;
    let total = n * data.len();
    report("byte loop", total, || {
        (0..n).fold(0, |s, _| s ^ byte_loop(black_box(&data)))
    });
    report("fnv1a32 (unrolled)", total, || {
        (0..n).fold(0, |s, _| s ^ fnv1a32(black_box(&data)))
    });
    report("2 chunks interleaved", total, || {
        (0..n / 2).fold(0, |s, _| {
            let r = fnv1a32_many(black_box([&data[..], &data[..]]));
            s ^ r[0] ^ r[1]
        })
    });
    report("4 chunks interleaved", total, || {
        (0..n / 4).fold(0, |s, _| {
            let r = fnv1a32_many(black_box([&data[..], &data[..], &data[..], &data[..]]));
            s ^ r[0] ^ r[3]
        })
    });
}
