//! `log.maskAddress`: hides part of every IP address in log lines, as Xray does.

use std::net::Ipv6Addr;
use std::sync::OnceLock;

use regex::Regex;

/// How many leading bits of each IPv4 / IPv6 address log lines keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mask {
    pub v4: u8,
    pub v6: u8,
}

impl Mask {
    /// Reads Xray's values: `""` (no masking), `"quarter"`, `"half"`, `"full"`, or `"/A+/B"`
    /// (A bits of IPv4, a multiple of 8, and B bits of IPv6; a missing part masks all).
    pub fn parse(s: &str) -> Result<Option<Mask>, String> {
        let (v4, v6) = match s {
            "" => return Ok(None),
            "quarter" => (8, 16),
            "half" => (16, 32),
            "full" => (0, 0),
            other => {
                let mut parts = other.split('+');
                let mut bits = |max: u32| -> Result<u8, String> {
                    match parts.next().map(|p| p.trim_start_matches('/')) {
                        None | Some("") => Ok(0),
                        Some(p) => p
                            .parse::<u32>()
                            .ok()
                            .filter(|n| *n <= max)
                            .map(|n| n as u8)
                            .ok_or_else(|| format!("{other:?}: {p:?} is not 0-{max} bits")),
                    }
                };
                (bits(32)?, bits(128)?)
            }
        };
        if v4 % 8 != 0 {
            return Err(format!("{s:?}: the IPv4 mask must be a multiple of 8 bits"));
        }
        Ok(Some(Mask { v4, v6 }))
    }

    /// `text` with its addresses masked: `11.45.*.*`, `[Masked IPv4]`, `2001:db8::/32`,
    /// `Masked IPv6` (Xray's spellings).
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "constant patterns, checked by the tests"
    )]
    pub fn apply(&self, text: &str) -> String {
        static V4: OnceLock<Regex> = OnceLock::new();
        static V6: OnceLock<Regex> = OnceLock::new();
        let v4 = V4.get_or_init(|| Regex::new(r"(\d{1,3}\.){3}\d{1,3}").expect("valid regex"));
        let v6 = V6.get_or_init(|| {
            Regex::new(r"(?:[\da-fA-F]{0,4}:[\da-fA-F]{0,4}){2,7}").expect("valid regex")
        });
        let out = v4.replace_all(text, |c: &regex::Captures<'_>| match self.v4 {
            32 => c[0].to_string(),
            0 => "[Masked IPv4]".to_string(),
            bits => {
                let keep = usize::from(bits / 8);
                c[0].split('.')
                    .enumerate()
                    .map(|(i, p)| if i < keep { p } else { "*" })
                    .collect::<Vec<_>>()
                    .join(".")
            }
        });
        v6.replace_all(&out, |c: &regex::Captures<'_>| {
            let s = &c[0];
            match (self.v6, s.parse::<Ipv6Addr>()) {
                (128, _) | (_, Err(_)) => s.to_string(),
                (0, _) => "Masked IPv6".to_string(),
                (bits, Ok(ip)) => {
                    let m = u128::MAX << (128 - u32::from(bits));
                    format!("{}/{bits}", Ipv6Addr::from(u128::from(ip) & m))
                }
            }
        })
        .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xray_values_and_output() {
        let half = Mask::parse("half").unwrap().unwrap();
        assert_eq!(half.apply("from 11.45.1.4:5000"), "from 11.45.*.*:5000");
        assert_eq!(half.apply("11:45:14:19:19:81::"), "11:45::/32");
        let custom = Mask::parse("/16+/64").unwrap().unwrap();
        assert_eq!(custom.apply("11:45:14:19:19:81::"), "11:45:14:19::/64");
        let full = Mask::parse("full").unwrap().unwrap();
        assert_eq!(
            full.apply("from 1.2.3.4 to 2001:db8::1"),
            "from [Masked IPv4] to Masked IPv6"
        );
        let quarter = Mask::parse("quarter").unwrap().unwrap();
        assert_eq!(quarter.apply("1.2.3.4"), "1.*.*.*");
        // Clock times are not addresses.
        assert_eq!(
            quarter.apply("2026/11/24 01:12:50.123"),
            "2026/11/24 01:12:50.123"
        );
        assert_eq!(Mask::parse("").unwrap(), None);
        assert!(Mask::parse("/12").is_err());
        assert!(Mask::parse("/8+/200").is_err());
        assert!(Mask::parse("most").is_err());
    }
}
