//! The stream settings messages panels send (`xray.transport.internet`): transports, TLS,
//! REALITY, sockopt.

use std::collections::HashMap;

use super::*;

// ---- xray.transport.internet ----

/// `xray.transport.internet.StreamConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamConfig {
    /// Removed upstream (the old transport enum); nonzero means an old client's transport.
    #[prost(int32, tag = "1")]
    pub protocol: i32,
    #[prost(message, repeated, tag = "2")]
    pub transport_settings: Vec<TransportConfig>,
    #[prost(string, tag = "3")]
    pub security_type: String,
    #[prost(message, repeated, tag = "4")]
    pub security_settings: Vec<TypedMessage>,
    #[prost(string, tag = "5")]
    pub protocol_name: String,
    #[prost(message, optional, tag = "6")]
    pub socket_settings: Option<SocketConfig>,
    #[prost(message, optional, tag = "8")]
    pub address: Option<IpOrDomain>,
    #[prost(uint32, tag = "9")]
    pub port: u32,
    #[prost(message, repeated, tag = "10")]
    pub udpmasks: Vec<TypedMessage>,
    #[prost(message, repeated, tag = "11")]
    pub tcpmasks: Vec<TypedMessage>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TransportConfig {
    #[prost(int32, tag = "1")]
    pub protocol: i32,
    #[prost(message, optional, tag = "2")]
    pub settings: Option<TypedMessage>,
    #[prost(string, tag = "3")]
    pub protocol_name: String,
}

/// `xray.transport.internet.SocketConfig` (the fields Ferry maps; others are refused when set).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SocketConfig {
    #[prost(int32, tag = "1")]
    pub mark: i32,
    #[prost(int32, tag = "2")]
    pub tfo: i32,
    #[prost(int32, tag = "3")]
    pub tproxy: i32,
    #[prost(bool, tag = "4")]
    pub receive_original_dest_address: bool,
    #[prost(bool, tag = "7")]
    pub accept_proxy_protocol: bool,
    #[prost(int32, tag = "8")]
    pub domain_strategy: i32,
    #[prost(string, tag = "9")]
    pub dialer_proxy: String,
    #[prost(int32, tag = "10")]
    pub tcp_keep_alive_interval: i32,
    #[prost(int32, tag = "11")]
    pub tcp_keep_alive_idle: i32,
    #[prost(string, tag = "13")]
    pub interface: String,
    #[prost(bool, tag = "14")]
    pub v6only: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProxyConfig {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(bool, tag = "2")]
    pub transport_layer_proxy: bool,
}

/// `xray.transport.internet.tcp.Config`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TcpConfig {
    #[prost(message, optional, tag = "2")]
    pub header_settings: Option<TypedMessage>,
    #[prost(bool, tag = "3")]
    pub accept_proxy_protocol: bool,
}

/// `xray.transport.internet.websocket.Config` and `xray.transport.internet.httpupgrade.Config`
/// (the same fields; HTTPUpgrade has no heartbeat).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WsConfig {
    #[prost(string, tag = "1")]
    pub host: String,
    #[prost(string, tag = "2")]
    pub path: String,
    #[prost(map = "string, string", tag = "3")]
    pub header: HashMap<String, String>,
    #[prost(bool, tag = "4")]
    pub accept_proxy_protocol: bool,
    #[prost(uint32, tag = "5")]
    pub ed: u32,
    #[prost(uint32, tag = "6")]
    pub heartbeat_period: u32,
}

/// `xray.transport.internet.reality.Config` (server fields 1–13, client fields 21–27).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RealityConfig {
    #[prost(bool, tag = "1")]
    pub show: bool,
    #[prost(string, tag = "2")]
    pub dest: String,
    #[prost(string, tag = "3")]
    pub r#type: String,
    #[prost(uint64, tag = "4")]
    pub xver: u64,
    #[prost(string, repeated, tag = "5")]
    pub server_names: Vec<String>,
    #[prost(bytes = "vec", tag = "6")]
    pub private_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "7")]
    pub min_client_ver: Vec<u8>,
    #[prost(bytes = "vec", tag = "8")]
    pub max_client_ver: Vec<u8>,
    #[prost(uint64, tag = "9")]
    pub max_time_diff: u64,
    #[prost(bytes = "vec", repeated, tag = "10")]
    pub short_ids: Vec<Vec<u8>>,
    #[prost(bytes = "vec", tag = "11")]
    pub mldsa65_seed: Vec<u8>,
    #[prost(message, optional, tag = "12")]
    pub limit_fallback_upload: Option<LimitFallback>,
    #[prost(message, optional, tag = "13")]
    pub limit_fallback_download: Option<LimitFallback>,
    #[prost(string, tag = "21")]
    pub fingerprint: String,
    #[prost(string, tag = "22")]
    pub server_name: String,
    #[prost(bytes = "vec", tag = "23")]
    pub public_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "24")]
    pub short_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "25")]
    pub mldsa65_verify: Vec<u8>,
    #[prost(string, tag = "26")]
    pub spider_x: String,
    #[prost(int64, repeated, tag = "27")]
    pub spider_y: Vec<i64>,
    #[prost(string, tag = "31")]
    pub master_key_log: String,
}

/// `xray.transport.internet.reality.LimitFallback`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LimitFallback {
    #[prost(uint64, tag = "1")]
    pub after_bytes: u64,
    #[prost(uint64, tag = "2")]
    pub bytes_per_sec: u64,
    #[prost(uint64, tag = "3")]
    pub burst_bytes_per_sec: u64,
}

/// `xray.transport.internet.splithttp.RangeConfig`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct RangeConfig {
    #[prost(int32, tag = "1")]
    pub from: i32,
    #[prost(int32, tag = "2")]
    pub to: i32,
}

/// `xray.transport.internet.splithttp.XmuxConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct XmuxConfig {
    #[prost(message, optional, tag = "1")]
    pub max_concurrency: Option<RangeConfig>,
    #[prost(message, optional, tag = "2")]
    pub max_connections: Option<RangeConfig>,
    #[prost(message, optional, tag = "3")]
    pub c_max_reuse_times: Option<RangeConfig>,
    #[prost(message, optional, tag = "4")]
    pub h_max_request_times: Option<RangeConfig>,
    #[prost(message, optional, tag = "5")]
    pub h_max_reusable_secs: Option<RangeConfig>,
    #[prost(int64, tag = "6")]
    pub h_keep_alive_period: i64,
}

/// `xray.transport.internet.splithttp.Config` (XHTTP).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SplitHttpConfig {
    #[prost(string, tag = "1")]
    pub host: String,
    #[prost(string, tag = "2")]
    pub path: String,
    #[prost(string, tag = "3")]
    pub mode: String,
    #[prost(map = "string, string", tag = "4")]
    pub headers: HashMap<String, String>,
    #[prost(message, optional, tag = "5")]
    pub x_padding_bytes: Option<RangeConfig>,
    #[prost(bool, tag = "6")]
    pub no_grpc_header: bool,
    #[prost(bool, tag = "7")]
    pub no_sse_header: bool,
    #[prost(message, optional, tag = "8")]
    pub sc_max_each_post_bytes: Option<RangeConfig>,
    #[prost(message, optional, tag = "9")]
    pub sc_min_posts_interval_ms: Option<RangeConfig>,
    #[prost(int64, tag = "10")]
    pub sc_max_buffered_posts: i64,
    #[prost(message, optional, tag = "11")]
    pub sc_stream_up_server_secs: Option<RangeConfig>,
    #[prost(message, optional, tag = "12")]
    pub xmux: Option<XmuxConfig>,
    #[prost(message, optional, boxed, tag = "13")]
    pub download_settings: Option<Box<StreamConfig>>,
    #[prost(bool, tag = "14")]
    pub x_padding_obfs_mode: bool,
    #[prost(string, tag = "15")]
    pub x_padding_key: String,
    #[prost(string, tag = "16")]
    pub x_padding_header: String,
    #[prost(string, tag = "17")]
    pub x_padding_placement: String,
    #[prost(string, tag = "18")]
    pub x_padding_method: String,
    #[prost(string, tag = "19")]
    pub uplink_http_method: String,
    #[prost(string, tag = "20")]
    pub session_placement: String,
    #[prost(string, tag = "21")]
    pub session_key: String,
    #[prost(string, tag = "22")]
    pub seq_placement: String,
    #[prost(string, tag = "23")]
    pub seq_key: String,
    #[prost(string, tag = "24")]
    pub uplink_data_placement: String,
    #[prost(string, tag = "25")]
    pub uplink_data_key: String,
    #[prost(message, optional, tag = "26")]
    pub uplink_chunk_size: Option<RangeConfig>,
    #[prost(int32, tag = "27")]
    pub server_max_header_bytes: i32,
}

/// `xray.transport.internet.grpc.encoding.Config`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GrpcConfig {
    #[prost(string, tag = "1")]
    pub authority: String,
    #[prost(string, tag = "2")]
    pub service_name: String,
    #[prost(bool, tag = "3")]
    pub multi_mode: bool,
    #[prost(int32, tag = "4")]
    pub idle_timeout: i32,
    #[prost(int32, tag = "5")]
    pub health_check_timeout: i32,
    #[prost(bool, tag = "6")]
    pub permit_without_stream: bool,
    #[prost(int32, tag = "7")]
    pub initial_windows_size: i32,
    #[prost(string, tag = "8")]
    pub user_agent: String,
}

/// `xray.transport.internet.headers.http.Header`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpHeader {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub value: Vec<String>,
}

/// `Version`, `Method` of the HTTP header config: one string.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpValue {
    #[prost(string, tag = "1")]
    pub value: String,
}

/// `xray.transport.internet.headers.http.RequestConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpRequestConfig {
    #[prost(message, optional, tag = "1")]
    pub version: Option<HttpValue>,
    #[prost(message, optional, tag = "2")]
    pub method: Option<HttpValue>,
    #[prost(string, repeated, tag = "3")]
    pub uri: Vec<String>,
    #[prost(message, repeated, tag = "4")]
    pub header: Vec<HttpHeader>,
}

/// `xray.transport.internet.headers.http.Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpStatus {
    #[prost(string, tag = "1")]
    pub code: String,
    #[prost(string, tag = "2")]
    pub reason: String,
}

/// `xray.transport.internet.headers.http.ResponseConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpResponseConfig {
    #[prost(message, optional, tag = "1")]
    pub version: Option<HttpValue>,
    #[prost(message, optional, tag = "2")]
    pub status: Option<HttpStatus>,
    #[prost(message, repeated, tag = "3")]
    pub header: Vec<HttpHeader>,
}

/// `xray.transport.internet.headers.http.Config`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpHeaderConfig {
    #[prost(message, optional, tag = "1")]
    pub request: Option<HttpRequestConfig>,
    #[prost(message, optional, tag = "2")]
    pub response: Option<HttpResponseConfig>,
}

/// `xray.transport.internet.tls.Certificate`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Certificate {
    #[prost(bytes = "vec", tag = "1")]
    pub certificate: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(int32, tag = "3")]
    pub usage: i32,
    #[prost(string, tag = "5")]
    pub certificate_path: String,
    #[prost(string, tag = "6")]
    pub key_path: String,
    #[prost(bool, tag = "7")]
    pub one_time_loading: bool,
}

/// `xray.transport.internet.tls.Config`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TlsConfig {
    #[prost(message, repeated, tag = "2")]
    pub certificate: Vec<Certificate>,
    #[prost(string, tag = "3")]
    pub server_name: String,
    #[prost(string, repeated, tag = "4")]
    pub next_protocol: Vec<String>,
    #[prost(bool, tag = "5")]
    pub enable_session_resumption: bool,
    #[prost(bool, tag = "6")]
    pub disable_system_root: bool,
    #[prost(string, tag = "7")]
    pub min_version: String,
    #[prost(string, tag = "8")]
    pub max_version: String,
    #[prost(string, tag = "9")]
    pub cipher_suites: String,
    #[prost(string, tag = "11")]
    pub fingerprint: String,
    #[prost(bool, tag = "12")]
    pub reject_unknown_sni: bool,
    #[prost(bytes = "vec", repeated, tag = "22")]
    pub pinned_peer_cert_sha256: Vec<Vec<u8>>,
}
