//! HTTP/1 messages, sans-IO: request and response heads (the HTTP proxy's and the HTTP-based
//! transports'), proxy targets, the forward-proxy rewrite, Basic credentials, and the CONNECT a
//! client sends.

use base64::Engine as _;

use crate::common::{Address, Destination};

/// Longest request or response head Ferry reads (larger ones get 431 and a close).
pub const MAX_HEAD: usize = 64 * 1024;

pub const RESP_200: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
pub const RESP_400: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
pub const RESP_407: &[u8] = b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"proxy\"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
pub const RESP_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// Why bytes are not a usable HTTP request or response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("head is longer than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("malformed request line")]
    RequestLine,
    #[error("malformed status line")]
    StatusLine,
    #[error("malformed header line")]
    HeaderLine,
    #[error("bad request target {0:?}")]
    Target(String),
    #[error("origin-form request without allowTransparent")]
    NotProxyRequest,
}

/// A parser for [`HeadReader::read_until`](crate::proxy::head::HeadReader::read_until) that finds
/// where the head ends, scanning each byte once across reads (see [`head_len`]).
pub fn head_scanner() -> impl FnMut(&[u8]) -> Result<Option<usize>, Error> {
    let mut scanned = 0;
    move |buf| {
        let r = head_len(buf, scanned);
        scanned = buf.len();
        r
    }
}

/// Where the head ends: the length including the empty line, or `None` if not there yet.
/// Bare `\n` line ends are accepted as well as `\r\n`. `from` is how many bytes an earlier
/// call already scanned (so a head that trickles in is scanned once, not quadratically).
pub fn head_len(buf: &[u8], from: usize) -> Result<Option<usize>, Error> {
    let start = from.saturating_sub(3).min(buf.len());
    for (i, &b) in buf.iter().enumerate().skip(start) {
        if b != b'\n' {
            continue;
        }
        match (buf.get(i + 1), buf.get(i + 2)) {
            (Some(b'\n'), _) => return Ok(Some(i + 2)),
            (Some(b'\r'), Some(b'\n')) => return Ok(Some(i + 3)),
            _ => {}
        }
    }
    if buf.len() > MAX_HEAD {
        Err(Error::TooLarge)
    } else {
        Ok(None)
    }
}

/// One header line of a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header<'a> {
    pub name: &'a str,
    /// The value without surrounding whitespace.
    pub value: &'a [u8],
    /// The whole line as received, with its line end.
    pub line: &'a [u8],
}

/// A parsed request head (borrowing the received bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead<'a> {
    pub method: &'a str,
    pub target: &'a str,
    pub version: &'a str,
    pub headers: Vec<Header<'a>>,
}

impl<'a> RequestHead<'a> {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &b[s..e.max(s)]
}

/// Splits a head (as measured by [`head_len`]) into lines with their line ends.
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    head.split_inclusive(|&b| b == b'\n')
}

fn parse_headers<'a>(rest: impl Iterator<Item = &'a [u8]>) -> Result<Vec<Header<'a>>, Error> {
    let mut headers = Vec::new();
    for line in rest {
        let body = trim(line);
        if body.is_empty() {
            break;
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(Error::HeaderLine)?;
        let name = std::str::from_utf8(&line[..colon]).map_err(|_| Error::HeaderLine)?;
        if name.is_empty()
            || name
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(Error::HeaderLine);
        }
        headers.push(Header {
            name,
            value: trim(&line[colon + 1..]),
            line,
        });
    }
    Ok(headers)
}

/// Parses `METHOD TARGET VERSION` and the header lines.
pub fn parse_request(head: &[u8]) -> Result<RequestHead<'_>, Error> {
    let mut it = lines(head);
    let first = it.next().ok_or(Error::RequestLine)?;
    let first = std::str::from_utf8(trim(first)).map_err(|_| Error::RequestLine)?;
    let mut parts = first.split(' ').filter(|p| !p.is_empty());
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Error::RequestLine);
    };
    if !version.starts_with("HTTP/1.") || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(Error::RequestLine);
    }
    Ok(RequestHead {
        method,
        target,
        version,
        headers: parse_headers(it)?,
    })
}

/// Parses `host:port`, `[v6]:port` or a bare host (then `default_port`).
pub fn parse_authority(auth: &str, default_port: u16) -> Option<Destination> {
    let (host, port) = if let Some(rest) = auth.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        h.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (h, port)
    } else {
        match auth.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => return None,
            Some((h, p)) => (h, Some(p)),
            None => (auth, None),
        }
    };
    // A name longer than 255 bytes fits no SOCKS or V2Ray address field an outbound would send
    // it in: an error here, not a shortened name there.
    if host.is_empty()
        || host.len() > 255
        || host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b == b'/' || b == b'@')
    {
        return None;
    }
    let port = match port {
        None | Some("") => default_port,
        Some(p) => p.parse().ok()?,
    };
    Some(Destination::new(Address::parse(host), port))
}

/// What a request asks the proxy to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`: a tunnel.
    Connect(Destination),
    /// A forward request: destination, the `Host` value, and the origin-form target.
    Forward {
        dest: Destination,
        host: String,
        path: String,
    },
}

/// Works out the destination of a request. Origin-form requests use the `Host` header only when
/// `allow_transparent` is set.
pub fn target(req: &RequestHead<'_>, allow_transparent: bool) -> Result<Target, Error> {
    let bad = || Error::Target(req.target.chars().take(200).collect());
    if req.method.eq_ignore_ascii_case("CONNECT") {
        return parse_authority(req.target, 80)
            .map(Target::Connect)
            .ok_or_else(bad);
    }
    if req.target.starts_with('/') {
        if !allow_transparent {
            return Err(Error::NotProxyRequest);
        }
        let host = req
            .header("Host")
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or_else(bad)?;
        let dest = parse_authority(host, 80).ok_or_else(bad)?;
        return Ok(Target::Forward {
            dest,
            host: host.to_string(),
            path: req.target.to_string(),
        });
    }
    let (scheme, rest) = req.target.split_once("://").ok_or_else(bad)?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else if scheme.eq_ignore_ascii_case("http") {
        80
    } else {
        return Err(bad());
    };
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    // Drop any `user:pass@` in front of the host.
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let dest = parse_authority(authority, default_port).ok_or_else(bad)?;
    let path = path.split('#').next().unwrap_or("");
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    Ok(Target::Forward {
        dest,
        host: authority.to_string(),
        path,
    })
}

/// Headers that belong to one hop and are not forwarded.
fn hop_by_hop(name: &str) -> bool {
    const HOP: &[&str] = &[
        "Proxy-Connection",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Connection",
        "Keep-Alive",
        "TE",
        "Trailer",
        "Trailers",
    ];
    HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// The head sent upstream for a forward request: origin-form target, `Host` set to the target's
/// authority, hop-by-hop headers (and those the `Connection` header names) removed, and
/// `Connection: close` (one request per upstream connection; `Connection: Upgrade` is kept so
/// WebSocket upgrades pass). Every other header line is forwarded byte for byte, in order.
pub fn rewrite_forward(req: &RequestHead<'_>, host: &str, path: &str) -> Vec<u8> {
    let mut named: Vec<&[u8]> = Vec::new();
    let mut upgrade = false;
    for h in req.headers.iter().filter(|h| {
        h.name.eq_ignore_ascii_case("Connection") || h.name.eq_ignore_ascii_case("Proxy-Connection")
    }) {
        for tok in h.value.split(|&b| b == b',').map(trim) {
            if tok.eq_ignore_ascii_case(b"upgrade") {
                upgrade = true;
            } else if !tok.is_empty() {
                named.push(tok);
            }
        }
    }
    let upgrade = upgrade && req.header("Upgrade").is_some();
    let mut out = Vec::with_capacity(req.headers.iter().map(|h| h.line.len()).sum::<usize>() + 128);
    out.extend_from_slice(req.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.version.as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut host_done = false;
    for h in &req.headers {
        if h.name.eq_ignore_ascii_case("Host") {
            if !host_done {
                host_done = true;
                out.extend_from_slice(b"Host: ");
                out.extend_from_slice(host.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            continue;
        }
        if hop_by_hop(h.name)
            || named
                .iter()
                .any(|n| n.eq_ignore_ascii_case(h.name.as_bytes()))
        {
            continue;
        }
        if h.name.eq_ignore_ascii_case("Upgrade") && !upgrade {
            continue;
        }
        out.extend_from_slice(h.line);
        if !h.line.ends_with(b"\n") {
            out.extend_from_slice(b"\r\n");
        }
    }
    if !host_done {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(if upgrade {
        b"Connection: Upgrade\r\n\r\n"
    } else {
        b"Connection: close\r\n\r\n"
    });
    out
}

/// `Basic BASE64(user:pass)` -> (user, pass).
pub fn parse_basic(value: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let v = trim(value);
    let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"Basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(trim(rest))
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    Some((raw[..colon].to_vec(), raw[colon + 1..].to_vec()))
}

/// `base64(user:pass)` for a `Proxy-Authorization: Basic` header.
pub fn basic_token(user: &str, pass: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

/// The CONNECT request an HTTP proxy client sends.
pub fn encode_connect(
    dest: &Destination,
    auth: Option<&str>,
    headers: &[(String, String)],
) -> Vec<u8> {
    let mut s = format!("CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n");
    if let Some(token) = auth {
        s.push_str("Proxy-Authorization: Basic ");
        s.push_str(token);
        s.push_str("\r\n");
    }
    for (k, v) in headers {
        s.push_str(k);
        s.push_str(": ");
        s.push_str(v);
        s.push_str("\r\n");
    }
    s.push_str("Proxy-Connection: Keep-Alive\r\n\r\n");
    s.into_bytes()
}

/// The status code of a response head (`HTTP/1.x NNN reason`).
pub fn parse_status(head: &[u8]) -> Result<u16, Error> {
    let first = lines(head).next().ok_or(Error::StatusLine)?;
    let first = std::str::from_utf8(trim(first)).map_err(|_| Error::StatusLine)?;
    let mut parts = first.split(' ').filter(|p| !p.is_empty());
    match (parts.next(), parts.next()) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") && code.len() == 3 => {
            code.parse().map_err(|_| Error::StatusLine)
        }
        _ => Err(Error::StatusLine),
    }
}

/// A parsed response head: the status code and the header lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead<'a> {
    pub status: u16,
    pub headers: Vec<Header<'a>>,
}

impl<'a> ResponseHead<'a> {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// Parses a response head: status line and headers.
pub fn parse_response(head: &[u8]) -> Result<ResponseHead<'_>, Error> {
    let status = parse_status(head)?;
    Ok(ResponseHead {
        status,
        headers: parse_headers(lines(head).skip(1))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_end_and_limit() {
        let h = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody";
        assert_eq!(head_len(h, 0), Ok(Some(27)));
        for from in 0..27 {
            // Resuming after any earlier partial scan finds the same end.
            assert_eq!(head_len(&h[..from], 0), Ok(None));
            assert_eq!(head_len(h, from), Ok(Some(27)), "from {from}");
        }
        assert_eq!(
            head_len(b"GET / HTTP/1.1\nHost: a\n\nbody", 0),
            Ok(Some(24))
        );
        assert_eq!(head_len(&vec![b'a'; MAX_HEAD + 1], 0), Err(Error::TooLarge));
    }

    #[test]
    fn connect_target_and_auth() {
        let h = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic dXNlcjpwYXNz\r\n\r\n";
        let r = parse_request(h).unwrap();
        assert_eq!(
            target(&r, false),
            Ok(Target::Connect(
                Destination::parse("example.com:443").unwrap()
            ))
        );
        let auth = r.header("proxy-authorization").unwrap();
        assert_eq!(
            parse_basic(auth),
            Some((b"user".to_vec(), b"pass".to_vec()))
        );
        assert_eq!(basic_token("user", "pass"), "dXNlcjpwYXNz");
        assert_eq!(parse_basic(b"Bearer x"), None);
        assert_eq!(parse_basic(b"Basic !!!"), None);
        let r = parse_request(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(
            target(&r, false),
            Ok(Target::Connect(Destination::parse("[::1]:8443").unwrap()))
        );
        let r = parse_request(b"CONNECT host HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(
            target(&r, false),
            Ok(Target::Connect(Destination::parse("host:80").unwrap()))
        );
    }

    #[test]
    fn bad_heads() {
        assert_eq!(parse_request(b"\r\n\r\n"), Err(Error::RequestLine));
        assert_eq!(parse_request(b"GET /\r\n\r\n"), Err(Error::RequestLine));
        assert_eq!(
            parse_request(b"\x05\x01\x00 x HTTP/1.1\r\n\r\n"),
            Err(Error::RequestLine)
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n"),
            Err(Error::HeaderLine)
        );
        let r = parse_request(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(target(&r, false), Err(Error::NotProxyRequest));
        assert_eq!(
            target(&r, true),
            Ok(Target::Forward {
                dest: Destination::parse("a:80").unwrap(),
                host: "a".into(),
                path: "/x".into()
            })
        );
        let r = parse_request(b"GET ftp://a/ HTTP/1.1\r\n\r\n").unwrap();
        assert!(matches!(target(&r, false), Err(Error::Target(_))));
        let r = parse_request(b"CONNECT a:b:c HTTP/1.1\r\n\r\n").unwrap();
        assert!(matches!(target(&r, false), Err(Error::Target(_))));
    }

    #[test]
    fn forward_rewrite() {
        let h = b"GET http://u:p@example.com:8080/index.html?q=1#frag HTTP/1.1\r\n\
Host: wrong\r\nUser-Agent: t/1\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n\
Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Keep:  a  b \r\n\r\n";
        let r = parse_request(h).unwrap();
        let Target::Forward { dest, host, path } = target(&r, false).unwrap() else {
            panic!("not forward")
        };
        assert_eq!(dest, Destination::parse("example.com:8080").unwrap());
        assert_eq!(path, "/index.html?q=1");
        let out = rewrite_forward(&r, &host, &path);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /index.html?q=1 HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: t/1\r\n\
X-Keep:  a  b \r\nConnection: close\r\n\r\n"
        );
        let r = parse_request(b"GET http://a HTTP/1.0\r\n\r\n").unwrap();
        let Target::Forward { host, path, dest } = target(&r, false).unwrap() else {
            panic!()
        };
        assert_eq!(dest.port, 80);
        assert_eq!(
            rewrite_forward(&r, &host, &path),
            b"GET / HTTP/1.0\r\nHost: a\r\nConnection: close\r\n\r\n"
        );
        let r = parse_request(
            b"GET http://a/ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            rewrite_forward(&r, "a", "/ws"),
            b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nHost: a\r\nConnection: Upgrade\r\n\r\n"
        );
    }

    #[test]
    fn client_connect_and_status() {
        let d = Destination::parse("example.com:443").unwrap();
        let c = encode_connect(&d, Some("dXNlcjpwYXNz"), &[("X-Foo".into(), "bar".into())]);
        assert_eq!(
            String::from_utf8(c).unwrap(),
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\
Proxy-Authorization: Basic dXNlcjpwYXNz\r\nX-Foo: bar\r\nProxy-Connection: Keep-Alive\r\n\r\n"
        );
        assert_eq!(
            parse_status(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Ok(200)
        );
        assert_eq!(parse_status(b"HTTP/1.0 407 x\r\n\r\n"), Ok(407));
        assert_eq!(parse_status(b"SSH-2.0\r\n\r\n"), Err(Error::StatusLine));
    }

    #[test]
    fn names_over_255_bytes_are_errors() {
        let name = "a".repeat(256);
        let head = format!("CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n");
        let req = parse_request(head.as_bytes()).unwrap();
        assert!(matches!(target(&req, false), Err(Error::Target(_))));
        let head = format!("GET http://{name}/ HTTP/1.1\r\nHost: {name}\r\n\r\n");
        let req = parse_request(head.as_bytes()).unwrap();
        assert!(target(&req, false).is_err());
        // 255 is the most, and still fine.
        let name = "a".repeat(255);
        let dest = parse_authority(&format!("{name}:443"), 80).unwrap();
        assert_eq!(dest.to_string(), format!("{name}:443"));
    }
}
