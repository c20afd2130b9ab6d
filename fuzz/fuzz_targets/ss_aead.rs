//! Shadowsocks AEAD decoders (chunk stream, multi-user key trial, UDP packets).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ferry::proxy::shadowsocks::fuzz::aead(data);
});
