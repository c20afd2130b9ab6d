//! The userspace stack's IP packet reader: any bytes give a packet summary inside the input or
//! nothing, and the UDP packets it writes back parse.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ferry::netstack::packet::fuzz_one(data);
});
