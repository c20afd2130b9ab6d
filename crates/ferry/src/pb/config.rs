//! The config messages panels send inside `TypedMessage`s: receivers and senders, stream
//! settings, and the protocols' server and client configs and accounts.

use std::collections::HashMap;

use super::{IpOrDomain, PortList, ServerEndpoint, TypedMessage, User};

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

// ---- proxies ----

/// `xray.proxy.vless.Account`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VlessAccount {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub flow: String,
    #[prost(string, tag = "3")]
    pub encryption: String,
}

/// `xray.proxy.vless.inbound.Config` and `xray.proxy.trojan.ServerConfig` (same fields 1-2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FallbackServerConfig {
    #[prost(message, repeated, tag = "1")]
    pub users: Vec<User>,
    #[prost(message, repeated, tag = "2")]
    pub fallbacks: Vec<Fallback>,
    #[prost(string, tag = "3")]
    pub decryption: String,
}

/// `xray.proxy.vless.inbound.Config` before v25.9.5 (Xray 1.250905.0 swapped fields 2 and 3).
#[derive(Clone, PartialEq, prost::Message)]
pub struct VlessInboundConfigOld {
    #[prost(message, repeated, tag = "1")]
    pub users: Vec<User>,
    #[prost(string, tag = "2")]
    pub decryption: String,
    #[prost(message, repeated, tag = "3")]
    pub fallbacks: Vec<Fallback>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Fallback {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub alpn: String,
    #[prost(string, tag = "3")]
    pub path: String,
    #[prost(string, tag = "4")]
    pub r#type: String,
    #[prost(string, tag = "5")]
    pub dest: String,
    #[prost(uint64, tag = "6")]
    pub xver: u64,
}

/// `xray.proxy.vmess.Account`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VmessAccount {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "3")]
    pub security_settings: Option<SecurityConfig>,
}

/// `xray.common.protocol.SecurityConfig`: AUTO = 2, AES128_GCM = 3, CHACHA20_POLY1305 = 4,
/// NONE = 5, ZERO = 6 (the last two until v26.7.11).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecurityConfig {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
}

/// `xray.proxy.vmess.inbound.Config`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VmessInboundConfig {
    #[prost(message, repeated, tag = "1")]
    pub user: Vec<User>,
    #[prost(message, optional, tag = "2")]
    pub default: Option<VmessDefault>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct VmessDefault {
    #[prost(uint32, tag = "2")]
    pub level: u32,
}

/// `xray.proxy.trojan.Account`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrojanAccount {
    #[prost(string, tag = "1")]
    pub password: String,
}

/// `xray.proxy.shadowsocks.Account`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShadowsocksAccount {
    #[prost(string, tag = "1")]
    pub password: String,
    #[prost(int32, tag = "2")]
    pub cipher_type: i32,
    #[prost(bool, tag = "3")]
    pub iv_check: bool,
}

/// `xray.proxy.shadowsocks.ServerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShadowsocksServerConfig {
    #[prost(message, repeated, tag = "1")]
    pub users: Vec<User>,
    #[prost(int32, repeated, tag = "2")]
    pub network: Vec<i32>,
}

/// `xray.proxy.shadowsocks_2022.Account`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ss2022Account {
    #[prost(string, tag = "1")]
    pub key: String,
}

/// `xray.proxy.shadowsocks_2022.ServerConfig` (one user, no user API).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ss2022ServerConfig {
    #[prost(string, tag = "1")]
    pub method: String,
    #[prost(string, tag = "2")]
    pub key: String,
    #[prost(string, tag = "3")]
    pub email: String,
    #[prost(int32, tag = "4")]
    pub level: i32,
    #[prost(int32, repeated, tag = "5")]
    pub network: Vec<i32>,
}

/// `xray.proxy.shadowsocks_2022.MultiUserServerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ss2022MultiConfig {
    #[prost(string, tag = "1")]
    pub method: String,
    #[prost(string, tag = "2")]
    pub key: String,
    #[prost(message, repeated, tag = "3")]
    pub users: Vec<User>,
    #[prost(int32, repeated, tag = "4")]
    pub network: Vec<i32>,
}

/// `xray.proxy.shadowsocks_2022.ClientConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ss2022ClientConfig {
    #[prost(message, optional, tag = "1")]
    pub address: Option<IpOrDomain>,
    #[prost(uint32, tag = "2")]
    pub port: u32,
    #[prost(string, tag = "3")]
    pub method: String,
    #[prost(string, tag = "4")]
    pub key: String,
}

/// Outbounds that name one server: `xray.proxy.{vless,vmess}.outbound.Config`,
/// `xray.proxy.{trojan,shadowsocks,socks,http}.ClientConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerClientConfig {
    #[prost(message, optional, tag = "1")]
    pub server: Option<ServerEndpoint>,
}

/// `xray.proxy.socks.Account` / `xray.proxy.http.Account`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PasswordAccount {
    #[prost(string, tag = "1")]
    pub username: String,
    #[prost(string, tag = "2")]
    pub password: String,
}

/// `ferry.proxy.shadowsocksr.Account` (Ferry's own message, `proto/ferry/`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SsrAccount {
    #[prost(uint32, tag = "1")]
    pub uid: u32,
    #[prost(string, tag = "2")]
    pub password: String,
}

/// `xray.proxy.freedom.Config` (the fields Ferry maps).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FreedomConfig {
    #[prost(int32, tag = "1")]
    pub domain_strategy: i32,
    #[prost(message, optional, tag = "3")]
    pub destination_override: Option<ServerClientConfig>,
    #[prost(uint32, tag = "4")]
    pub user_level: u32,
}

/// `xray.proxy.blackhole.Config`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BlackholeConfig {
    #[prost(message, optional, tag = "1")]
    pub response: Option<TypedMessage>,
}

/// `xray.proxy.dokodemo.Config`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DokodemoConfig {
    #[prost(message, optional, tag = "1")]
    pub address: Option<IpOrDomain>,
    #[prost(uint32, tag = "2")]
    pub port: u32,
    #[prost(map = "string, string", tag = "3")]
    pub port_map: HashMap<String, String>,
    #[prost(bool, tag = "5")]
    pub follow_redirect: bool,
    #[prost(uint32, tag = "6")]
    pub user_level: u32,
    #[prost(int32, repeated, tag = "7")]
    pub networks: Vec<i32>,
}

/// `xray.proxy.socks.ServerConfig`: auth_type NO_AUTH = 0, PASSWORD = 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SocksServerConfig {
    #[prost(int32, tag = "1")]
    pub auth_type: i32,
    #[prost(map = "string, string", tag = "2")]
    pub accounts: HashMap<String, String>,
    #[prost(message, optional, tag = "3")]
    pub address: Option<IpOrDomain>,
    #[prost(bool, tag = "4")]
    pub udp_enabled: bool,
    #[prost(uint32, tag = "6")]
    pub user_level: u32,
}

/// `xray.proxy.http.ServerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpServerConfig {
    #[prost(map = "string, string", tag = "2")]
    pub accounts: HashMap<String, String>,
    #[prost(bool, tag = "3")]
    pub allow_transparent: bool,
    #[prost(uint32, tag = "4")]
    pub user_level: u32,
}
