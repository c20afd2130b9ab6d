//! The DNS reply parser: garbage replies are errors, never panics; answers it builds parse back.
#![no_main]
use ferry::app::dns::message;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() >= 2 {
        let id = u16::from_be_bytes([data[0], data[1]]);
        let _ = message::parse_reply(data, id);
    }
    let _ = message::question(data);
    if let Some(r) = message::answer(data, 0, &["1.2.3.4".parse().unwrap()], 60) {
        let id = u16::from_be_bytes([r[0], r[1]]);
        let _ = message::parse_reply(&r, id);
    }
});
