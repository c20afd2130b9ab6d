//! Packet-up uplink data carried in headers or cookies instead of the body
//! (`uplinkDataPlacement`, `uplinkDataKey`, `uplinkChunkSize`).

use base64::Engine;
use http::HeaderMap;

use super::super::{Range, XhttpSettings};
use super::DataPlacement;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A packet's uplink data as the chunks of its headers or cookies: base64url without padding,
/// cut into pieces of `chunk.rand()` characters (drawn for each piece).
pub fn data_chunks(data: &[u8], chunk: Range) -> Vec<String> {
    let enc = B64.encode(data);
    let mut out = Vec::new();
    let mut rest = enc.as_str();
    while !rest.is_empty() {
        let n = (chunk.rand().max(1) as usize).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a.to_string());
        rest = b;
    }
    out
}

/// Why a packet's uplink data was refused: a status and the reason.
pub type DataError = (http::StatusCode, String);

/// The uplink data a packet-up request carries in its headers and cookies (the body comes on
/// top for `auto`): chunks `KEY-0`, `KEY-1`, ... up to the first missing one, joined, then
/// base64url-decoded; a bad encoding is a 400.
pub fn request_data(s: &XhttpSettings, headers: &HeaderMap) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    let key = &s.data_key;
    let decode = |parts: Vec<&str>, what: &str| {
        B64.decode(parts.concat()).map_err(|e| {
            (
                http::StatusCode::BAD_REQUEST,
                format!("uplink data in {what}s: {e}"),
            )
        })
    };
    // Chunks 0, 1, ... up to the first missing or empty one.
    fn chunks<'h>(get: impl Fn(usize) -> Option<&'h str>) -> Vec<&'h str> {
        (0..)
            .map_while(|i| get(i).filter(|v| !v.is_empty()))
            .collect()
    }
    if matches!(
        s.data_placement,
        DataPlacement::Auto | DataPlacement::Header
    ) {
        let parts = chunks(|i| {
            headers
                .get(format!("{key}-{i}").as_str())
                .and_then(|v| v.to_str().ok())
        });
        out.extend(decode(parts, "header")?);
    }
    if matches!(
        s.data_placement,
        DataPlacement::Auto | DataPlacement::Cookie
    ) {
        let parts = chunks(|i| super::cookie_get(headers, &format!("{key}_{i}")));
        out.extend(decode(parts, "cookie")?);
    }
    Ok(out)
}
