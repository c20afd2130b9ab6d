//! `headers` objects (WebSocket, HTTPUpgrade, XHTTP, webhooks): header names and values as
//! an HTTP/1 head can carry them.

use crate::common::reader::{ConfigError, Obj, Result};

/// `headers`: an object of strings.
pub fn headers(o: &Obj<'_>) -> Result<Vec<(String, String)>> {
    let Some((p, v)) = o.get("headers") else {
        return Ok(Vec::new());
    };
    let Some(m) = v.as_object() else {
        return Err(ConfigError::new(p, "expected an object of strings"));
    };
    m.iter()
        .map(|(k, v)| {
            let v = v.as_str().ok_or_else(|| {
                ConfigError::new(
                    crate::config::reader::join(&p, k),
                    "expected a string (header value)",
                )
            })?;
            if k.is_empty() || k.bytes().any(|b| b.is_ascii_whitespace() || b == b':') {
                return Err(ConfigError::new(
                    crate::config::reader::join(&p, k),
                    "not a header name",
                ));
            }
            if v.contains(['\r', '\n']) {
                return Err(ConfigError::new(
                    crate::config::reader::join(&p, k),
                    "a header value may not hold a line break",
                ));
            }
            Ok((k.clone(), v.to_string()))
        })
        .collect()
}
