//! Shadowsocks 2022 decoders (headers, response check, chunks, UDP packets with EIH).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ferry::proxy::shadowsocks::fuzz::ss2022(data);
});
