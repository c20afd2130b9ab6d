//! `streamSettings.hysteriaSettings` (the `hysteria` network) and `streamSettings.finalmask`,
//! understood: plain settings that the Hysteria protocol (`proxy::hysteria`) runs with.

use std::time::Duration;

use bytes::Bytes;

use super::QuicParams;
use crate::transport::udpmask::UdpMasks;

/// `hysteriaSettings`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HysteriaSettings {
    /// Client: the credential (`hysteria-auth`).
    pub auth: String,
    /// Server: a UDP session's idle time (`udpIdleTimeout`, 2-600 s, 60 s by default).
    pub udp_idle: Duration,
    pub masquerade: Masquerade,
}

impl Default for HysteriaSettings {
    fn default() -> Self {
        HysteriaSettings {
            auth: String::new(),
            udp_idle: Duration::from_secs(60),
            masquerade: Masquerade::NotFound,
        }
    }
}

/// `hysteriaSettings.masquerade`: what a request that is not an authentication gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Masquerade {
    /// Go's `404 page not found` (`type` `""` or `"404"`).
    #[default]
    NotFound,
    /// `type: "string"`: a fixed answer (status 0 is 200).
    Fixed {
        status: u16,
        headers: Vec<(String, String)>,
        content: Bytes,
    },
    /// `type: "file"`: a directory served as a web site.
    Dir(std::path::PathBuf),
    /// `type: "proxy"`: every request forwarded to `url` (its path a prefix), with the
    /// client's Host unless `rewrite_host`; 502 when it cannot be reached.
    Proxy {
        url: String,
        rewrite_host: bool,
        insecure: bool,
    },
}

/// `streamSettings.finalmask`: the UDP masks and QUIC's settings.
#[derive(Clone, Debug, Default)]
pub struct FinalMask {
    pub udp: UdpMasks,
    pub quic: QuicParams,
}
