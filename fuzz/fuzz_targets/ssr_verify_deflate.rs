//! ShadowsocksR: verify_deflate decoders (server and client sides, input cut at every piece size).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ferry::proxy::shadowsocksr::fuzz::verify_deflate(data);
});
