//! What the WebSocket and HTTPUpgrade transports share: the configured path with Xray's `?ed=`
//! early-data parameter, the Host check, the real client address from `X-Forwarded-For`, and
//! the HTTP/1.1 upgrade request a client sends and a server reads.

use std::io;
use std::net::IpAddr;

use crate::common::Destination;
use crate::proxy::head::HeadReader;
use crate::proxy::http::codec::{self, RequestHead};
use crate::transport::BoxStream;

/// The longest upgrade request a server reads: Go's `MaxHeaderBytes` of Xray's listener
/// (8192) plus the 4096 bytes Go allows on top.
pub const MAX_REQUEST: usize = 8192 + 4096;

/// The User-Agent a client sends unless its headers name one (a browser's, as Xray's).
pub const DEFAULT_USER_AGENT: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/138.0.0.0 Safari/537.36";

/// `path`, `host` and `headers` of `wsSettings` / `httpupgradeSettings`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeSettings {
    /// Starts with `/`; may carry a query (sent by clients, ignored by the server's check).
    pub path: String,
    pub host: String,
    pub headers: Vec<(String, String)>,
    /// Xray's `?ed=N` (or v2ray's `maxEarlyData`): the most of the first write a client puts
    /// into the upgrade request.
    pub max_early: usize,
}

impl UpgradeSettings {
    /// Reads a configured path as Xray does: an `ed` query parameter is taken out and becomes
    /// the early-data limit; the path gets a leading `/`.
    pub fn with_path(raw: &str) -> UpgradeSettings {
        let (path, query) = match raw.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (raw, None),
        };
        let mut max_early = 0;
        let mut kept = Vec::new();
        let mut found = false;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if k == "ed" {
                if !found {
                    found = true;
                    max_early = v.parse::<u32>().unwrap_or(0) as usize;
                }
            } else {
                kept.push(pair);
            }
        }
        let mut path = normalize_path(path);
        if !kept.is_empty() {
            path.push('?');
            path.push_str(&kept.join("&"));
        } else if query.is_some() && !found {
            path.push('?');
        }
        UpgradeSettings {
            path,
            max_early,
            ..Default::default()
        }
    }

    /// The path without its query: what a server compares the request's path with.
    pub fn path_only(&self) -> &str {
        self.path.split('?').next().unwrap_or("/")
    }

    /// The Host a client sends: `host`, else the TLS server name, else the server's address
    /// (Xray's order).
    pub fn client_host(&self, tls_name: Option<&str>, server: &Destination) -> String {
        if !self.host.is_empty() {
            return self.host.clone();
        }
        match tls_name {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => server.addr.to_string(),
        }
    }

    /// A client's upgrade request: the request line, Host, the configured headers (a default
    /// User-Agent unless they have one), then `extra`.
    pub fn request(&self, host: &str, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut r = format!("GET {} HTTP/1.1\r\nHost: {host}\r\n", self.path);
        if !self
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
        {
            r.push_str("User-Agent: ");
            r.push_str(DEFAULT_USER_AGENT);
            r.push_str("\r\n");
        }
        for (k, v) in self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())) {
            r.push_str(&format!("{k}: {v}\r\n"));
        }
        for (k, v) in extra {
            r.push_str(&format!("{k}: {v}\r\n"));
        }
        r.push_str("\r\n");
        r.into_bytes()
    }

    /// Whether a request is for this transport's host and path (Xray answers others 404).
    pub fn matches(&self, req: &RequestHead<'_>) -> Result<(), String> {
        if !self.host.is_empty() {
            let h = req
                .header("Host")
                .and_then(|h| std::str::from_utf8(h).ok())
                .unwrap_or("");
            if !valid_host(h, &self.host) {
                return Err(format!("wrong host {h:?}"));
            }
        }
        let target = req.target.split('?').next().unwrap_or("");
        // An absolute-form target ("http://host/path") has its path compared.
        let target = match target.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => target,
        };
        if percent_decode(target).as_deref() != Some(self.path_only()) {
            return Err(format!("wrong path {:?}", truncate(target)));
        }
        Ok(())
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(100) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `/` in front, `/` for an empty path.
pub fn normalize_path(p: &str) -> String {
    if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    }
}

/// Xray's `IsValidHTTPHost`: the request's Host (its port dropped) equals the configured one,
/// case-insensitively.
pub fn valid_host(request: &str, config: &str) -> bool {
    let r = request.to_ascii_lowercase();
    let c = config.to_ascii_lowercase();
    let host = if let Some(rest) = r.strip_prefix('[') {
        rest.split_once(']').map(|(h, _)| h).unwrap_or(rest)
    } else if r.matches(':').count() == 1 {
        r.split(':').next().unwrap_or("")
    } else {
        &r
    };
    host == c.trim_start_matches('[').trim_end_matches(']')
}

fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    crate::common::text::percent_decode(s).ok()
}

/// The client address a proxy in front put into `X-Forwarded-For` (its first entry), as Xray
/// 26.3 takes it: always, unless `sockopt.trustedXForwardedFor` lists header names, then only
/// when one of them is present.
pub fn forwarded_for(req: &RequestHead<'_>, trusted: &[String]) -> Option<IpAddr> {
    forwarded_for_in(|name| req.header(name), trusted)
}

/// [`forwarded_for`] on the headers of an HTTP/2 or hyper request (gRPC, XHTTP).
pub fn forwarded_for_map(headers: &http::HeaderMap, trusted: &[String]) -> Option<IpAddr> {
    forwarded_for_in(|name| headers.get(name).map(|v| v.as_bytes()), trusted)
}

/// The rule of [`forwarded_for`] over any way to look a header up by name.
fn forwarded_for_in<'a>(
    header: impl Fn(&str) -> Option<&'a [u8]>,
    trusted: &[String],
) -> Option<IpAddr> {
    if !trusted.is_empty() && !trusted.iter().any(|t| header(t).is_some()) {
        return None;
    }
    let v = std::str::from_utf8(header("X-Forwarded-For")?).ok()?;
    let first = v.split(',').next()?.trim();
    first
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Reads an upgrade request's head off `stream`: the reader (positioned at the head, the
/// bytes after it kept) and the head's length. A head too long gets 431 and an error.
pub async fn read_request(stream: BoxStream) -> io::Result<(HeadReader, usize)> {
    let mut r = HeadReader::new(stream, MAX_REQUEST + 1);
    let mut scan = codec::head_scanner();
    let found = r
        .read_until(|b| match scan(b) {
            Ok(None) if b.len() > MAX_REQUEST => Err(codec::Error::TooLarge),
            other => other,
        })
        .await;
    match found {
        Ok(Ok(n)) => Ok((r, n)),
        Ok(Err(e)) => {
            let _ = r.write_all(&http_error(431)).await;
            Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        }
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            let _ = r.write_all(&http_error(431)).await;
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// An error response in the form Go's `http.Error` writes (what Xray's listener answers).
pub fn http_error(status: u16) -> Vec<u8> {
    let reason = match status {
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    };
    if status == 404 {
        // Xray's handler writes the status alone.
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec();
    }
    let body = format!("{reason}\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A header value as text (empty when not UTF-8).
pub fn header_str(v: Option<&[u8]>) -> &str {
    v.and_then(|v| std::str::from_utf8(v).ok()).unwrap_or("")
}

/// Whether a comma-separated header value has `token` (case-insensitive).
pub fn has_token(v: Option<&[u8]>, token: &str) -> bool {
    header_str(v)
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_early_data_as_xray_reads_them() {
        let s = UpgradeSettings::with_path("/ws?ed=2048");
        assert_eq!((s.path.as_str(), s.max_early), ("/ws", 2048));
        let s = UpgradeSettings::with_path("ws?a=1&ed=10&b=2");
        assert_eq!((s.path.as_str(), s.max_early), ("/ws?a=1&b=2", 10));
        assert_eq!(s.path_only(), "/ws");
        let s = UpgradeSettings::with_path("");
        assert_eq!((s.path.as_str(), s.max_early), ("/", 0));
        let s = UpgradeSettings::with_path("/x?ed=junk");
        assert_eq!((s.path.as_str(), s.max_early), ("/x", 0));
    }

    #[test]
    fn requests_match_by_path_and_host() {
        let mut s = UpgradeSettings::with_path("/ray");
        let head = |t: &str, host: &str| format!("GET {t} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let ok = |s: &UpgradeSettings, t: &str, host: &str| {
            let h = head(t, host);
            s.matches(&codec::parse_request(h.as_bytes()).unwrap())
                .is_ok()
        };
        assert!(ok(&s, "/ray", "a"));
        assert!(ok(&s, "/ray?x=1", "a"));
        assert!(ok(&s, "/r%61y", "a"));
        assert!(ok(&s, "http://a/ray", "a"));
        assert!(!ok(&s, "/ray/", "a"));
        assert!(!ok(&s, "/", "a"));
        s.host = "Example.com".into();
        assert!(ok(&s, "/ray", "example.COM:443"));
        assert!(!ok(&s, "/ray", "other.com"));
    }

    #[test]
    fn forwarded_for_as_xray_26_3() {
        let h = b"GET / HTTP/1.1\r\nX-Forwarded-For: 203.0.113.7, 10.0.0.1\r\nX-Real-IP: 1.2.3.4\r\n\r\n";
        let req = codec::parse_request(h).unwrap();
        assert_eq!(
            forwarded_for(&req, &[]),
            Some("203.0.113.7".parse().unwrap())
        );
        assert_eq!(
            forwarded_for(&req, &["X-Real-IP".into()]),
            Some("203.0.113.7".parse().unwrap())
        );
        assert_eq!(forwarded_for(&req, &["CF-Connecting-IP".into()]), None);
        let h = b"GET / HTTP/1.1\r\nX-Forwarded-For: not-an-ip\r\n\r\n";
        assert_eq!(forwarded_for(&codec::parse_request(h).unwrap(), &[]), None);
    }

    #[test]
    fn request_has_host_and_a_user_agent() {
        let mut s = UpgradeSettings::with_path("/p?x=1");
        let r = String::from_utf8(s.request("h.test", &[("Upgrade", "websocket")])).unwrap();
        assert!(r.starts_with("GET /p?x=1 HTTP/1.1\r\nHost: h.test\r\nUser-Agent: Mozilla"));
        assert!(r.ends_with("Upgrade: websocket\r\n\r\n"));
        s.headers = vec![("User-Agent".into(), "curl/8".into())];
        let r = String::from_utf8(s.request("h", &[])).unwrap();
        assert_eq!(r.matches("User-Agent").count(), 1);
    }
}
