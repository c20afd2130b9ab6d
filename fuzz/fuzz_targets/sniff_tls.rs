//! The TLS ClientHello sniffer (and the HTTP and BitTorrent sniffers beside it): any bytes,
//! never a panic; a found name is a prefix-stable answer (more bytes after a complete record
//! do not change it).
#![no_main]
use ferry::app::sniff::{self, Outcome};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let r = sniff::tls::sniff(data);
    if let Outcome::Found(s) = &r {
        assert_eq!(s.protocol, "tls");
        let mut more = data.to_vec();
        more.extend_from_slice(b"\x17\x03\x03\x00\x01x");
        assert_eq!(sniff::tls::sniff(&more), r);
    }
    let _ = sniff::tls::client_hello_sni(data);
    let _ = sniff::http::sniff(data);
    let _ = sniff::bittorrent(data);
    let mut l = sniff::Loop::new(sniff::Sniffers::tcp());
    let _ = l.step(data, true, true);
});
