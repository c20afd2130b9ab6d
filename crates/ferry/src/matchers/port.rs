//! Port matchers: port lists and ranges as sorted, merged ranges.

use serde_json::Value;

use super::ranges::{in_ranges, merge};
use crate::common::reader::{self, ConfigError, Result};

/// Port ranges (`53`, `"1000-2000"`, `"53,443,1000-2000"`, or a list of those).
#[derive(Debug, Clone, Default)]
pub struct PortSet(Vec<(u16, u16)>);

impl PortSet {
    pub fn parse(v: &Value, path: &str) -> Result<PortSet> {
        let mut out = Vec::new();
        match v {
            Value::Array(items) => {
                for (i, it) in items.iter().enumerate() {
                    out.extend(ranges(it, &format!("{path}[{i}]"), 0)?);
                }
            }
            other => out.extend(ranges(other, path, 0)?),
        }
        Ok(PortSet(merge(out, |x: u16| x.checked_add(1))))
    }

    pub fn contains(&self, p: u16) -> bool {
        in_ranges(&self.0, p)
    }
}

/// Reads `port`: a number, `"a-b"`, `"a,b,c-d"`, or `"env:NAME"`; port 0 is not one to
/// listen on or dial.
pub fn parse_ports(v: &Value, path: &str) -> Result<Vec<(u16, u16)>> {
    ranges(v, path, 1)
}

/// Ports from `lowest` up, as [`parse_ports`] reads them; a matcher's ranges may start at 0
/// (Xray's routing takes `"0-65535"` for every port).
fn ranges(v: &Value, path: &str, lowest: u16) -> Result<Vec<(u16, u16)>> {
    let text = match v {
        Value::Number(n) if lowest == 0 && n.as_u64() == Some(0) => return Ok(vec![(0, 0)]),
        Value::Number(_) => {
            return Ok(vec![(reader::as_port(v, path)?, reader::as_port(v, path)?)])
        }
        Value::String(s) => s.clone(),
        _ => {
            return Err(ConfigError::new(
                path,
                format!("expected a port, found {}", reader::show(v)),
            ))
        }
    };
    let text = match text.strip_prefix("env:") {
        Some(name) => std::env::var(name).map_err(|_| {
            ConfigError::new(path, format!("environment variable {name} is not set"))
        })?,
        None => text,
    };
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || ConfigError::new(path, format!("invalid port or range {part:?}"));
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<u16>().map_err(|_| bad())?,
                b.trim().parse::<u16>().map_err(|_| bad())?,
            ),
            None => {
                let p = part.parse::<u16>().map_err(|_| bad())?;
                (p, p)
            }
        };
        if a < lowest || b < a {
            return Err(bad());
        }
        out.push((a, b));
    }
    if out.is_empty() {
        return Err(ConfigError::new(path, "no port given"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ports_forms() {
        let p = PortSet::parse(&json!("53,443,1000-2000"), "p").unwrap();
        for ok in [53, 443, 1000, 1500, 2000] {
            assert!(p.contains(ok), "{ok}");
        }
        for no in [52, 54, 999, 2001, 80] {
            assert!(!p.contains(no), "{no}");
        }
        // Xray's routing takes 0 as a lower bound ("every port").
        let p = PortSet::parse(&json!("0-65535"), "p").unwrap();
        assert!(p.contains(0) && p.contains(1) && p.contains(65535));
        assert!(parse_ports(&json!("0-65535"), "p").is_err());
        let p = PortSet::parse(&json!(8080), "p").unwrap();
        assert!(p.contains(8080) && !p.contains(8081));
        let p = PortSet::parse(&json!([80, "443", "8000-8010"]), "p").unwrap();
        assert!(p.contains(80) && p.contains(443) && p.contains(8005) && !p.contains(81));
        assert_eq!(
            PortSet::parse(&json!(["1-x"]), "r.port").unwrap_err().path,
            "r.port[0]"
        );
    }
}
