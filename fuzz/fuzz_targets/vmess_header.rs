//! VMess header decoders (instruction, legacy and AEAD request headers, AEAD response header).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ferry::proxy::vmess::fuzz::header_decoders(data);
});
