//! The QUIC Initial sniffer: any datagrams (mutated from a real Initial, so the decryption path
//! is reached), never a panic, never more than the 32767-byte crypto buffer.
#![no_main]
use ferry::app::sniff::{quic, Outcome};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = quic::sniff(data);
    // The same bytes as the CRYPTO payload of a valid Initial: exercises the frame and
    // ClientHello parsers behind the AEAD.
    if data.len() > 2 {
        let off = u64::from(u16::from_be_bytes([data[0], data[1]]));
        if let Some(pkt) = quic::build_initial(1, &[7; 8], off, &data[2..], 1200) {
            match quic::sniff(&pkt) {
                Outcome::Found(s) => assert_eq!(s.protocol, "quic"),
                Outcome::NoClue => panic!("a whole packet is never too short"),
                _ => {}
            }
        }
    }
});
