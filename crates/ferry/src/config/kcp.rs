//! `kcpSettings` (the `kcp` / `mkcp` network) as Xray v26.3.27 reads them: its defaults, the
//! `tti` range, `writeBufferSize` in MB (0 is 512 KB), `readBufferSize` read and unused, and
//! the removed `header` and `seed` refused with Xray's own message.

use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::kcp::KcpSettings;

fn u32_of(o: &Obj<'_>, key: &str) -> Result<Option<u32>> {
    match o.u64(key)? {
        None => Ok(None),
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| ConfigError::new(o.key_path(key), format!("{n} is out of range"))),
    }
}

/// Reads `kcpSettings` (absent: Xray's defaults).
pub fn parse(o: Option<Obj<'_>>) -> Result<KcpSettings> {
    let mut k = KcpSettings::default();
    let Some(o) = o else {
        return Ok(k);
    };
    if let Some(mtu) = u32_of(&o, "mtu")? {
        if !(KcpSettings::MIN_MTU..=65_535).contains(&mtu) {
            return Err(ConfigError::new(
                o.key_path("mtu"),
                format!(
                    "invalid mKCP MTU size: {mtu} (from {} to 65535)",
                    KcpSettings::MIN_MTU
                ),
            ));
        }
        k.mtu = mtu;
    }
    if let Some(tti) = u32_of(&o, "tti")? {
        if !(10..=5000).contains(&tti) {
            return Err(ConfigError::new(
                o.key_path("tti"),
                format!("invalid mKCP TTI: {tti} (from 10 to 5000)"),
            ));
        }
        k.tti = tti;
    }
    if let Some(up) = u32_of(&o, "uplinkCapacity")? {
        k.uplink = up;
    }
    if let Some(down) = u32_of(&o, "downlinkCapacity")? {
        k.downlink = down;
    }
    if let Some(c) = o.bool("congestion")? {
        k.congestion = c;
    }
    // Read, as Xray reads it; Xray uses it nowhere.
    u32_of(&o, "readBufferSize")?;
    if let Some(w) = u32_of(&o, "writeBufferSize")? {
        k.write_buffer = match w {
            0 => 512 * 1024,
            w => w.checked_mul(1024 * 1024).ok_or_else(|| {
                ConfigError::new(
                    o.key_path("writeBufferSize"),
                    format!("{w} MB is out of range"),
                )
            })?,
        };
    }
    for key in ["header", "seed"] {
        if o.has(key) {
            return Err(ConfigError::new(
                o.key_path(key),
                "The feature mkcp header & seed has been removed and migrated to finalmask/udp \
                 header-* & mkcp-original & mkcp-aes128gcm. Please update your config(s) \
                 according to release note and documentation.",
            ));
        }
    }
    // Not in v26.3.27 (a later version's); Xray ignores unknown keys.
    o.ignore(&["cwndMultiplier", "maxSendingWindow"]);
    o.finish();
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::reader::Diagnostics;
    use serde_json::json;

    fn read(v: serde_json::Value) -> Result<KcpSettings> {
        let d = Diagnostics::default();
        parse(Some(Obj::new(&v, "streamSettings.kcpSettings", &d)?))
    }

    #[test]
    fn reads_xrays_fields_and_refuses_the_removed_ones() {
        let k = read(
            json!({"mtu": 1350, "tti": 20, "uplinkCapacity": 5, "downlinkCapacity": 100,
            "congestion": false, "readBufferSize": 2, "writeBufferSize": 2}),
        )
        .unwrap();
        assert_eq!(
            k,
            KcpSettings {
                mtu: 1350,
                tti: 20,
                uplink: 5,
                downlink: 100,
                congestion: false,
                write_buffer: 2 << 20
            }
        );
        assert_eq!(
            read(json!({"writeBufferSize": 0})).unwrap().write_buffer,
            512 * 1024
        );
        let e = read(json!({"tti": 5})).unwrap_err();
        assert!(e.to_string().contains("kcpSettings.tti"), "{e}");
        let e = read(json!({"seed": "old"})).unwrap_err().to_string();
        assert!(
            e.contains("kcpSettings.seed") && e.contains("mkcp-aes128gcm"),
            "{e}"
        );
        let e = read(json!({"header": {"type": "srtp"}}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kcpSettings.header") && e.contains("removed"),
            "{e}"
        );
        assert!(read(json!({"mtu": 10})).is_err());
        assert!(read(json!({"mtu": -1})).is_err());
    }
}
