//! The request head of a leg: the URL with the session and seq placed, padding, a browser's
//! headers.

use std::io;

use http::{Method, Request};

use super::super::obfs::{self, DataPlacement};
use super::super::{Placement, XhttpSettings};
use super::{LegClient, Version};
use crate::common::Destination;
use crate::transport::upgrade::DEFAULT_USER_AGENT;

impl LegClient {
    /// The request head of a leg: URL with the session (and seq) placed, padding, headers, and
    /// for packet-up with `uplinkDataPlacement` header or cookie the packet's `data` (Xray's
    /// order: data, padding, session, seq).
    pub(super) fn request(
        &self,
        server: &Destination,
        method: Method,
        session: &str,
        seq: Option<u64>,
        streaming_up: bool,
        data: Option<&[u8]>,
    ) -> io::Result<http::request::Builder> {
        let s = &self.settings;
        let authority = self.authority(server);
        let scheme = if self.https { "https" } else { "http" };
        let mut path = s.path.clone();
        let mut query: Vec<(String, String)> = Vec::new();
        let mut sort_query = false;
        let mut extra: Vec<(String, String)> = Vec::new();
        let mut cookies: Vec<String> = Vec::new();
        if let Some(data) = data {
            let chunks = obfs::data_chunks(data, s.chunk_size);
            for (i, c) in chunks.into_iter().enumerate() {
                match s.data_placement {
                    DataPlacement::Cookie => cookies.push(format!("{}_{i}={c}", s.data_key)),
                    _ => extra.push((format!("{}-{i}", s.data_key), c)),
                }
            }
        }
        // The padding's URL is the request's before the session and seq are placed.
        match obfs::for_request(s, &format!("{scheme}://{authority}{path}")) {
            obfs::RequestPadding::Header(k, v) => extra.push((k, v)),
            obfs::RequestPadding::Cookie(c) => cookies.push(c),
            obfs::RequestPadding::Query(k, v) => {
                query.push((k, v));
                sort_query = true;
            }
        }
        let mut place = |p: Placement, key: &str, v: &str| match p {
            Placement::Path => {
                if !path.ends_with('/') {
                    path.push('/');
                }
                path.push_str(v);
            }
            Placement::Query => {
                query.push((key.to_string(), v.to_string()));
                sort_query = true;
            }
            Placement::Header => extra.push((key.to_string(), v.to_string())),
            Placement::Cookie => cookies.push(format!("{key}={v}")),
        };
        if !session.is_empty() {
            place(s.session_placement, s.session_key(), session);
        }
        if let Some(seq) = seq {
            place(s.seq_placement, s.seq_key(), &seq.to_string());
        }
        let q = query_string(s, query, sort_query);
        let url = format!("{scheme}://{authority}{path}{q}");
        let mut b = Request::builder().method(method);
        b = match self.version {
            Version::H2 => b.uri(url),
            Version::H1 => b
                .uri(format!("{path}{q}"))
                .header(http::header::HOST, authority),
        };
        Ok(browser_headers(s, b, extra, cookies, streaming_up))
    }
}

/// The query: the configured one, with ours (padding, session, seq) set over it and then,
/// as Go's `url.Values` encodes them, sorted by key.
fn query_string(s: &XhttpSettings, query: Vec<(String, String)>, sort_query: bool) -> String {
    // Go sets query pairs with `url.Values`, whose encoding sorts them by key.
    let mut pairs: Vec<(String, String)> = s
        .query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), v.to_string())
        })
        .filter(|(k, _)| !query.iter().any(|(q, _)| q == k))
        .collect();
    pairs.extend(query);
    if sort_query {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
    }
    if pairs.is_empty() {
        String::new()
    } else if !sort_query {
        format!("?{}", s.query)
    } else {
        let joined: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("?{}", joined.join("&"))
    }
}

/// A browser's headers (Chrome's fetch), the configured ones, and those the request carries
/// (`extra`, `cookies`, a gRPC content type for a streaming uplink).
fn browser_headers(
    s: &XhttpSettings,
    mut b: http::request::Builder,
    extra: Vec<(String, String)>,
    cookies: Vec<String>,
    streaming_up: bool,
) -> http::request::Builder {
    let has = |name: &str| s.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    for (k, v) in &s.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if !has("user-agent") {
        b = b
            .header("user-agent", DEFAULT_USER_AGENT)
            .header("sec-ch-ua-mobile", "?0")
            .header("sec-ch-ua-platform", "\"Windows\"");
        if !has("priority") {
            b = b.header("priority", "u=1, i");
        }
    }
    b = b
        .header("sec-fetch-mode", "cors")
        .header("sec-fetch-dest", "empty")
        .header("sec-fetch-site", "same-origin");
    for (k, v) in [
        ("cache-control", "no-cache"),
        ("pragma", "no-cache"),
        ("accept", "*/*"),
    ] {
        if !has(k) {
            b = b.header(k, v);
        }
    }
    for (k, v) in extra {
        b = b.header(k, v);
    }
    if !cookies.is_empty() {
        b = b.header(http::header::COOKIE, cookies.join("; "));
    }
    if streaming_up && !s.no_grpc_header {
        b = b.header(http::header::CONTENT_TYPE, "application/grpc");
    }
    b
}
