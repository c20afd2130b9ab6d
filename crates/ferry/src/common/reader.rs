//! A small reader over JSON values that follows Xray's parsing rules: keys match
//! case-insensitively, aliases are accepted, every error names its JSON path, and keys nobody
//! read become warnings (with their path) when the object is finished.

use std::cell::RefCell;
use std::collections::HashSet;

use serde_json::{Map, Value};

/// A configuration error at a JSON path, e.g. `inbounds[2].streamSettings.network: "kcp" is not supported`.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{path}: {msg}")]
pub struct ConfigError {
    pub path: String,
    pub msg: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, msg: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            msg: msg.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, ConfigError>;

/// Collects warnings (unknown keys, accepted-but-ignored features) while a config is read.
#[derive(Default, Debug)]
pub struct Diagnostics {
    warnings: RefCell<Vec<String>>,
}

impl Diagnostics {
    pub fn warn(&self, path: &str, msg: impl AsRef<str>) {
        self.warnings
            .borrow_mut()
            .push(format!("{path}: {}", msg.as_ref()));
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.warnings.borrow_mut())
    }
}

/// Joins a path and a key: `a` + `b` -> `a.b`; a root path is empty.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Short text for a value in an error message.
pub fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(57).map(|(i, _)| i).unwrap_or(s.len())]
        )
    } else {
        s
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A located value: the value and its JSON path.
#[derive(Clone, Copy)]
pub struct Val<'a> {
    pub v: &'a Value,
    pub path: &'a str,
}

/// An object being read. Call [`Obj::finish`] when done so unknown keys are reported.
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    diag: &'a Diagnostics,
    used: RefCell<HashSet<&'a str>>,
}

impl<'a> Obj<'a> {
    /// Reads `v` as an object; `null` counts as an empty object, as Go's json does for a pointer.
    pub fn new(v: &'a Value, path: impl Into<String>, diag: &'a Diagnostics) -> Result<Obj<'a>> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let path = path.into();
        let map = match v {
            Value::Object(m) => m,
            Value::Null => EMPTY.get_or_init(Map::new),
            other => {
                return Err(ConfigError::new(
                    path,
                    format!("expected an object, found {}", type_name(other)),
                ))
            }
        };
        Ok(Obj {
            map,
            path,
            diag,
            used: RefCell::new(HashSet::new()),
        })
    }

    /// The object as read (every key, used or not).
    pub fn value(&self) -> Value {
        Value::Object(self.map.clone())
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn diag(&self) -> &'a Diagnostics {
        self.diag
    }

    /// The path of a key under this object.
    pub fn key_path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// Finds the first of `names` present (exact match first, then case-insensitive); marks it used.
    /// Returns the key as spelled in the file and the value. A JSON `null` counts as absent.
    /// The later names are spellings the first one takes precedence over (as in Xray): one
    /// of them given beside it is marked read and warned as ignored.
    pub fn get_any(&self, names: &[&str]) -> Option<(&'a str, &'a Value)> {
        let find = |name: &str| {
            self.map
                .get_key_value(name)
                .or_else(|| self.map.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
        };
        for (i, name) in names.iter().enumerate() {
            if let Some((k, v)) = find(name) {
                self.used.borrow_mut().insert(k.as_str());
                if !v.is_null() {
                    for other in &names[i + 1..] {
                        if let Some((o, ov)) = find(other).filter(|(o, _)| *o != k) {
                            self.used.borrow_mut().insert(o.as_str());
                            if !ov.is_null() {
                                self.diag.warn(
                                    &self.key_path(o),
                                    format!("ignored: {k:?} is given and takes precedence"),
                                );
                            }
                        }
                    }
                    return Some((k.as_str(), v));
                }
            }
        }
        None
    }

    /// The value of `key` (case-insensitive), with its path.
    pub fn get(&self, key: &str) -> Option<(String, &'a Value)> {
        self.get_any(&[key]).map(|(k, v)| (self.key_path(k), v))
    }

    /// Like [`Obj::get`] with aliases (`clients`/`users`, `accounts`/`users`, ...).
    pub fn get_alias(&self, names: &[&str]) -> Option<(String, &'a Value)> {
        self.get_any(names).map(|(k, v)| (self.key_path(k), v))
    }

    /// Marks keys as known without reading them (accepted and deliberately ignored).
    pub fn ignore(&self, names: &[&str]) {
        for n in names {
            let _ = self.get_any(&[n]);
        }
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn obj(&self, key: &str) -> Result<Option<Obj<'a>>> {
        self.get(key)
            .map(|(p, v)| Obj::new(v, p, self.diag))
            .transpose()
    }

    pub fn str(&self, key: &str) -> Result<Option<String>> {
        self.get(key)
            .map(|(p, v)| as_str(v, &p).map(str::to_string))
            .transpose()
    }

    pub fn str_alias(&self, names: &[&str]) -> Result<Option<String>> {
        self.get_alias(names)
            .map(|(p, v)| as_str(v, &p).map(str::to_string))
            .transpose()
    }

    pub fn req_str(&self, key: &str) -> Result<String> {
        self.str(key)?
            .ok_or_else(|| ConfigError::new(self.key_path(key), "is required"))
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.get(key)
            .map(|(p, v)| match v {
                Value::Bool(b) => Ok(*b),
                other => Err(ConfigError::new(
                    p,
                    format!("expected a boolean, found {}", show(other)),
                )),
            })
            .transpose()
    }

    pub fn i64(&self, key: &str) -> Result<Option<i64>> {
        self.get(key).map(|(p, v)| as_i64(v, &p)).transpose()
    }

    pub fn u64(&self, key: &str) -> Result<Option<u64>> {
        self.get(key)
            .map(|(p, v)| {
                let n = as_i64(v, &p)?;
                u64::try_from(n)
                    .map_err(|_| ConfigError::new(p, format!("must not be negative, found {n}")))
            })
            .transpose()
    }

    /// A single port (number or numeric string), 1..=65535 unless `allow_zero`.
    pub fn port(&self, key: &str) -> Result<Option<u16>> {
        self.get(key).map(|(p, v)| as_port(v, &p)).transpose()
    }

    /// A string or an array of strings (Xray's StringList also splits "a,b").
    pub fn str_list(&self, key: &str) -> Result<Option<Vec<String>>> {
        self.get(key).map(|(p, v)| as_str_list(v, &p)).transpose()
    }

    pub fn str_list_alias(&self, names: &[&str]) -> Result<Option<Vec<String>>> {
        self.get_alias(names)
            .map(|(p, v)| as_str_list(v, &p))
            .transpose()
    }

    /// An array of objects; each item comes with its path `key[i]`.
    pub fn objs(&self, names: &[&str]) -> Result<Vec<Obj<'a>>> {
        let Some((p, v)) = self.get_alias(names) else {
            return Ok(Vec::new());
        };
        let Value::Array(items) = v else {
            return Err(ConfigError::new(
                p,
                format!("expected an array, found {}", type_name(v)),
            ));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, it)| Obj::new(it, format!("{p}[{i}]"), self.diag))
            .collect()
    }

    /// The user objects of an inbound (`clients`/`users`), with the bookkeeping fields panels
    /// keep on them taken silently (Xray ignores them; 3x-ui v2.x wrote them into the core's
    /// config: `limitIp`, `totalGB`, `expiryTime`, `enable`, `tgId`, `subId`, …).
    pub fn client_objs(&self, names: &[&str]) -> Result<Vec<Obj<'a>>> {
        let objs = self.objs(names)?;
        for o in &objs {
            o.ignore(PANEL_CLIENT_FIELDS);
        }
        Ok(objs)
    }

    /// Reports every key that no reader asked for as a warning.
    pub fn finish(self) {
        let used = self.used.borrow();
        for k in self.map.keys() {
            if !used.contains(k.as_str()) {
                self.diag.warn(&self.key_path(k), "unknown field, ignored");
            }
        }
    }
}

/// What panels keep on a user object for themselves (3x-ui's client model).
const PANEL_CLIENT_FIELDS: &[&str] = &[
    "limitIp",
    "totalGB",
    "expiryTime",
    "enable",
    "tgId",
    "subId",
    "group",
    "comment",
    "reset",
    "resetDay",
    "resetMax",
    "trafficReset",
    "trafficResetDay",
    "created_at",
    "updated_at",
];

pub fn as_str<'v>(v: &'v Value, path: &str) -> Result<&'v str> {
    v.as_str()
        .ok_or_else(|| ConfigError::new(path, format!("expected a string, found {}", show(v))))
}

pub fn as_i64(v: &Value, path: &str) -> Result<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| ConfigError::new(path, format!("expected an integer, found {n}"))),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| ConfigError::new(path, format!("expected an integer, found {}", show(v)))),
        other => Err(ConfigError::new(
            path,
            format!("expected an integer, found {}", show(other)),
        )),
    }
}

pub fn as_port(v: &Value, path: &str) -> Result<u16> {
    let n = as_i64(v, path)?;
    if (1..=65535).contains(&n) {
        Ok(n as u16)
    } else {
        Err(ConfigError::new(
            path,
            format!("port must be 1-65535, found {n}"),
        ))
    }
}

pub fn as_str_list(v: &Value, path: &str) -> Result<Vec<String>> {
    match v {
        Value::String(s) => Ok(s
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, it)| as_str(it, &format!("{path}[{i}]")).map(str::to_string))
            .collect(),
        other => Err(ConfigError::new(
            path,
            format!(
                "expected a string or an array of strings, found {}",
                show(other)
            ),
        )),
    }
}

/// Xray's `Int32Range`: a number, or a string `"n"` or `"from-to"` (either may be negative;
/// swapped when from > to).
pub fn int32_range(v: &Value, path: &str) -> Result<(i64, i64)> {
    let bad = || {
        ConfigError::new(
            path,
            "expected an integer or a range string such as \"100-1000\"",
        )
    };
    let (a, b) = match v {
        Value::String(s) => {
            let s = s.trim();
            if s.is_empty() {
                (0, 0)
            } else if let Ok(n) = s.parse::<i64>() {
                (n, n)
            } else {
                // Split at the dash after the first character ("-5-10", "-9--3").
                let at = s[1..].find('-').map(|i| i + 1).ok_or_else(bad)?;
                let a = s[..at].trim().parse::<i64>().map_err(|_| bad())?;
                let b = s[at + 1..].trim().parse::<i64>().map_err(|_| bad())?;
                (a, b)
            }
        }
        Value::Number(_) => {
            let n = as_i64(v, path)?;
            (n, n)
        }
        _ => return Err(bad()),
    };
    let (a, b) = if a > b { (b, a) } else { (a, b) };
    if a < i32::MIN as i64 || b > i32::MAX as i64 {
        return Err(ConfigError::new(path, "out of the 32-bit range"));
    }
    Ok((a, b))
}

/// Parses a duration string (`"500ms"`, `"1s"`, `"1m30s"`); numbers are refused, as in Xray.
pub fn duration(s: &str) -> Option<std::time::Duration> {
    let mut total = std::time::Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let v: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let secs = match &rest[..u] {
            "ns" => v / 1e9,
            "us" | "µs" => v / 1e6,
            "ms" => v / 1e3,
            "s" => v,
            "m" => v * 60.0,
            "h" => v * 3600.0,
            _ => return None,
        };
        total += std::time::Duration::from_secs_f64(secs);
        rest = &rest[u..];
    }
    Some(total)
}

/// A fallback's or REALITY target's `dest`: a port (on loopback), `host:port`, a unix path,
/// `@abstract` or `@@padded`.
pub fn parse_dest(v: &serde_json::Value, path: &str) -> Result<crate::common::Destination> {
    let local = |port: u64| -> Result<crate::common::Destination> {
        if !(1..=65535).contains(&port) {
            return Err(ConfigError::new(path, format!("port {port} out of range")));
        }
        // Xray says "localhost:<port>"; the loopback address it resolves to, without a lookup.
        Ok(crate::common::Destination::new(
            crate::common::Address::Ip(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            port as u16,
        ))
    };
    match v {
        serde_json::Value::Number(n) => local(n.as_u64().unwrap_or(0)),
        serde_json::Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            local(s.parse().unwrap_or(0))
        }
        serde_json::Value::String(s) if s.starts_with('/') || s.starts_with('@') => Ok(
            crate::common::Destination::new(crate::common::Address::Domain(s.clone()), 0),
        ),
        serde_json::Value::String(s) => {
            let (h, p) = s.rsplit_once(':').ok_or_else(|| {
                ConfigError::new(
                    path,
                    format!("{s:?} is not a port, host:port, unix path, @abstract or @@padded"),
                )
            })?;
            let port: u16 = p
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| ConfigError::new(path, format!("bad port in {s:?}")))?;
            let h = h.trim_start_matches('[').trim_end_matches(']');
            let addr = match h.parse::<std::net::IpAddr>() {
                Ok(ip) => crate::common::Address::Ip(ip),
                Err(_) => crate::common::Address::Domain(h.to_string()),
            };
            Ok(crate::common::Destination::new(addr, port))
        }
        other => Err(ConfigError::new(
            path,
            format!("expected a port or an address, found {}", show(other)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn case_insensitive_aliases_and_unknown_warnings() {
        let v = json!({"Tag": "a", "Users": [{"email": "x"}], "extra": 1, "port": "1080"});
        let d = Diagnostics::default();
        let o = Obj::new(&v, "inbounds[0]", &d).unwrap();
        assert_eq!(o.str("tag").unwrap().as_deref(), Some("a"));
        let users = o.objs(&["clients", "users"]).unwrap();
        assert_eq!(users[0].path(), "inbounds[0].Users[0]");
        assert_eq!(o.port("port").unwrap(), Some(1080));
        users.into_iter().for_each(|u| {
            u.str("email").unwrap();
            u.finish()
        });
        o.finish();
        assert_eq!(
            d.take(),
            vec!["inbounds[0].extra: unknown field, ignored".to_string()]
        );
    }

    #[test]
    fn panel_bookkeeping_on_clients_is_taken_silently() {
        let v = json!({"clients": [{"id": "x", "email": "a", "limitIp": 0, "totalGB": 0,
                                    "expiryTime": 0, "enable": true, "tgId": "", "subId": "s",
                                    "comment": "", "reset": 0, "typo": 1}]});
        let d = Diagnostics::default();
        let o = Obj::new(&v, "settings", &d).unwrap();
        for c in o.client_objs(&["clients"]).unwrap() {
            c.str("id").unwrap();
            c.str("email").unwrap();
            c.finish();
        }
        o.finish();
        assert_eq!(
            d.take(),
            vec!["settings.clients[0].typo: unknown field, ignored".to_string()]
        );
    }

    #[test]
    fn errors_name_the_path() {
        let v = json!({"port": 70000, "listen": 5, "x": "a,b"});
        let d = Diagnostics::default();
        let o = Obj::new(&v, "inbounds[1]", &d).unwrap();
        assert_eq!(
            o.port("port").unwrap_err().to_string(),
            "inbounds[1].port: port must be 1-65535, found 70000"
        );
        assert_eq!(o.str("listen").unwrap_err().path, "inbounds[1].listen");
        assert_eq!(o.str_list("x").unwrap(), Some(vec!["a".into(), "b".into()]));
        assert!(Obj::new(&json!(3), "p", &d).is_err());
    }
}
