//! The services around the proxies: `log`, and `metrics` and `api`, whose tags name outbounds.

use std::net::SocketAddr;
use std::sync::Arc;

use super::reader::{self, ConfigError, Diagnostics, Obj};
use crate::app::log::LogConfig;
use crate::app::stats::Stats;
use crate::proxy::OutboundHandler;

/// An outbound a service adds under its tag: (JSON path of the tag, tag, protocol, handler).
pub type ServiceOutbound = (String, String, &'static str, Arc<dyn OutboundHandler>);

/// Reads `log`.
pub fn parse_log(root: &Obj<'_>, diag: &Diagnostics) -> reader::Result<LogConfig> {
    Ok(match root.obj("log")? {
        Some(l) => {
            let mut c = LogConfig {
                level: l.str("loglevel")?.unwrap_or_else(|| "warning".into()),
                access: l.str("access")?,
                error: l.str("error")?,
                mask: None,
            };
            if !["debug", "info", "warning", "error", "none"]
                .contains(&c.level.to_ascii_lowercase().as_str())
            {
                // Xray takes any other level ("warn", "critical", "") as warning.
                diag.warn(
                    &l.key_path("loglevel"),
                    format!("unknown level {:?}; warning, as Xray does", c.level),
                );
                c.level = "warning".into();
            }
            c.mask = match l.str("maskAddress")? {
                Some(m) => crate::app::mask::Mask::parse(&m)
                    .map_err(|e| ConfigError::new(l.key_path("maskAddress"), e))?,
                None => None,
            };
            if l.bool("dnsLog")? == Some(true) {
                diag.warn(
                    &l.key_path("dnsLog"),
                    "logging DNS queries is not supported yet; ignored",
                );
            }
            l.finish();
            c
        }
        None => LogConfig::default(),
    })
}

/// Reads `metrics` and `api`: the metrics listen address, the API, and the outbounds their
/// tags name.
pub fn parse_services(
    root: &Obj<'_>,
    stats: &Option<Arc<Stats>>,
    _diag: &Diagnostics,
) -> reader::Result<(
    Option<SocketAddr>,
    Option<super::api::ApiConfig>,
    Vec<ServiceOutbound>,
)> {
    // `metrics.tag` (and `api.tag`) name outbounds a routing rule can send connections to.
    let mut special_outbounds: Vec<ServiceOutbound> = Vec::new();
    let metrics = match root.obj("metrics")? {
        Some(m) => {
            let addr = match m.str("listen")?.filter(|l| !l.is_empty()) {
                Some(l) => Some(l.parse::<SocketAddr>().map_err(|_| {
                    ConfigError::new(
                        m.key_path("listen"),
                        format!("{l:?} is not an ip:port address"),
                    )
                })?),
                None => None,
            };
            if let Some(a) = addr.filter(|a| !a.ip().is_loopback()) {
                m.diag().warn(
                    &m.key_path("listen"),
                    format!("{a} is reachable from other machines: metrics and /debug/vars show every user's traffic; listen on 127.0.0.1 unless a firewall keeps others out"),
                );
            }
            let tag = m.str("tag")?.filter(|t| !t.is_empty());
            if addr.is_none() && tag.is_none() {
                return Err(ConfigError::new(
                    m.path(),
                    "needs a tag or a listen address",
                ));
            }
            if let Some(t) = tag {
                let stats = stats.clone().unwrap_or_default();
                special_outbounds.push((
                    m.key_path("tag"),
                    t,
                    "metrics",
                    Arc::new(crate::app::metrics::MetricsOutbound { stats }),
                ));
            }
            m.finish();
            addr
        }
        None => None,
    };
    let api = match root.obj("api")? {
        Some(a) => {
            let (cfg, out) = super::api::parse(&a)?;
            special_outbounds.push((a.key_path("tag"), cfg.tag.clone(), "api", out));
            a.finish();
            Some(cfg)
        }
        None => None,
    };

    Ok((metrics, api, special_outbounds))
}
