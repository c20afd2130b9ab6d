//! Domain matchers: Xray's plain / `full:` / `domain:` / `keyword:` / `regexp:` / `dotless:`
//! patterns compiled into hash sets, one literal regex and one `RegexSet`.

use std::borrow::Cow;
use std::collections::HashSet;

use regex::{Regex, RegexSet};

use crate::config::reader::{ConfigError, Result};

/// A compiled set of domain patterns (Xray's plain / `full:` / `domain:` / `keyword:` /
/// `regexp:` / `dotless:`). Matching is on the lower-cased domain, as in Xray.
#[derive(Debug, Clone, Default)]
pub struct DomainSet {
    full: HashSet<String>,
    suffix: HashSet<String>,
    substr: Option<Regex>,
    regex: Option<RegexSet>,
}

impl DomainSet {
    /// Compiles the patterns of one rule; `path` names the list for errors.
    pub fn parse(items: &[String], path: &str) -> Result<DomainSet> {
        let mut d = DomainSet::default();
        let mut substr = Vec::new();
        let mut regexps = Vec::new();
        for (i, raw) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let s = raw.trim();
            let (kind, val) = match s.split_once(':') {
                Some((k, v))
                    if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') =>
                {
                    (k.to_ascii_lowercase(), v)
                }
                _ => (String::new(), s),
            };
            match kind.as_str() {
                "" | "keyword" => {
                    if val.is_empty() {
                        return Err(ConfigError::new(p, "empty domain pattern"));
                    }
                    substr.push(regex::escape(&val.to_ascii_lowercase()));
                }
                "full" => {
                    d.full.insert(val.to_ascii_lowercase());
                }
                "domain" => {
                    let v = val.trim_start_matches('.').to_ascii_lowercase();
                    if v.is_empty() {
                        return Err(ConfigError::new(p, "empty domain pattern"));
                    }
                    d.suffix.insert(v);
                }
                "regexp" => {
                    Regex::new(val).map_err(|e| {
                        ConfigError::new(p.clone(), format!("invalid regexp {val:?}: {e}"))
                    })?;
                    regexps.push(val.to_string());
                }
                "dotless" => {
                    if val.contains('.') {
                        return Err(ConfigError::new(
                            p,
                            "a dotless: pattern must not contain a dot",
                        ));
                    }
                    regexps.push(format!(
                        "^[^.]*{}[^.]*$",
                        regex::escape(&val.to_ascii_lowercase())
                    ));
                }
                "geosite" | "ext" | "ext-domain" => {
                    return Err(ConfigError::new(
                        p,
                        format!("{s:?}: geosite/geoip data files are not supported yet"),
                    ))
                }
                _ => {
                    // Not a known prefix (e.g. "localhost:8080"-like text): a plain substring.
                    substr.push(regex::escape(&s.to_ascii_lowercase()));
                }
            }
        }
        if !substr.is_empty() {
            d.substr = Some(
                Regex::new(&substr.join("|"))
                    .map_err(|e| ConfigError::new(path, format!("domain keywords: {e}")))?,
            );
        }
        if !regexps.is_empty() {
            d.regex = Some(
                RegexSet::new(&regexps)
                    .map_err(|e| ConfigError::new(path, format!("domain regexps: {e}")))?,
            );
        }
        Ok(d)
    }

    /// Whether `domain` (any case) meets one of the patterns.
    pub fn matches(&self, domain: &str) -> bool {
        let domain: Cow<'_, str> = if domain.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(domain.to_ascii_lowercase())
        } else {
            Cow::Borrowed(domain)
        };
        let d = domain.as_ref();
        if !self.full.is_empty() && self.full.contains(d) {
            return true;
        }
        if !self.suffix.is_empty() {
            let mut rest = d;
            loop {
                if self.suffix.contains(rest) {
                    return true;
                }
                match rest.find('.') {
                    Some(i) => rest = &rest[i + 1..],
                    None => break,
                }
            }
        }
        if let Some(r) = &self.substr {
            if r.is_match(d) {
                return true;
            }
        }
        if let Some(r) = &self.regex {
            if r.is_match(d) {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doms(items: &[&str]) -> DomainSet {
        let v: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        DomainSet::parse(&v, "d").unwrap()
    }

    #[test]
    fn domain_plain_and_keyword_are_substrings() {
        let d = doms(&["goog", "keyword:fac.b"]);
        assert!(d.matches("www.google.com"));
        assert!(d.matches("GOOGLE.com"));
        assert!(d.matches("fac.book"));
        assert!(!d.matches("facebook.com"), "the dot is literal");
        assert!(!d.matches("example.com"));
    }

    #[test]
    fn domain_full() {
        let d = doms(&["full:Example.com"]);
        assert!(d.matches("example.com"));
        assert!(d.matches("EXAMPLE.COM"));
        assert!(!d.matches("www.example.com"));
        assert!(!d.matches("example.co"));
    }

    #[test]
    fn domain_suffix() {
        let d = doms(&["domain:example.com"]);
        assert!(d.matches("example.com"));
        assert!(d.matches("a.b.example.com"));
        assert!(!d.matches("badexample.com"));
        assert!(!d.matches("example.com.evil"));
        assert!(!d.matches("com"));
    }

    #[test]
    fn domain_regexp_and_dotless() {
        let d = doms(&["regexp:^api[0-9]+\\.example\\.(com|net)$"]);
        assert!(d.matches("api12.example.net"));
        assert!(!d.matches("api.example.net"));
        let d = doms(&["dotless:"]);
        assert!(d.matches("localhost"));
        assert!(!d.matches("a.b"));
        let v = vec!["regexp:(".to_string()];
        assert_eq!(
            DomainSet::parse(&v, "r.domain").unwrap_err().path,
            "r.domain[0]"
        );
    }
}
