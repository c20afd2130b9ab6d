//! Shadowsocks stream ciphers with one-time auth, as a server and a client read hostile bytes
//! (see `ferry::proxy::shadowsocks::fuzz::stream_ota`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferry::proxy::shadowsocks::fuzz::stream_ota(data);
});
