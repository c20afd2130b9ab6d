//! The protocols' server and client configs and accounts panels send inside `TypedMessage`s.

use std::collections::HashMap;

use super::*;

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
    /// VLESS Reverse (`reverse.tag`; its sniffing, field 2, is an outbound's only).
    #[prost(message, optional, tag = "7")]
    pub reverse: Option<VlessReverse>,
}

/// `xray.proxy.vless.Reverse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VlessReverse {
    #[prost(string, tag = "1")]
    pub tag: String,
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

/// `xray.proxy.hysteria.account.Account`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HysteriaAccount {
    #[prost(string, tag = "1")]
    pub auth: String,
}

/// `xray.proxy.hysteria.ServerConfig`: users alone.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UsersServerConfig {
    #[prost(message, repeated, tag = "1")]
    pub users: Vec<super::User>,
}
