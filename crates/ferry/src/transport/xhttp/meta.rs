//! What an XHTTP server makes of a request's head, before any body byte: the Host and path
//! checks, the padding check, the session id and sequence number wherever they are placed,
//! and which leg of which mode the request is (Xray's `hub.go` order). Pure code over
//! `http` types, so it is unit-tested and fuzzed without sockets.

use http::{HeaderMap, Method, StatusCode, Uri};

use super::{Mode, Placement, XhttpSettings};

/// The leg a request is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leg {
    /// A CORS preflight: answered 200 with the CORS headers.
    Options,
    /// One POST (no session) carrying both directions.
    StreamOne,
    /// The GET of a session: the downlink.
    StreamDown { session: String },
    /// The one streaming POST of a session: the uplink.
    StreamUp { session: String },
    /// One numbered chunk of a session's uplink.
    PacketUp { session: String, seq: u64 },
}

/// A request refused: the status Xray answers, and why (for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub why: String,
}

fn refuse(status: StatusCode, why: impl Into<String>) -> Refusal {
    Refusal {
        status,
        why: why.into(),
    }
}

/// Classifies a request as the server of `s` sees it.
pub fn classify(
    s: &XhttpSettings,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Leg, Refusal> {
    if !s.host.is_empty() {
        let host = headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| uri.authority().map(|a| a.as_str()))
            .unwrap_or("");
        if !host_matches(host, &s.host) {
            return Err(refuse(
                StatusCode::NOT_FOUND,
                format!("host {host:?} is not {:?}", s.host),
            ));
        }
    }
    let path = uri.path();
    let Some(rest) = path.strip_prefix(s.path.as_str()) else {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            format!("path {path:?} is not under {:?}", s.path),
        ));
    };
    if method == Method::OPTIONS {
        return Ok(Leg::Options);
    }
    let pad = super::obfs::request_padding(s, uri.query(), headers);
    if !super::obfs::valid(s.padding_method, s.padding, &pad) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "padding of {} bytes is outside {}-{}",
                pad.len(),
                s.padding.from,
                s.padding.to
            ),
        ));
    }
    let (session, seq) = meta_of(s, rest, uri, headers);
    let allowed = |m: Mode| s.mode == Mode::Auto || s.mode == m;
    if session.is_empty() && !(allowed(Mode::StreamOne) || s.mode == Mode::StreamUp) {
        return Err(refuse(StatusCode::BAD_REQUEST, "stream-one is not allowed"));
    }
    let uplink = method != Method::GET || !seq.is_empty();
    if uplink && !session.is_empty() {
        if seq.is_empty() {
            if !allowed(Mode::StreamUp) {
                return Err(refuse(StatusCode::BAD_REQUEST, "stream-up is not allowed"));
            }
            return Ok(Leg::StreamUp { session });
        }
        if !allowed(Mode::PacketUp) {
            return Err(refuse(StatusCode::BAD_REQUEST, "packet-up is not allowed"));
        }
        let Ok(seq) = seq.parse::<u64>() else {
            return Err(refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("sequence number {seq:?} is not a number"),
            ));
        };
        return Ok(Leg::PacketUp { session, seq });
    }
    if session.is_empty() {
        Ok(Leg::StreamOne)
    } else {
        Ok(Leg::StreamDown { session })
    }
}

/// Xray's `IsValidHTTPHost`: case-insensitive, the request's port ignored.
pub fn host_matches(request: &str, config: &str) -> bool {
    let r = request.to_ascii_lowercase();
    let host = if r.starts_with('[') {
        r.split_once(']').map(|(h, _)| &h[1..]).unwrap_or(&r)
    } else {
        r.rsplit_once(':').map(|(h, _)| h).unwrap_or(&r)
    };
    let c = config.to_ascii_lowercase();
    host == c || host == c.trim_start_matches('[').trim_end_matches(']')
}

/// The value of `key` in a query string (first occurrence, not percent-decoded: the padding
/// and the ids Xray sends need no decoding).
pub fn query_get<'a>(q: &'a str, key: &str) -> Option<&'a str> {
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then_some(v)
    })
}

pub use super::obfs::cookie_get;

fn placed(
    p: Placement,
    key: &str,
    segs: &mut std::str::Split<'_, char>,
    uri: &Uri,
    headers: &HeaderMap,
) -> String {
    let v = match p {
        Placement::Path => segs.next(),
        Placement::Query => uri.query().and_then(|q| query_get(q, key)),
        Placement::Header => headers.get(key).and_then(|v| v.to_str().ok()),
        Placement::Cookie => cookie_get(headers, key),
    };
    v.unwrap_or("").to_string()
}

/// The session id and the sequence number (empty when absent), from the path after the
/// configured prefix (`rest`) or wherever the settings place them.
pub fn meta_of(s: &XhttpSettings, rest: &str, uri: &Uri, headers: &HeaderMap) -> (String, String) {
    let mut segs = rest.split('/');
    let session = placed(
        s.session_placement,
        s.session_key(),
        &mut segs,
        uri,
        headers,
    );
    let seq = placed(s.seq_placement, s.seq_key(), &mut segs, uri, headers);
    (session, seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> XhttpSettings {
        let mut s = XhttpSettings::default();
        s.set_path("/xh");
        s
    }

    fn req(method: &str, uri: &str, pad: usize) -> (Method, Uri, HeaderMap) {
        let mut h = HeaderMap::new();
        if pad > 0 {
            let r = format!("https://h.test/xh/?x_padding={}", "X".repeat(pad));
            h.insert(http::header::REFERER, r.parse().unwrap());
        }
        (method.parse().unwrap(), uri.parse().unwrap(), h)
    }

    fn leg(s: &XhttpSettings, method: &str, uri: &str, pad: usize) -> Result<Leg, Refusal> {
        let (m, u, h) = req(method, uri, pad);
        classify(s, &m, &u, &h)
    }

    const SID: &str = "0b1ad2f4-54b1-4a6e-8d0e-3f0e8c1f2a3b";

    #[test]
    fn the_legs_of_every_mode() {
        let s = settings();
        assert_eq!(
            leg(&s, "GET", &format!("/xh/{SID}"), 300),
            Ok(Leg::StreamDown {
                session: SID.into()
            })
        );
        assert_eq!(
            leg(&s, "POST", &format!("/xh/{SID}/7?a=b"), 300),
            Ok(Leg::PacketUp {
                session: SID.into(),
                seq: 7
            })
        );
        assert_eq!(
            leg(&s, "POST", &format!("/xh/{SID}"), 300),
            Ok(Leg::StreamUp {
                session: SID.into()
            })
        );
        assert_eq!(leg(&s, "POST", "/xh/", 300), Ok(Leg::StreamOne));
        // GET with a seq is an uplink packet (uplinkHTTPMethod GET).
        assert_eq!(
            leg(&s, "GET", &format!("/xh/{SID}/0"), 300),
            Ok(Leg::PacketUp {
                session: SID.into(),
                seq: 0
            })
        );
        assert_eq!(leg(&s, "OPTIONS", "/xh/x", 0), Ok(Leg::Options));
    }

    #[test]
    fn refusals_carry_xrays_status_codes() {
        let s = settings();
        let status = |r: Result<Leg, Refusal>| r.unwrap_err().status.as_u16();
        assert_eq!(status(leg(&s, "GET", "/other/", 300)), 404);
        assert_eq!(status(leg(&s, "GET", "/xh", 300)), 404);
        assert_eq!(status(leg(&s, "GET", &format!("/xh/{SID}"), 0)), 400);
        assert_eq!(status(leg(&s, "GET", &format!("/xh/{SID}"), 99)), 400);
        assert_eq!(status(leg(&s, "GET", &format!("/xh/{SID}"), 1001)), 400);
        assert!(leg(&s, "GET", &format!("/xh/{SID}"), 1000).is_ok());
        assert!(leg(&s, "GET", &format!("/xh/{SID}"), 100).is_ok());
        assert_eq!(status(leg(&s, "POST", &format!("/xh/{SID}/x1"), 300)), 500);
        assert_eq!(status(leg(&s, "POST", &format!("/xh/{SID}/-1"), 300)), 500);
        // A fixed mode refuses the others (a stream-up server still takes stream-one).
        let mut p = settings();
        p.mode = Mode::PacketUp;
        assert_eq!(status(leg(&p, "POST", "/xh/", 300)), 400);
        assert_eq!(status(leg(&p, "POST", &format!("/xh/{SID}"), 300)), 400);
        assert!(leg(&p, "POST", &format!("/xh/{SID}/1"), 300).is_ok());
        let mut u = settings();
        u.mode = Mode::StreamUp;
        assert_eq!(leg(&u, "POST", "/xh/", 300), Ok(Leg::StreamOne));
        assert_eq!(status(leg(&u, "POST", &format!("/xh/{SID}/1"), 300)), 400);
        let mut o = settings();
        o.mode = Mode::StreamOne;
        assert_eq!(status(leg(&o, "POST", &format!("/xh/{SID}"), 300)), 400);
    }

    #[test]
    fn host_is_checked_without_port_and_case() {
        let mut s = settings();
        s.host = "Example.COM".into();
        let (m, u, mut h) = req("POST", "/xh/", 300);
        h.insert(http::header::HOST, "example.com:443".parse().unwrap());
        assert_eq!(classify(&s, &m, &u, &h), Ok(Leg::StreamOne));
        h.insert(http::header::HOST, "other.com".parse().unwrap());
        assert_eq!(classify(&s, &m, &u, &h).unwrap_err().status, 404);
        // h2: the authority.
        let (m, _, h) = req("POST", "/xh/", 300);
        let u: Uri = "https://example.com/xh/".parse().unwrap();
        assert_eq!(classify(&s, &m, &u, &h), Ok(Leg::StreamOne));
        assert!(host_matches("[::1]:80", "::1"));
    }

    #[test]
    fn padding_in_the_query_when_there_is_no_referer() {
        let s = settings();
        let (m, _, h) = req("POST", "/", 0);
        let u: Uri = format!("/xh/?x_padding={}", "X".repeat(200))
            .parse()
            .unwrap();
        assert_eq!(classify(&s, &m, &u, &h), Ok(Leg::StreamOne));
    }

    #[test]
    fn placements_other_than_the_path() {
        let mut s = settings();
        s.session_placement = Placement::Cookie;
        s.seq_placement = Placement::Header;
        let (m, u, mut h) = req("POST", "/xh/", 300);
        h.insert(
            http::header::COOKIE,
            format!("a=b; x_session={SID}").parse().unwrap(),
        );
        h.insert("x-seq", "12".parse().unwrap());
        assert_eq!(
            classify(&s, &m, &u, &h),
            Ok(Leg::PacketUp {
                session: SID.into(),
                seq: 12
            })
        );
        s.session_placement = Placement::Query;
        s.seq_placement = Placement::Query;
        let (m, _, h) = req("POST", "/", 300);
        let u: Uri = format!("/xh/?x_session={SID}&x_seq=3").parse().unwrap();
        assert_eq!(
            classify(&s, &m, &u, &h),
            Ok(Leg::PacketUp {
                session: SID.into(),
                seq: 3
            })
        );
    }
}
