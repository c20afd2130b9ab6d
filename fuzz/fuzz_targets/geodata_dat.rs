//! The .dat reader: streaming any bytes as a GeoIPList / GeoSiteList never panics; every entry
//! it hands over decodes (or fails) cleanly, and what decodes re-encodes and decodes the same.
#![no_main]
use ferry::app::router::geodata::wire::{self, Visit};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut bodies = Vec::new();
    let _ = wire::scan(
        &mut &data[..],
        |_| Visit::Body,
        |code, body| {
            bodies.push((code.to_string(), body));
            Ok(true)
        },
    );
    for (code, body) in &bodies {
        if let Ok(cidrs) = wire::geoip_cidrs(body) {
            let again = wire::encode_geoip(&[(code.as_str(), &cidrs)]);
            let mut got = Vec::new();
            wire::scan(&mut &again[..], |_| Visit::Body, |_, b| {
                got.push(b);
                Ok(true)
            })
            .unwrap();
            assert_eq!(wire::geoip_cidrs(&got[0]).unwrap(), cidrs);
        }
        if let Ok(domains) = wire::geosite_domains(body) {
            let again = wire::encode_geosite(&[(code.as_str(), &domains)]);
            let mut got = Vec::new();
            wire::scan(&mut &again[..], |_| Visit::Body, |_, b| {
                got.push(b);
                Ok(true)
            })
            .unwrap();
            assert_eq!(wire::geosite_domains(&got[0]).unwrap(), domains);
        }
    }
});
