//! Domain matchers: Xray's plain / `full:` / `domain:` / `keyword:` / `regexp:` / `dotless:`
//! patterns and `geosite:` / `ext:` lists, compiled into compact string sets (full names and
//! suffixes), one literal regex (substrings) and one `RegexSet`.

use std::borrow::Cow;
use std::sync::Arc;

use regex::{Regex, RegexSet};

use super::geodata::{self, Assets};
use super::strset::StrSet;
use crate::config::reader::{ConfigError, Result};

pub use super::geodata::wire::DomainType;

/// One compiled list of domain patterns: a rule's own entries, or one geosite tag (shared by
/// every rule that names it). Matching is on the lower-cased domain, as in Xray.
#[derive(Debug, Default)]
pub struct DomainTable {
    full: StrSet,
    suffix: StrSet,
    substr: Option<Regex>,
    regex: Option<RegexSet>,
    count: usize,
}

impl DomainTable {
    /// Compiles `(type, pattern)` pairs; Substr/Domain/Full patterns are lower-cased, regexes
    /// are kept as written (Xray lower-cases only the input). The error names the bad pattern.
    pub fn build<'a>(
        items: impl IntoIterator<Item = (DomainType, &'a str)>,
    ) -> std::result::Result<DomainTable, String> {
        let (mut full, mut suffix, mut substr, mut regexps) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (kind, v) in items {
            match kind {
                DomainType::Full => full.push(v.to_ascii_lowercase()),
                DomainType::Domain => suffix.push(v.to_ascii_lowercase()),
                DomainType::Substr => substr.push(regex::escape(&v.to_ascii_lowercase())),
                DomainType::Regex => {
                    Regex::new(v).map_err(|e| format!("invalid regexp {v:?}: {e}"))?;
                    regexps.push(v.to_string());
                }
            }
        }
        let (n_sub, n_re) = (substr.len(), regexps.len());
        let substr = if substr.is_empty() {
            None
        } else {
            Some(Regex::new(&substr.join("|")).map_err(|e| format!("domain keywords: {e}"))?)
        };
        let regex = if regexps.is_empty() {
            None
        } else {
            Some(RegexSet::new(&regexps).map_err(|e| format!("domain regexps: {e}"))?)
        };
        let full = StrSet::new(full.iter().map(|s| s.as_bytes()));
        let suffix = StrSet::new(suffix.iter().map(|s| s.as_bytes()));
        Ok(DomainTable {
            count: full.len() + suffix.len() + n_sub + n_re,
            full,
            suffix,
            substr,
            regex,
        })
    }

    /// Whether the lower-cased domain `d` meets a pattern.
    pub fn matches_lower(&self, d: &str) -> bool {
        if self.full.contains(d.as_bytes()) {
            return true;
        }
        if !self.suffix.is_empty() {
            let b = d.as_bytes();
            if self.suffix.contains(b) {
                return true;
            }
            for (i, &c) in b.iter().enumerate() {
                if c == b'.' && self.suffix.contains(&b[i + 1..]) {
                    return true;
                }
            }
        }
        if self.substr.as_ref().is_some_and(|r| r.is_match(d)) {
            return true;
        }
        self.regex.as_ref().is_some_and(|r| r.is_match(d))
    }

    /// How many patterns it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Heap bytes of the string sets (regexes not counted).
    pub fn heap_bytes(&self) -> usize {
        self.full.heap_bytes() + self.suffix.heap_bytes()
    }
}

/// The domain list of one rule (or DNS server, or `domainsExcluded`): its own patterns plus the
/// geosite tables it names.
#[derive(Debug, Clone, Default)]
pub struct DomainSet {
    own: Arc<DomainTable>,
    geo: Vec<Arc<DomainTable>>,
}

/// Splits `kind:value` when `kind` looks like a prefix (letters and dashes).
fn split_kind(s: &str) -> (String, &str) {
    match s.split_once(':') {
        Some((k, v))
            if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') =>
        {
            (k.to_ascii_lowercase(), v)
        }
        _ => (String::new(), s),
    }
}

impl DomainSet {
    /// Compiles the patterns of a routing rule (plain = substring); `path` names the list for
    /// errors. Geosite files are looked up in the default asset locations.
    pub fn parse(items: &[String], path: &str) -> Result<DomainSet> {
        Self::parse_with(items, path, DomainType::Substr, &Assets::from_env())
    }

    /// Like [`DomainSet::parse`], with the type of a plain pattern (`Full` in DNS hosts) and
    /// the asset locations given.
    pub fn parse_with(
        items: &[String],
        path: &str,
        plain: DomainType,
        assets: &Assets,
    ) -> Result<DomainSet> {
        let mut own: Vec<(DomainType, String)> = Vec::new();
        let mut geo = Vec::new();
        for (i, raw) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let s = raw.trim();
            let (kind, val) = split_kind(s);
            match kind.as_str() {
                "" => own.push((plain, val.to_string())),
                "keyword" => own.push((DomainType::Substr, val.to_string())),
                "full" => own.push((DomainType::Full, val.to_string())),
                "domain" => {
                    let v = val.trim_start_matches('.');
                    if v.is_empty() {
                        return Err(ConfigError::new(p, "empty domain pattern"));
                    }
                    own.push((DomainType::Domain, v.to_string()));
                }
                "regexp" => {
                    Regex::new(val).map_err(|e| {
                        ConfigError::new(p.clone(), format!("invalid regexp {val:?}: {e}"))
                    })?;
                    own.push((DomainType::Regex, val.to_string()));
                }
                "dotless" => {
                    if val.contains('.') {
                        return Err(ConfigError::new(
                            p,
                            "a dotless: pattern must not contain a dot",
                        ));
                    }
                    own.push((
                        DomainType::Regex,
                        format!("^[^.]*{}[^.]*$", regex::escape(&val.to_ascii_lowercase())),
                    ));
                }
                "geosite" => geo.push(load(assets, geodata::GEOSITE, val, s, &p)?),
                "ext" | "ext-domain" | "ext-site" => {
                    let (file, code) = val.split_once(':').ok_or_else(|| {
                        ConfigError::new(p.clone(), format!("{s:?}: expected ext:FILE:TAG"))
                    })?;
                    geo.push(load(assets, file, code, s, &p)?);
                }
                // Not a known prefix (e.g. "localhost:8080"-like text): the whole text, plain.
                _ => own.push((plain, s.to_string())),
            }
        }
        let own = DomainTable::build(own.iter().map(|(k, v)| (*k, v.as_str())))
            .map_err(|e| ConfigError::new(path, e))?;
        Ok(DomainSet {
            own: Arc::new(own),
            geo,
        })
    }

    /// Whether `domain` (any case) meets one of the patterns.
    pub fn matches(&self, domain: &str) -> bool {
        let domain: Cow<'_, str> = if domain.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(domain.to_ascii_lowercase())
        } else {
            Cow::Borrowed(domain)
        };
        let d = domain.as_ref();
        self.own.matches_lower(d) || self.geo.iter().any(|t| t.matches_lower(d))
    }
}

/// Loads `file:code[@attr...]` as a shared table; errors name the item and the tag.
fn load(
    assets: &Assets,
    file: &str,
    code_attrs: &str,
    item: &str,
    path: &str,
) -> Result<Arc<DomainTable>> {
    geosite(assets, file, code_attrs).map_err(|e| ConfigError::new(path, format!("{item:?}: {e}")))
}

fn sites() -> &'static geodata::Cache<DomainTable> {
    static C: std::sync::OnceLock<geodata::Cache<DomainTable>> = std::sync::OnceLock::new();
    C.get_or_init(Default::default)
}

/// Loads `CODE[@attr...]` of geosite file `file` (attributes: entries having every key).
pub fn geosite(
    assets: &Assets,
    file: &str,
    code_attrs: &str,
) -> std::result::Result<Arc<DomainTable>, geodata::GeoError> {
    if file.is_empty() {
        return Err(geodata::GeoError::Syntax("empty file".into()));
    }
    if code_attrs.ends_with('@') || code_attrs.contains("@@") {
        return Err(geodata::GeoError::Syntax("empty attribute".into()));
    }
    let mut parts = code_attrs.split('@');
    let code = parts.next().unwrap_or("").to_ascii_uppercase();
    if code.is_empty() {
        return Err(geodata::GeoError::Syntax("empty tag".into()));
    }
    let mut attrs: Vec<String> = parts.map(|a| a.to_ascii_lowercase()).collect();
    attrs.sort();
    attrs.dedup();
    let path = assets.find(file)?;
    geodata::cached(sites(), geodata::key(&path, &code, attrs.clone()), || {
        let body = geodata::read_entry(&path, &code)?;
        let corrupt = |err| geodata::GeoError::Corrupt {
            path: path.display().to_string(),
            err,
        };
        let domains = geodata::wire::geosite_domains(&body).map_err(corrupt)?;
        let pick = domains
            .iter()
            .filter(|d| attrs.iter().all(|a| d.attrs.iter().any(|k| k == a)))
            .map(|d| (d.kind, d.value));
        DomainTable::build(pick).map_err(|err| geodata::GeoError::Build {
            code: code.clone(),
            path: path.display().to_string(),
            err,
        })
    })
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
