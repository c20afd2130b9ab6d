//! Port matchers: port lists and ranges as sorted, merged ranges.

use serde_json::Value;

use super::ranges::{in_ranges, merge};
use crate::config::reader::Result;

/// Port ranges (`53`, `"1000-2000"`, `"53,443,1000-2000"`, or a list of those).
#[derive(Debug, Clone, Default)]
pub struct PortSet(Vec<(u16, u16)>);

impl PortSet {
    pub fn parse(v: &Value, path: &str) -> Result<PortSet> {
        let mut out = Vec::new();
        match v {
            Value::Array(items) => {
                for (i, it) in items.iter().enumerate() {
                    out.extend(crate::config::parse_ports(it, &format!("{path}[{i}]"))?);
                }
            }
            other => out.extend(crate::config::parse_ports(other, path)?),
        }
        Ok(PortSet(merge(out, |x: u16| x.checked_add(1))))
    }

    pub fn contains(&self, p: u16) -> bool {
        in_ranges(&self.0, p)
    }
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
