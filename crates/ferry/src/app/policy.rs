//! `policy`: timeouts, buffer size and stats switches per user level, and system stats.

use std::collections::HashMap;
use std::time::Duration;

use crate::config::reader::{ConfigError, Obj, Result};

/// One level's policy. Defaults are Xray's code defaults (not its stale docs).
#[derive(Clone, Debug)]
pub struct LevelPolicy {
    pub handshake: Duration,
    pub conn_idle: Duration,
    pub uplink_only: Duration,
    pub downlink_only: Duration,
    /// Copy buffer bytes (policy `bufferSize` is in KiB); `None` = Ferry's default.
    pub buffer_size: Option<usize>,
    pub stats_user_uplink: bool,
    pub stats_user_downlink: bool,
    /// Track the user's source IPs (`user>>>EMAIL>>>online`).
    pub stats_user_online: bool,
}

impl Default for LevelPolicy {
    fn default() -> Self {
        LevelPolicy {
            handshake: Duration::from_secs(60),
            conn_idle: Duration::from_secs(300),
            uplink_only: Duration::from_secs(1),
            downlink_only: Duration::from_secs(1),
            buffer_size: None,
            stats_user_uplink: false,
            stats_user_downlink: false,
            stats_user_online: false,
        }
    }
}

/// `policy.system`.
#[derive(Clone, Debug, Default)]
pub struct SystemPolicy {
    pub stats_inbound_uplink: bool,
    pub stats_inbound_downlink: bool,
    pub stats_outbound_uplink: bool,
    pub stats_outbound_downlink: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub levels: HashMap<u32, LevelPolicy>,
    pub system: SystemPolicy,
}

impl Policy {
    pub fn level(&self, level: u32) -> LevelPolicy {
        self.levels.get(&level).cloned().unwrap_or_default()
    }

    pub fn parse(o: &Obj<'_>) -> Result<Policy> {
        let mut p = Policy::default();
        if let Some(levels) = o.obj("levels")? {
            if let Some((path, serde_json::Value::Object(m))) = o.get("levels") {
                for key in m.keys() {
                    let n: u32 = key.parse().map_err(|_| {
                        ConfigError::new(
                            format!("{path}.{key}"),
                            "level must be a non-negative integer",
                        )
                    })?;
                    let Some(lo) = levels.obj(key)? else {
                        continue;
                    };
                    let mut l = LevelPolicy::default();
                    let secs = |k: &str, d: &mut Duration| -> Result<()> {
                        if let Some(v) = lo.u64(k)? {
                            *d = Duration::from_secs(v);
                        }
                        Ok(())
                    };
                    secs("handshake", &mut l.handshake)?;
                    secs("connIdle", &mut l.conn_idle)?;
                    secs("uplinkOnly", &mut l.uplink_only)?;
                    secs("downlinkOnly", &mut l.downlink_only)?;
                    if let Some(kib) = lo.i64("bufferSize")? {
                        // 0 = "no buffering" in Xray: the smallest useful buffer; negative = unlimited.
                        l.buffer_size = Some(match kib {
                            k if k <= 0 => {
                                if k == 0 {
                                    4 * 1024
                                } else {
                                    512 * 1024
                                }
                            }
                            k => (k as usize).min(64 * 1024) * 1024,
                        });
                    }
                    l.stats_user_uplink = lo.bool("statsUserUplink")?.unwrap_or(false);
                    l.stats_user_downlink = lo.bool("statsUserDownlink")?.unwrap_or(false);
                    l.stats_user_online = lo.bool("statsUserOnline")?.unwrap_or(false);
                    lo.finish();
                    p.levels.insert(n, l);
                }
            }
            levels.finish();
        }
        if let Some(s) = o.obj("system")? {
            p.system = SystemPolicy {
                stats_inbound_uplink: s.bool("statsInboundUplink")?.unwrap_or(false),
                stats_inbound_downlink: s.bool("statsInboundDownlink")?.unwrap_or(false),
                stats_outbound_uplink: s.bool("statsOutboundUplink")?.unwrap_or(false),
                stats_outbound_downlink: s.bool("statsOutboundDownlink")?.unwrap_or(false),
            };
            s.finish();
        }
        Ok(p)
    }
}
