//! Fallbacks (`settings.fallbacks` of VLESS and Trojan inbounds): what is not the protocol's
//! goes, with every byte the client sent, to another server chosen by SNI, ALPN and HTTP path,
//! exactly as Xray arranges and picks them (its `proxy/vless/inbound` and `proxy/trojan`).
//! One table for both protocols; the dispatcher dials the chosen destination (TCP, unix path,
//! `@abstract`, `@@padded`), sends a PROXY header when `xver` asks, and relays.

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};

/// One fallback destination.
#[derive(Debug)]
pub struct Fallback {
    /// Where to: an IP or domain and port, or a unix path / `@name` / `@@name` (as a domain
    /// with port 0, which the socket dialer understands).
    pub dest: Destination,
    /// 0: nothing; 1 or 2: a PROXY v1 / v2 header with the client's address first.
    pub xver: u8,
}

type PathMap = HashMap<String, Arc<Fallback>>;
type AlpnMap = HashMap<String, PathMap>;

/// The fallback table of one inbound: `name -> alpn -> path -> entry`, completed by Xray's
/// inheritance rules when built.
#[derive(Debug, Default)]
pub struct Fallbacks {
    names: HashMap<String, AlpnMap>,
}

impl Fallbacks {
    /// Reads `o.fallbacks` (absent or empty: `None`).
    pub fn parse(o: &Obj<'_>) -> Result<Option<Arc<Fallbacks>>> {
        let items = o.objs(&["fallbacks"])?;
        if items.is_empty() {
            return Ok(None);
        }
        let mut t = Fallbacks::default();
        for f in items {
            let name = f.str("name")?.unwrap_or_default();
            let alpn = f.str("alpn")?.unwrap_or_default();
            let path = f.str("path")?.unwrap_or_default();
            if !path.is_empty() && !path.starts_with('/') {
                return Err(ConfigError::new(f.key_path("path"), "must start with /"));
            }
            let xver = f.u64("xver")?.unwrap_or(0);
            if xver > 2 {
                return Err(ConfigError::new(f.key_path("xver"), "must be 0, 1 or 2"));
            }
            let dest = match f.get("dest") {
                Some((p, v)) => parse_dest(v, &p)?,
                None => return Err(ConfigError::new(f.key_path("dest"), "is required")),
            };
            if let Some(ty) = f.str("type")? {
                let unix = matches!(&dest.addr, Address::Domain(d) if d.starts_with('/') || d.starts_with('@'));
                let ok = match ty.as_str() {
                    "" => true,
                    "tcp" => !unix,
                    "unix" => unix,
                    _ => false,
                };
                if !ok {
                    return Err(ConfigError::new(
                        f.key_path("type"),
                        format!("type {ty:?} does not fit dest {}", dest),
                    ));
                }
            }
            f.finish();
            t.names
                .entry(name)
                .or_default()
                .entry(alpn)
                .or_default()
                .insert(
                    path,
                    Arc::new(Fallback {
                        dest,
                        xver: xver as u8,
                    }),
                );
        }
        t.inherit();
        Ok(Some(Arc::new(t)))
    }

    /// Xray's three inheritance steps (spec §5.3).
    fn inherit(&mut self) {
        if let Some(any) = self.names.get("").cloned() {
            for (name, alpns) in self.names.iter_mut() {
                if name.is_empty() {
                    continue;
                }
                for alpn in any.keys() {
                    alpns.entry(alpn.clone()).or_default();
                }
            }
        }
        for alpns in self.names.values_mut() {
            if let Some(base) = alpns.get("").cloned() {
                for (alpn, paths) in alpns.iter_mut() {
                    if alpn.is_empty() {
                        continue;
                    }
                    for (p, e) in &base {
                        paths.entry(p.clone()).or_insert_with(|| e.clone());
                    }
                }
            }
        }
        if let Some(any) = self.names.get("").cloned() {
            for (name, alpns) in self.names.iter_mut() {
                if name.is_empty() {
                    continue;
                }
                for (alpn, paths) in &any {
                    let mine = alpns.entry(alpn.clone()).or_default();
                    for (p, e) in paths {
                        mine.entry(p.clone()).or_insert_with(|| e.clone());
                    }
                }
            }
        }
    }

    /// The entry for a connection with this SNI and negotiated ALPN (empty without TLS) whose
    /// client sent `first`; `None`: close it.
    pub fn select(&self, sni: &str, alpn: &str, first: &[u8]) -> Option<Arc<Fallback>> {
        let sni = sni.to_ascii_lowercase();
        let alpn = alpn.to_ascii_lowercase();
        let mut name = sni.as_str();
        if (self.names.len() > 1 || !self.names.contains_key(""))
            && !sni.is_empty()
            && !self.names.contains_key(name)
        {
            {
                // The longest configured name contained in the SNI.
                name = self
                    .names
                    .keys()
                    .filter(|k| !k.is_empty() && sni.contains(k.as_str()))
                    .max_by_key(|k| k.len())
                    .map(String::as_str)
                    .unwrap_or("");
            }
        }
        let alpns = self.names.get(name).or_else(|| self.names.get(""))?;
        let paths = alpns.get(alpn.as_str()).or_else(|| alpns.get(""))?;
        let mut path = "";
        if paths.len() > 1 || !paths.contains_key("") {
            if let Some(p) = request_path(first) {
                if paths.contains_key(p) {
                    path = p;
                }
            }
        }
        paths.get(path).cloned()
    }
}

pub use crate::common::reader::parse_dest;

/// The HTTP/1.x request path in a client's first bytes, as Xray finds it: a `/` at index 4 to 8
/// after a space, up to `?` or a space within the first 64 bytes; a CR or LF first means none,
/// and so does the h2c preface (`PRI * ...`).
pub fn request_path(first: &[u8]) -> Option<&str> {
    if first.len() < 18 || first[4] == b'*' {
        return None;
    }
    let i = (4..=8).find(|&i| first[i] == b'/' && first[i - 1] == b' ')?;
    let end = first.len().min(64);
    for j in i + 1..end {
        match first[j] {
            b'\r' | b'\n' => return None,
            b'?' | b' ' => return std::str::from_utf8(&first[i..j]).ok(),
            _ => {}
        }
    }
    None
}

/// The one read Xray decides a fallback on (under the handshake deadline); `false`, logged,
/// when the connection ended or timed out before a byte came.
pub async fn first_read(
    r: &mut crate::proxy::head::HeadReader,
    deadline: tokio::time::Instant,
    ctx: &crate::proxy::InboundCtx,
    protocol: &str,
) -> bool {
    match tokio::time::timeout_at(deadline, r.fill()).await {
        Ok(Ok(())) => true,
        Err(_) => {
            ctx.reject(protocol, "timeout", &"handshake timed out");
            false
        }
        Ok(Err(e)) => {
            ctx.reject(protocol, "truncated", &e);
            false
        }
    }
}

/// What an inbound returns for a connection that is not its protocol: the fallback chosen for
/// it (the stream replays every byte read), or `Done` (logged) when there is none.
pub fn divert(
    fallbacks: Option<&Fallbacks>,
    mut r: crate::proxy::head::HeadReader,
    ctx: &crate::proxy::InboundCtx,
    protocol: &str,
    why: &dyn std::fmt::Display,
) -> crate::proxy::Accepted {
    // Xray's TLS connection closes with its writer when the fallback ends; REALITY's and a
    // raw socket's do not, and are closed `uplinkOnly` later.
    let mut closes = false;
    if let Some(tls) = r.stream.outer_tls() {
        // The VLESS inbound read its first record alone (Vision's care): whole reads again.
        tls.set_record_at_a_time(false);
        closes = !tls.is_reality();
    }
    let chosen = fallbacks.and_then(|f| {
        f.select(
            ctx.info.sni.as_deref().unwrap_or(""),
            ctx.info.alpn.as_deref().unwrap_or(""),
            &r.buf,
        )
    });
    match chosen {
        Some(fb) => {
            tracing::info!(
                "[{}] {protocol} from {}: {why}; to fallback {}",
                ctx.tag,
                ctx.info.source,
                fb.dest
            );
            crate::proxy::Accepted::Fallback(r.into_stream(), fb, closes)
        }
        None => {
            let why = why.to_string();
            let reason = if why.starts_with("unknown") {
                "auth"
            } else {
                "bad_header"
            };
            let what = if fallbacks.is_some() {
                "no fallback matches, closed"
            } else {
                "closed (no fallbacks)"
            };
            ctx.reject(protocol, reason, &format_args!("{why}; {what}"));
            crate::proxy::Accepted::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;

    fn table(json: &str) -> Arc<Fallbacks> {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let d = Diagnostics::default();
        let o = Obj::new(&v, "settings", &d).unwrap();
        Fallbacks::parse(&o).unwrap().unwrap()
    }

    fn port(t: &Fallbacks, sni: &str, alpn: &str, first: &[u8]) -> Option<u16> {
        t.select(sni, alpn, first).map(|f| f.dest.port)
    }

    #[test]
    fn paths_are_read_as_xray_reads_them() {
        assert_eq!(
            request_path(b"GET /ws HTTP/1.1\r\nHost: x\r\n"),
            Some("/ws")
        );
        assert_eq!(
            request_path(b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\n"),
            Some("/a")
        );
        assert_eq!(
            request_path(b"OPTIONS /o HTTP/1.1\r\nHost: x\r\n"),
            Some("/o")
        );
        assert_eq!(request_path(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), None);
        assert_eq!(request_path(b"GET /short\r\n"), None);
        // No end within the first 64 bytes, or a line end first: no path.
        let long = [b"GET /".as_slice(), &[b'a'; 100], b" HTTP/1.1\r\n"].concat();
        assert_eq!(request_path(&long), None);
        assert_eq!(request_path(b"GET /abc\r\n HTTP/1.1 ....."), None);
        assert_eq!(
            request_path(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 random"),
            None
        );
    }

    #[test]
    fn selection_follows_name_alpn_and_path_with_inheritance() {
        let t = table(
            r#"{"fallbacks":[
                {"dest":80},
                {"alpn":"h2","dest":81},
                {"path":"/ws","dest":82,"xver":1},
                {"name":"a.example.com","dest":83},
                {"name":"example.com","dest":84},
                {"name":"b.example.com","alpn":"h2","path":"/x","dest":85}]}"#,
        );
        let get = b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n";
        let other = b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(port(&t, "", "", other), Some(80));
        assert_eq!(port(&t, "", "", get), Some(82));
        assert_eq!(t.select("", "", get).unwrap().xver, 1);
        assert_eq!(port(&t, "", "h2", other), Some(81));
        // The h2 group inherits the "" group's /ws.
        assert_eq!(port(&t, "", "h2", get), Some(82));
        // Exact name; then the longest configured name inside the SNI.
        assert_eq!(port(&t, "a.example.com", "", other), Some(83));
        assert_eq!(port(&t, "www.a.example.com", "", other), Some(83));
        assert_eq!(port(&t, "c.example.com", "", other), Some(84));
        // A named group inherits the "" group's ALPN and paths it lacks.
        assert_eq!(port(&t, "a.example.com", "", get), Some(82));
        // Its own "" entry wins over the "" group's h2 one: step 2 comes before step 3.
        assert_eq!(port(&t, "a.example.com", "h2", other), Some(83));
        assert_eq!(
            port(&t, "b.example.com", "h2", b"GET /x HTTP/1.1\r\nHost: y\r\n"),
            Some(85)
        );
        // Unknown name: the "" group; upper case SNI is folded.
        assert_eq!(port(&t, "nothing.test", "", other), Some(80));
        assert_eq!(port(&t, "A.EXAMPLE.COM", "", other), Some(83));
        // Unknown ALPN: the "" map.
        assert_eq!(port(&t, "", "http/1.1", other), Some(80));
    }

    #[test]
    fn without_a_catch_all_nothing_matches_and_the_connection_closes() {
        let t = table(r#"{"fallbacks":[{"name":"only.test","dest":"@x"}]}"#);
        assert!(t.select("other.test", "", b"").is_none());
        assert!(t.select("", "", b"").is_none());
        assert!(t.select("www.only.test", "", b"").is_some());
    }

    #[test]
    fn destinations_parse_every_form() {
        let t = table(
            r#"{"fallbacks":[{"path":"/a","dest":"8080"},{"path":"/b","dest":"127.0.0.2:81"},
              {"path":"/c","dest":"/run/x.sock"},{"path":"/d","dest":"@abs"},{"path":"/e","dest":"@@pad"},
              {"path":"/f","dest":"[::1]:90"},{"dest":"site.test:443"}]}"#,
        );
        let d = |p: &str| {
            let req = format!("GET {p} HTTP/1.1\r\nHost: x\r\n\r\n");
            t.select("", "", req.as_bytes()).unwrap().dest.to_string()
        };
        assert_eq!(d("/a"), "127.0.0.1:8080");
        assert_eq!(d("/b"), "127.0.0.2:81");
        assert!(d("/c").starts_with("/run/x.sock"));
        assert!(d("/d").starts_with("@abs"));
        assert!(d("/e").starts_with("@@pad"));
        assert_eq!(d("/f"), "[::1]:90");
        assert_eq!(d("/zzz"), "site.test:443");
        let v: serde_json::Value =
            serde_json::from_str(r#"{"fallbacks":[{"dest":"nope"}]}"#).unwrap();
        let diag = Diagnostics::default();
        let e = Fallbacks::parse(&Obj::new(&v, "s", &diag).unwrap()).unwrap_err();
        assert!(e.to_string().contains("s.fallbacks[0].dest"), "{e}");
    }
}
