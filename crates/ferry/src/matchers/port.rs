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
                    out.extend(parse_ports(it, &format!("{path}[{i}]"))?);
                }
            }
            other => out.extend(parse_ports(other, path)?),
        }
        Ok(PortSet(merge(out, |x: u16| x.checked_add(1))))
    }

    pub fn contains(&self, p: u16) -> bool {
        in_ranges(&self.0, p)
    }
}

/// Reads `port`: a number, `"a-b"`, `"a,b,c-d"`, or `"env:NAME"`.
pub fn parse_ports(v: &Value, path: &str) -> Result<Vec<(u16, u16)>> {
    let text = match v {
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
        if a == 0 || b < a {
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
