//! `tlsSettings`: read into [`TlsSettings`] and built into the server or client side of the
//! TLS layer. Certificates are loaded here, so a missing, unreadable or mismatched file is a
//! config error naming its field.

use std::sync::Arc;

use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::tls::{
    parse_pin, CertSource, CertificateEntry, TlsLayer, TlsSettings, Version,
};

/// Xray's default ALPN (servers, and clients over raw TCP).
pub const DEFAULT_ALPN: &[&str] = &["h2", "http/1.1"];

fn version(o: &Obj<'_>, key: &str, max: bool) -> Result<Option<Version>> {
    let Some(v) = o.str(key)? else {
        return Ok(None);
    };
    match v.trim() {
        "" => Ok(None),
        "1.3" => Ok(Some(Version::Tls13)),
        "1.2" => Ok(Some(Version::Tls12)),
        "1.0" | "1.1" if !max => {
            o.diag().warn(
                &o.key_path(key),
                format!("TLS {v} is not offered by Ferry; the lowest version spoken is 1.2"),
            );
            Ok(Some(Version::Tls12))
        }
        "1.0" | "1.1" => Err(ConfigError::new(
            o.key_path(key),
            format!("TLS {v} is not supported (Ferry speaks TLS 1.2 and 1.3)"),
        )),
        other => Err(ConfigError::new(
            o.key_path(key),
            format!("unknown TLS version {other:?} (expected \"1.2\" or \"1.3\")"),
        )),
    }
}

/// Reads `tlsSettings` (absent: defaults) and builds the inbound (server) or outbound (client)
/// side. `default_alpn`: what is offered when `alpn` is not set (a transport over TLS wants
/// its own: `http/1.1` under WebSocket, as Xray).
pub fn parse(
    t: Option<Obj<'_>>,
    path: &str,
    outbound: bool,
    default_alpn: &[&str],
) -> Result<Arc<TlsLayer>> {
    let mut s = TlsSettings {
        alpn: default_alpn.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    };
    let mut certs_path = format!("{path}.tlsSettings.certificates");
    if let Some(t) = t {
        certs_path = t.key_path("certificates");
        s.server_name = t.str("serverName")?.filter(|n| !n.is_empty());
        if let Some(a) = t.str_list("alpn")? {
            if !a.is_empty() {
                s.alpn = a;
            }
        }
        s.min_version = version(&t, "minVersion", false)?;
        s.max_version = version(&t, "maxVersion", true)?;
        if let (Some(lo), Some(hi)) = (s.min_version, s.max_version) {
            if lo > hi {
                return Err(ConfigError::new(
                    t.key_path("minVersion"),
                    "minVersion is above maxVersion",
                ));
            }
        }
        if let Some(pins) = t.str_list("pinnedPeerCertSha256")? {
            for p in pins {
                let pin = parse_pin(&p).ok_or_else(|| {
                    ConfigError::new(
                        t.key_path("pinnedPeerCertSha256"),
                        format!("{p:?} is not a SHA-256 in hex (64 hex digits, colons allowed)"),
                    )
                })?;
                s.pins.push(pin);
            }
        }
        for k in ["verifyPeerCertByName", "verifyPeerCertInNames"] {
            if let Some(names) = t.str_list(k)? {
                s.verify_names.extend(names);
            }
        }
        s.chain_pins = base64_pins(&t, "pinnedPeerCertificateChainSha256")?;
        s.key_pins = base64_pins(&t, "pinnedPeerCertificatePublicKeySha256")?;
        s.allow_insecure = t.bool("allowInsecure")?.unwrap_or(false);
        if s.allow_insecure && outbound {
            let by = if !s.pins.is_empty() || !s.chain_pins.is_empty() {
                "only its pins are checked"
            } else if !s.verify_names.is_empty() {
                "only verifyPeerCertByName is checked"
            } else {
                "the server's certificate is not verified at all"
            };
            t.diag().warn(
                &t.key_path("allowInsecure"),
                format!(
                    "{by} (Xray v26 refuses this field; pinnedPeerCertSha256 pins a \
                     self-signed certificate or a CA instead)"
                ),
            );
            if !s.key_pins.is_empty() {
                t.diag().warn(
                    &t.key_path("pinnedPeerCertificatePublicKeySha256"),
                    "matched against the chain verified with the roots, which allowInsecure \
                     skips: every server is refused (as Xray)",
                );
            }
        }
        s.reject_unknown_sni = t.bool("rejectUnknownSni")?.unwrap_or(false);
        s.session_resumption = t.bool("enableSessionResumption")?.unwrap_or(false);
        s.disable_system_root = t.bool("disableSystemRoot")?.unwrap_or(false);
        if let Some(fp) = t.str("fingerprint")?.filter(|f| !f.is_empty()) {
            if outbound {
                t.diag().warn(
                    &t.key_path("fingerprint"),
                    format!(
                        "{fp:?} accepted; Ferry sends rustls's own ClientHello (TLS 1.3 and 1.2, \
                         X25519MLKEM768/X25519 key shares), not a browser's"
                    ),
                );
            }
        }
        for c in t.objs(&["certificates"])? {
            s.certificates.push(Arc::new(certificate(c)?));
        }
        for k in [
            "cipherSuites",
            "curvePreferences",
            "echConfigList",
            "echServerKeys",
            "echForceQuery",
            "masterKeyLog",
            "allowInsecureIfPinnedPeerCertificate",
        ] {
            if t.has(k) {
                t.diag().warn(&t.key_path(k), "not applied by Ferry yet");
            }
        }
        t.ignore(&["disableSessionResumption"]);
        t.finish();
    }
    let built = if outbound {
        TlsLayer::client(&s)
    } else {
        TlsLayer::server(&s)
    };
    built.map(Arc::new).map_err(|e| {
        ConfigError::new(
            if outbound {
                path.to_string()
            } else {
                certs_path
            },
            e,
        )
    })
}

/// A list of base64 SHA-256 (the legacy pins of older Xray).
fn base64_pins(t: &Obj<'_>, key: &str) -> Result<Vec<[u8; 32]>> {
    use base64::Engine;
    let Some(list) = t.str_list(key)? else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|p| {
            base64::engine::general_purpose::STANDARD
                .decode(p.trim())
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| {
                    ConfigError::new(
                        t.key_path(key),
                        format!("{p:?} is not a SHA-256 in base64 (44 characters)"),
                    )
                })
        })
        .collect()
}

fn certificate(c: Obj<'_>) -> Result<CertificateEntry> {
    use crate::transport::tls::CertError;
    let usage = match c.str("usage")?.as_deref().map(str::to_ascii_lowercase) {
        None => crate::transport::tls::Usage::Encipherment,
        Some(u) if u.is_empty() || u == "encipherment" => {
            crate::transport::tls::Usage::Encipherment
        }
        Some(u) if u == "verify" => crate::transport::tls::Usage::Verify,
        Some(u) => {
            return Err(ConfigError::new(
                c.key_path("usage"),
                format!("usage {u:?} is not supported (encipherment or verify)"),
            ))
        }
    };
    let one_time = c.bool("oneTimeLoading")?.unwrap_or(false);
    c.ignore(&["ocspStapling", "buildChain"]);
    let (source, cert_key, key_key) = if let Some(f) = c.str("certificateFile")? {
        let key = c.str("keyFile")?;
        (
            CertSource::Files {
                cert: f.into(),
                key: key.map(Into::into),
            },
            "certificateFile",
            "keyFile",
        )
    } else if let Some(lines) = c.str_list_alias(&["certificate"])? {
        let key = c.str_list("key")?.map(|k| k.join("\n"));
        (
            CertSource::Inline {
                cert: lines.join("\n"),
                key,
            },
            "certificate",
            "key",
        )
    } else {
        return Err(ConfigError::new(
            c.path(),
            "needs certificateFile/keyFile or certificate/key",
        ));
    };
    let e = CertificateEntry::load(source, usage, one_time).map_err(|e| match e {
        CertError::Cert(m) => ConfigError::new(c.key_path(cert_key), m),
        CertError::Key(m) => ConfigError::new(c.key_path(key_key), m),
    })?;
    c.finish();
    Ok(e)
}
