//! An inbound's `sniffing` settings: which sniffers' results override the destination, which
//! domains and addresses never do. What sniffing does with them is the app's (`app::sniff`).

use crate::common::reader::{self, ConfigError, Obj, Result};
use crate::matchers::{DomainSet, IpSet};

/// An inbound's `sniffing` object.
#[derive(Debug, Clone, Default)]
pub struct Sniffing {
    /// `http`, `tls`, `quic`, `fakedns` (aliases mapped).
    pub dest_override: Vec<&'static str>,
    pub metadata_only: bool,
    pub route_only: bool,
    pub domains_excluded: Option<DomainSet>,
    pub ips_excluded: Option<IpSet>,
}

impl Sniffing {
    /// Reads `sniffing`; `None` when it is absent or not enabled.
    pub fn parse(o: &Obj<'_>) -> Result<Option<Sniffing>> {
        let enabled = o.bool("enabled")?.unwrap_or(false);
        let mut s = Sniffing::default();
        if let Some((p, v)) = o.get("destOverride") {
            for (i, x) in reader::as_str_list(v, &p)?.iter().enumerate() {
                let d = match x.to_ascii_lowercase().as_str() {
                    "http" => "http",
                    "tls" | "https" | "ssl" => "tls",
                    "quic" => "quic",
                    "fakedns" | "fakedns+others" => "fakedns",
                    other => {
                        return Err(ConfigError::new(
                            format!("{p}[{i}]"),
                            format!("unknown sniffing protocol {other:?}"),
                        ))
                    }
                };
                if !s.dest_override.contains(&d) {
                    s.dest_override.push(d);
                }
            }
        }
        s.metadata_only = o.bool("metadataOnly")?.unwrap_or(false);
        s.route_only = o.bool("routeOnly")?.unwrap_or(false);
        if let Some((p, v)) = o.get("domainsExcluded") {
            let list = reader::as_str_list(v, &p)?;
            s.domains_excluded = Some(DomainSet::parse(&list, &p)?);
        }
        if let Some((p, v)) = o.get("ipsExcluded") {
            let list = reader::as_str_list(v, &p)?;
            s.ips_excluded = Some(IpSet::parse(&list, &p)?);
        }
        Ok(enabled.then_some(s))
    }
}
