//! VMess chunk decoder: every security type and option combination, input fed in pieces.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ferry::proxy::vmess::fuzz::chunk_decoder(data);
});
