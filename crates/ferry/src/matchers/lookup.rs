//! `ferry geodata FILE QUERY`: which tags of a geodata file hold an address or a domain.

use std::path::Path;

use super::cidr::IpRanges;
use super::domain::DomainTable;
use super::geodata;

/// The tags of `path` that contain `query` (an IP, or a domain), with the attributes under
/// which a domain matched (`CODE@attr` for each attribute of a matching entry).
pub fn lookup(path: &Path, query: &str) -> Result<Vec<String>, geodata::GeoError> {
    let ip: Option<std::net::IpAddr> = query.parse().ok();
    let lower = query.to_ascii_lowercase();
    let mut out = Vec::new();
    geodata::each_entry(path, |code, body| {
        if let Some(ip) = ip {
            if let Ok(c) = geodata::wire::geoip_cidrs(body) {
                if IpRanges::from_cidrs(&c).contains(ip) {
                    out.push(code.to_string());
                }
            }
            return Ok(());
        }
        let Ok(domains) = geodata::wire::geosite_domains(body) else {
            return Ok(());
        };
        let mut attrs = Vec::new();
        let mut hit = false;
        for d in &domains {
            if let Ok(t) = DomainTable::build([(d.kind, d.value)]) {
                if t.matches_lower(&lower) {
                    hit = true;
                    attrs.extend(d.attrs.iter().map(|a| format!("{code}@{a}")));
                }
            }
        }
        if hit {
            out.push(code.to_string());
            attrs.sort();
            attrs.dedup();
            out.extend(attrs);
        }
        Ok(())
    })?;
    Ok(out)
}
