//! XHTTP's 2026 obfuscation options as Xray v26.3.27 has them (`transport/internet/splithttp/
//! xpadding.go`, `config.go`, `hub.go`): where a request's padding goes and how it is made
//! (`xPaddingObfsMode`, `xPaddingKey`, `xPaddingHeader`, `xPaddingPlacement`,
//! `xPaddingMethod`), the padding a server adds to its responses, and packet-up uplink data
//! carried in headers or cookies instead of the body (`uplinkDataPlacement`, `uplinkDataKey`,
//! `uplinkChunkSize`). Pure functions over `http` types, tested without sockets.
//!
//! - `data`: uplink data in headers or cookies.

use http::{HeaderMap, HeaderValue};

use super::{Placement, Range, XhttpSettings};

mod data;
/// The value of cookie `name`.
pub fn cookie_get<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

#[cfg(test)]
mod tests;

pub use data::{data_chunks, request_data, DataError};

/// Where a request's padding goes in obfuscation mode (`xPaddingPlacement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PadPlacement {
    /// Header `xPaddingHeader` holds a URL whose query is `xPaddingKey=PADDING`.
    #[default]
    QueryInHeader,
    /// Header `xPaddingHeader` holds the padding itself.
    Header,
    /// Cookie `xPaddingKey`.
    Cookie,
    /// The request URL's query, key `xPaddingKey`.
    Query,
}

impl PadPlacement {
    pub fn parse(s: &str) -> Option<PadPlacement> {
        Some(match s {
            "" | "queryInHeader" => PadPlacement::QueryInHeader,
            "header" => PadPlacement::Header,
            "cookie" => PadPlacement::Cookie,
            "query" => PadPlacement::Query,
            _ => return None,
        })
    }
}

/// How padding is made (`xPaddingMethod`), and so how its length is measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PadMethod {
    /// `X` repeated; the length is the number of bytes.
    #[default]
    RepeatX,
    /// Random base62 whose length is that of its HPACK Huffman code (RFC 7541), so the padding
    /// costs the same on an HTTP/2 wire whatever letters it drew.
    Tokenish,
}

impl PadMethod {
    pub fn parse(s: &str) -> Option<PadMethod> {
        Some(match s {
            "" | "repeat-x" => PadMethod::RepeatX,
            "tokenish" => PadMethod::Tokenish,
            _ => return None,
        })
    }
}

/// Where packet-up uplink data goes (`uplinkDataPlacement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataPlacement {
    /// Client: the body. Server: headers, then cookies, then the body, joined.
    #[default]
    Auto,
    Body,
    /// Headers `KEY-0`, `KEY-1`, ... of base64url (no `=`) chunks; an empty body.
    Header,
    /// Cookies `KEY_0`, `KEY_1`, ... the same way.
    Cookie,
}

impl DataPlacement {
    pub fn parse(s: &str) -> Option<DataPlacement> {
        Some(match s {
            "" | "auto" => DataPlacement::Auto,
            "body" => DataPlacement::Body,
            "header" => DataPlacement::Header,
            "cookie" => DataPlacement::Cookie,
            _ => return None,
        })
    }
}

/// RFC 7541 Appendix B: the length in bits of each byte's HPACK Huffman code.
const HUFFMAN_BITS: [u8; 256] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
];

/// Bytes the HPACK Huffman code of `s` takes (Go's `hpack.HuffmanEncodeLength`).
pub fn huffman_len(s: &[u8]) -> usize {
    let bits: usize = s
        .iter()
        .map(|&b| usize::from(HUFFMAN_BITS[usize::from(b)]))
        .sum();
    bits.div_ceil(8)
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Random base62 whose Huffman length is within 2 bytes of `target` (Xray's
/// `GenerateTokenishPaddingBase62`): about 1.25 characters a byte, then `X` and `Z` (8-bit
/// codes) added in turn, or characters dropped, until it fits; 150 steps at most.
pub fn tokenish(target: usize) -> String {
    let n = ((target as f64 / 0.8).ceil() as usize).max(1);
    let mut s: Vec<u8> = Vec::with_capacity(n + 8);
    let mut rnd = [0u8; 64];
    while s.len() < n {
        crate::common::rand::fill(&mut rnd);
        // Bytes of 248 and up would make the draw uneven (248 = 4 x 62).
        for &b in rnd.iter().filter(|&&b| b < 248) {
            if s.len() == n {
                break;
            }
            s.push(BASE62[usize::from(b) % 62]);
        }
    }
    let mut x_next = true;
    // The code's length in bits, kept as characters come and go.
    let mut bits: usize = s
        .iter()
        .map(|&b| usize::from(HUFFMAN_BITS[usize::from(b)]))
        .sum();
    for _ in 0..150 {
        let cur = bits.div_ceil(8);
        if cur.abs_diff(target) <= 2 {
            break;
        }
        if cur < target {
            s.push(if x_next { b'X' } else { b'Z' });
            bits += 8;
            x_next = !x_next;
        } else if let Some(c) = s.pop() {
            bits -= usize::from(HUFFMAN_BITS[usize::from(c)]);
        }
    }
    String::from_utf8(s).unwrap_or_default()
}

/// Padding of `len` by `method`.
pub fn make(method: PadMethod, len: u32) -> String {
    match method {
        PadMethod::RepeatX => "X".repeat(len as usize),
        PadMethod::Tokenish => tokenish(len as usize),
    }
}

/// Xray's `IsPaddingValid`: not empty, and its length (bytes, or Huffman bytes with 2 of
/// slack for tokenish) inside `range`. The characters are not checked.
pub fn valid(method: PadMethod, range: Range, v: &str) -> bool {
    if v.is_empty() {
        return false;
    }
    match method {
        PadMethod::RepeatX => range.contains(v.len().min(u32::MAX as usize) as u32),
        PadMethod::Tokenish => {
            let h = huffman_len(v.as_bytes());
            h >= range.from.saturating_sub(2) as usize && h <= range.to as usize + 2
        }
    }
}

/// `%XX` and `+` decoded, as Go's `url.Query().Get` gives a value (undecodable input as is).
pub fn query_unescape(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.bytes().any(|b| b == b'%' || b == b'+') {
        return v.into();
    }
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => return v.into(),
                }
            }
            b'%' => return v.into(),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_or(v.into(), Into::into)
}

/// The first `key=value` of query string `q`, decoded.
fn query_value<'a>(q: &'a str, key: &str) -> Option<std::borrow::Cow<'a, str>> {
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (query_unescape(k) == key).then(|| query_unescape(v))
    })
}

/// The query of a URL (after `?`, before `#`).
fn url_query(u: &str) -> &str {
    let q = u.split_once('?').map_or("", |(_, q)| q);
    q.split('#').next().unwrap_or(q)
}

/// The padding of a request as Xray's server finds it (`ExtractXPaddingFromRequest`). Without
/// obfuscation: `x_padding` in the query of the `Referer` when there is one, else in the
/// request's query. With it, whatever the placement: the cookie, else the header (raw for
/// `header`, else the query of the URL it holds), else the request's query. `""`: none.
pub fn request_padding<'a>(
    s: &XhttpSettings,
    query: Option<&'a str>,
    headers: &'a HeaderMap,
) -> std::borrow::Cow<'a, str> {
    if !s.padding_obfs {
        let referer = headers
            .get(http::header::REFERER)
            .and_then(|v| v.to_str().ok())
            .filter(|r| !r.is_empty());
        let q = match referer {
            Some(r) => url_query(r),
            None => query.unwrap_or(""),
        };
        return query_value(q, "x_padding").unwrap_or_default();
    }
    if let Some(c) = cookie_get(headers, &s.padding_key).filter(|c| !c.is_empty()) {
        return c.trim_matches('"').into();
    }
    let header = headers
        .get(s.padding_header.as_str())
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty());
    if let Some(h) = header {
        if s.padding_placement == PadPlacement::Header {
            return h.into();
        }
        return query_value(url_query(h), &s.padding_key).unwrap_or_default();
    }
    query
        .and_then(|q| query_value(q, &s.padding_key))
        .unwrap_or_default()
}

/// Where a client puts one request's padding: a header, a cookie, or a query pair.
pub enum RequestPadding {
    Header(String, String),
    Cookie(String),
    Query(String, String),
}

/// A client's padding for one request; `url` is the request's URL before the session id and
/// sequence number are placed (Xray's `RawURL`), whose query the padding replaces.
pub fn for_request(s: &XhttpSettings, url_no_query: &str) -> RequestPadding {
    let len = s.padding.rand();
    if !s.padding_obfs {
        let pad = make(PadMethod::RepeatX, len);
        return RequestPadding::Header("referer".into(), format!("{url_no_query}?x_padding={pad}"));
    }
    let pad = make(s.padding_method, len);
    let key = &s.padding_key;
    match s.padding_placement {
        PadPlacement::Header => RequestPadding::Header(s.padding_header.clone(), pad),
        PadPlacement::QueryInHeader => RequestPadding::Header(
            s.padding_header.clone(),
            format!("{url_no_query}?{key}={pad}"),
        ),
        PadPlacement::Cookie => RequestPadding::Cookie(format!("{key}={pad}")),
        PadPlacement::Query => RequestPadding::Query(key.clone(), pad),
    }
}

/// The padding a server adds to every response (after the Host and path checks): without
/// obfuscation an `X-Padding` of `X`s; with it by the method, in the header, as `?KEY=PAD` in
/// the header (queryInHeader), or as a cookie; none for the query placement.
pub fn add_response_padding(s: &XhttpSettings, h: &mut HeaderMap) {
    let len = s.padding.rand();
    let (name, value) = if !s.padding_obfs {
        ("x-padding".to_string(), make(PadMethod::RepeatX, len))
    } else {
        let pad = make(s.padding_method, len);
        match s.padding_placement {
            PadPlacement::Header => (s.padding_header.clone(), pad),
            PadPlacement::QueryInHeader => (
                s.padding_header.clone(),
                format!("?{}={pad}", s.padding_key),
            ),
            PadPlacement::Cookie => (
                "set-cookie".to_string(),
                format!("{}={pad}; Path=/", s.padding_key),
            ),
            PadPlacement::Query => return,
        }
    };
    if let (Ok(n), Ok(v)) = (
        http::HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(&value),
    ) {
        h.append(n, v);
    }
}

/// Whether responses allow credentials (CORS): some placement is a cookie.
pub fn uses_cookies(s: &XhttpSettings) -> bool {
    s.session_placement == Placement::Cookie
        || s.seq_placement == Placement::Cookie
        || s.padding_placement == PadPlacement::Cookie
        || s.data_placement == DataPlacement::Cookie
}
