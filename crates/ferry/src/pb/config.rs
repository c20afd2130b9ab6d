//! The config messages panels send inside `TypedMessage`s: receivers and senders (the stream
//! settings are in `stream`, the protocols' configs and accounts in `proxies`).

use super::*;

// ---- xray.app.proxyman ----

/// `xray.app.proxyman.ReceiverConfig` as laid out since v25.10.15.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReceiverConfig {
    #[prost(message, optional, tag = "1")]
    pub port_list: Option<PortList>,
    #[prost(message, optional, tag = "2")]
    pub listen: Option<IpOrDomain>,
    #[prost(message, optional, tag = "3")]
    pub stream_settings: Option<StreamConfig>,
    #[prost(bool, tag = "4")]
    pub receive_original_destination: bool,
    #[prost(message, optional, tag = "6")]
    pub sniffing_settings: Option<SniffingConfig>,
}

/// `ReceiverConfig` as laid out up to v25.9 (field 3 was `allocation_strategy`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReceiverConfigOld {
    #[prost(message, optional, tag = "1")]
    pub port_list: Option<PortList>,
    #[prost(message, optional, tag = "2")]
    pub listen: Option<IpOrDomain>,
    #[prost(message, optional, tag = "4")]
    pub stream_settings: Option<StreamConfig>,
    #[prost(bool, tag = "5")]
    pub receive_original_destination: bool,
    #[prost(message, optional, tag = "7")]
    pub sniffing_settings: Option<SniffingConfig>,
}

/// `xray.app.proxyman.SniffingConfig` (only what Ferry looks at).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SniffingConfig {
    #[prost(bool, tag = "1")]
    pub enabled: bool,
    #[prost(string, repeated, tag = "2")]
    pub destination_override: Vec<String>,
}

/// `xray.app.proxyman.SenderConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SenderConfig {
    #[prost(message, optional, tag = "1")]
    pub via: Option<IpOrDomain>,
    #[prost(message, optional, tag = "2")]
    pub stream_settings: Option<StreamConfig>,
    #[prost(message, optional, tag = "3")]
    pub proxy_settings: Option<ProxyConfig>,
    #[prost(message, optional, tag = "4")]
    pub multiplex_settings: Option<MultiplexingConfig>,
    #[prost(string, tag = "5")]
    pub via_cidr: String,
    #[prost(int32, tag = "6")]
    pub target_strategy: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MultiplexingConfig {
    #[prost(bool, tag = "1")]
    pub enabled: bool,
    #[prost(int32, tag = "2")]
    pub concurrency: i32,
    #[prost(int32, tag = "3")]
    pub xudp_concurrency: i32,
    #[prost(string, tag = "4")]
    pub xudp_proxy_udp443: String,
}
