//! `realitySettings` (transports2.md §1.1): read into the server side for inbounds and the
//! client side for outbounds, every field checked with its JSON path.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;

use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::reality::{
    ClientSettings, Fingerprint, RateLimit, RealityLayer, ServerSettings,
};

/// A base64url (padding optional) 32-byte key.
pub fn key32(s: &str) -> Option<[u8; 32]> {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim().trim_end_matches('='))
        .ok()?;
    b.try_into().ok()
}

/// Base64url without padding, as `xray x25519` prints keys.
pub fn b64(b: &[u8]) -> String {
    crate::common::text::base64_url(b)
}

fn short_id(s: &str) -> Option<[u8; 8]> {
    if s.len() > 16 || !s.len().is_multiple_of(2) {
        return None;
    }
    let mut out = [0u8; 8];
    for (i, b) in out.iter_mut().enumerate().take(s.len() / 2) {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn version(o: &Obj<'_>, key: &str) -> Result<Option<[u8; 3]>> {
    let Some(v) = o.str(key)?.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    // As Xray: up to three dot-separated parts of 0-255, missing parts 0 ("26.3" = 26.3.0).
    let mut out = [0u8; 3];
    let bad = || {
        ConfigError::new(
            o.key_path(key),
            format!("{v:?} is not a version x.y.z (at most three parts, each at most 255)"),
        )
    };
    for (i, p) in v.split('.').enumerate() {
        let slot = out.get_mut(i).ok_or_else(bad)?;
        if p.starts_with('+') {
            return Err(bad());
        }
        *slot = p.parse().map_err(|_| bad())?;
    }
    Ok(Some(out))
}

fn limit(o: &Obj<'_>, key: &str) -> Result<RateLimit> {
    let Some(l) = o.obj(key)? else {
        return Ok(RateLimit::default());
    };
    let r = RateLimit {
        after_bytes: l.u64("afterBytes")?.unwrap_or(0),
        bytes_per_sec: l.u64("bytesPerSec")?.unwrap_or(0),
        burst_bytes_per_sec: l.u64("burstBytesPerSec")?.unwrap_or(0),
    };
    l.finish();
    Ok(r)
}

/// Reads `realitySettings` (`path`: of the stream settings) and builds its side.
pub fn parse(r: Option<Obj<'_>>, path: &str, outbound: bool) -> Result<Arc<RealityLayer>> {
    let Some(r) = r else {
        return Err(ConfigError::new(
            format!("{path}.realitySettings"),
            "is required when security is \"reality\"",
        ));
    };
    // `settings`: 3x-ui keeps the client half of an inbound (publicKey, fingerprint,
    // serverName, spiderX, mldsa65Verify) in a nested object here for its share links; Xray
    // never reads it, so neither does Ferry.
    r.ignore(&["show", "masterKeyLog", "settings"]);
    let layer = if outbound { client(&r)? } else { server(&r)? };
    r.finish();
    Ok(Arc::new(layer))
}

fn server(r: &Obj<'_>) -> Result<RealityLayer> {
    let (tpath, tv) = r.get_alias(&["target", "dest"]).ok_or_else(|| {
        ConfigError::new(r.key_path("target"), "is required (the website probes see)")
    })?;
    let target = crate::common::reader::parse_dest(tv, &tpath)?;
    if let Some(ty) = r.str("type")? {
        let unix = matches!(&target.addr, crate::common::Address::Domain(d) if d.starts_with('/') || d.starts_with('@'));
        if !matches!(
            (ty.as_str(), unix),
            ("", _) | ("tcp", false) | ("unix", true)
        ) {
            return Err(ConfigError::new(
                r.key_path("type"),
                format!("type {ty:?} does not fit target {target}"),
            ));
        }
    }
    let xver = r.u64("xver")?.unwrap_or(0);
    if xver > 2 {
        return Err(ConfigError::new(r.key_path("xver"), "must be 0, 1 or 2"));
    }
    let server_names = r.str_list("serverNames")?.unwrap_or_default();
    if server_names.is_empty() {
        return Err(ConfigError::new(
            r.key_path("serverNames"),
            "needs at least one name",
        ));
    }
    let pk = r.req_str("privateKey")?;
    let private_key = key32(&pk).ok_or_else(|| {
        ConfigError::new(
            r.key_path("privateKey"),
            "is not a base64url X25519 key of 32 bytes (see `ferry x25519`)",
        )
    })?;
    let ids = r.str_list("shortIds")?.unwrap_or_default();
    if ids.is_empty() {
        return Err(ConfigError::new(
            r.key_path("shortIds"),
            "needs at least one short id (\"\" allows none)",
        ));
    }
    let mut short_ids = Vec::new();
    for id in ids {
        short_ids.push(short_id(&id).ok_or_else(|| {
            ConfigError::new(
                r.key_path("shortIds"),
                format!("{id:?} is not up to 16 hex digits of even length"),
            )
        })?);
    }
    let max_time_diff = r
        .u64("maxTimeDiff")?
        .filter(|m| *m > 0)
        .map(Duration::from_millis);
    let mldsa65_seed = match r.str("mldsa65Seed")?.filter(|s| !s.is_empty()) {
        None => None,
        Some(seed) => {
            let k = key32(&seed).ok_or_else(|| {
                ConfigError::new(
                    r.key_path("mldsa65Seed"),
                    "is not a base64url seed of 32 bytes (see `ferry mldsa65`)",
                )
            })?;
            if k == private_key {
                return Err(ConfigError::new(
                    r.key_path("mldsa65Seed"),
                    "must differ from privateKey",
                ));
            }
            Some(k)
        }
    };
    r.ignore(&[
        "serverName",
        "fingerprint",
        "shortId",
        "spiderX",
        "publicKey",
        "password",
        "mldsa65Verify",
    ]);
    let s = ServerSettings {
        target,
        xver: xver as u8,
        server_names,
        private_key,
        short_ids,
        min_client_ver: version(r, "minClientVer")?,
        max_client_ver: version(r, "maxClientVer")?,
        max_time_diff,
        limit_upload: limit(r, "limitFallbackUpload")?,
        limit_download: limit(r, "limitFallbackDownload")?,
        mldsa65_seed,
    };
    RealityLayer::server(s).map_err(|e| ConfigError::new(r.path(), e))
}

fn client(r: &Obj<'_>) -> Result<RealityLayer> {
    let fp = r.str("fingerprint")?.unwrap_or_default();
    let fingerprint =
        Fingerprint::parse(&fp).map_err(|e| ConfigError::new(r.key_path("fingerprint"), e))?;
    let (kpath, kv) = r.get_alias(&["password", "publicKey"]).ok_or_else(|| {
        ConfigError::new(
            r.key_path("password"),
            "is required (the server's public key)",
        )
    })?;
    let public_key = kv
        .as_str()
        .and_then(key32)
        .ok_or_else(|| ConfigError::new(kpath, "is not a base64url X25519 key of 32 bytes"))?;
    let sid = r.str("shortId")?.unwrap_or_default();
    let short_id = short_id(&sid).ok_or_else(|| {
        ConfigError::new(
            r.key_path("shortId"),
            format!("{sid:?} is not up to 16 hex digits of even length"),
        )
    })?;
    let spider_x = r.str("spiderX")?.unwrap_or_default();
    if !spider_x.is_empty() && !spider_x.starts_with('/') {
        return Err(ConfigError::new(r.key_path("spiderX"), "must start with /"));
    }
    let mldsa65_verify = match r.str("mldsa65Verify")?.filter(|s| !s.is_empty()) {
        None => None,
        Some(v) => Some(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(v.trim().trim_end_matches('='))
                .ok()
                .filter(|b| b.len() == 1952)
                .ok_or_else(|| {
                    ConfigError::new(
                        r.key_path("mldsa65Verify"),
                        "is not a base64url ML-DSA-65 public key of 1952 bytes",
                    )
                })?,
        ),
    };
    r.ignore(&[
        "serverNames",
        "shortIds",
        "privateKey",
        "target",
        "dest",
        "xver",
    ]);
    let s = ClientSettings {
        server_name: r.str("serverName")?.filter(|n| !n.is_empty()),
        fingerprint,
        public_key,
        short_id,
        spider_x,
        mldsa65_verify,
    };
    RealityLayer::client(s).map_err(|e| ConfigError::new(r.path(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_versions_read_as_xray_reads_them() {
        let d = crate::config::Diagnostics::default();
        let read = |v: &str| {
            let j = serde_json::json!({ "minClientVer": v });
            let o = Obj::new(&j, "r", &d).unwrap();
            version(&o, "minClientVer").map_err(|e| e.path)
        };
        assert_eq!(read("26.3.27"), Ok(Some([26, 3, 27])));
        assert_eq!(read("26.3"), Ok(Some([26, 3, 0])));
        assert_eq!(read("25"), Ok(Some([25, 0, 0])));
        assert_eq!(read(""), Ok(None));
        for bad in ["26.3.27.1", "256.0.0", "26.x", "26.", "+1.0.0"] {
            assert_eq!(read(bad), Err("r.minClientVer".to_string()), "{bad}");
        }
    }

    #[test]
    fn short_ids_and_keys_read_as_xray_reads_them() {
        assert_eq!(short_id(""), Some([0; 8]));
        assert_eq!(
            short_id("0123456789abcdef"),
            Some([1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef])
        );
        assert_eq!(short_id("ab"), Some([0xab, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(short_id("abc"), None);
        assert_eq!(short_id("0123456789abcdef01"), None);
        assert_eq!(short_id("zz"), None);
        let k = key32("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA").unwrap();
        assert_eq!(k[0], 1);
        assert_eq!(b64(&k), "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA");
        assert!(key32("AQID").is_none());
    }
}
