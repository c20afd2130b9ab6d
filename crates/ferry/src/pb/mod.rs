//! The protobuf messages of Xray's API (`proto/*.proto` in this crate: the services'
//! requests and responses, and the config messages panels send), written as `prost`
//! structs by hand from those files. Field numbers and types are the wire contract.

#![allow(missing_docs)]

use std::collections::HashMap;

mod config;
mod proxies;
mod stream;
pub use config::*;
pub use proxies::*;
pub use stream::*;

/// `xray.common.serial.TypedMessage`: `type` is the full message name, no URL prefix.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypedMessage {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

impl TypedMessage {
    /// `msg` under its full name.
    pub fn of<M: prost::Message>(name: &str, msg: &M) -> Self {
        TypedMessage {
            r#type: name.to_string(),
            value: msg.encode_to_vec(),
        }
    }
}

/// `xray.common.protocol.User`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct User {
    #[prost(uint32, tag = "1")]
    pub level: u32,
    #[prost(string, tag = "2")]
    pub email: String,
    #[prost(message, optional, tag = "3")]
    pub account: Option<TypedMessage>,
}

/// `xray.common.net.IPOrDomain`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IpOrDomain {
    #[prost(oneof = "Address", tags = "1, 2")]
    pub address: Option<Address>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Address {
    #[prost(bytes, tag = "1")]
    Ip(Vec<u8>),
    #[prost(string, tag = "2")]
    Domain(String),
}

/// `xray.common.net.PortRange` (inclusive).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PortRange {
    #[prost(uint32, tag = "1")]
    pub from: u32,
    #[prost(uint32, tag = "2")]
    pub to: u32,
}

/// `xray.common.net.PortList`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PortList {
    #[prost(message, repeated, tag = "1")]
    pub range: Vec<PortRange>,
}

/// `xray.common.net.Network` values.
pub mod network {
    pub const TCP: i32 = 2;
    pub const UDP: i32 = 3;
}

/// `xray.common.protocol.ServerEndpoint` (`user` was `repeated` before v25.10.15: one element
/// encodes alike, several merge).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerEndpoint {
    #[prost(message, optional, tag = "1")]
    pub address: Option<IpOrDomain>,
    #[prost(uint32, tag = "2")]
    pub port: u32,
    #[prost(message, optional, tag = "3")]
    pub user: Option<User>,
}

// ---- xray.core ----

/// `xray.core.InboundHandlerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InboundHandlerConfig {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "2")]
    pub receiver_settings: Option<TypedMessage>,
    #[prost(message, optional, tag = "3")]
    pub proxy_settings: Option<TypedMessage>,
}

/// `xray.core.OutboundHandlerConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OutboundHandlerConfig {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "2")]
    pub sender_settings: Option<TypedMessage>,
    #[prost(message, optional, tag = "3")]
    pub proxy_settings: Option<TypedMessage>,
    #[prost(int64, tag = "4")]
    pub expire: i64,
    #[prost(string, tag = "5")]
    pub comment: String,
}

// ---- xray.app.proxyman.command ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct AddUserOperation {
    #[prost(message, optional, tag = "1")]
    pub user: Option<User>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveUserOperation {
    #[prost(string, tag = "1")]
    pub email: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AddInboundRequest {
    #[prost(message, optional, tag = "1")]
    pub inbound: Option<InboundHandlerConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveInboundRequest {
    #[prost(string, tag = "1")]
    pub tag: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterInboundRequest {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "2")]
    pub operation: Option<TypedMessage>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListInboundsRequest {
    #[prost(bool, tag = "1")]
    pub is_only_tags: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListInboundsResponse {
    #[prost(message, repeated, tag = "1")]
    pub inbounds: Vec<InboundHandlerConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetInboundUserRequest {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(string, tag = "2")]
    pub email: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetInboundUserResponse {
    #[prost(message, repeated, tag = "1")]
    pub users: Vec<User>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetInboundUsersCountResponse {
    #[prost(int64, tag = "1")]
    pub count: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AddOutboundRequest {
    #[prost(message, optional, tag = "1")]
    pub outbound: Option<OutboundHandlerConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveOutboundRequest {
    #[prost(string, tag = "1")]
    pub tag: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterOutboundRequest {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "2")]
    pub operation: Option<TypedMessage>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListOutboundsResponse {
    #[prost(message, repeated, tag = "1")]
    pub outbounds: Vec<OutboundHandlerConfig>,
}

// ---- xray.app.stats.command ----

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetStatsRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(bool, tag = "2")]
    pub reset: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Stat {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int64, tag = "2")]
    pub value: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetStatsResponse {
    #[prost(message, optional, tag = "1")]
    pub stat: Option<Stat>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QueryStatsRequest {
    #[prost(string, tag = "1")]
    pub pattern: String,
    #[prost(bool, tag = "2")]
    pub reset: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QueryStatsResponse {
    #[prost(message, repeated, tag = "1")]
    pub stat: Vec<Stat>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SysStatsResponse {
    #[prost(uint32, tag = "1")]
    pub num_goroutine: u32,
    #[prost(uint32, tag = "2")]
    pub num_gc: u32,
    #[prost(uint64, tag = "3")]
    pub alloc: u64,
    #[prost(uint64, tag = "4")]
    pub total_alloc: u64,
    #[prost(uint64, tag = "5")]
    pub sys: u64,
    #[prost(uint64, tag = "6")]
    pub mallocs: u64,
    #[prost(uint64, tag = "7")]
    pub frees: u64,
    #[prost(uint64, tag = "8")]
    pub live_objects: u64,
    #[prost(uint64, tag = "9")]
    pub pause_total_ns: u64,
    #[prost(uint32, tag = "10")]
    pub uptime: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetStatsOnlineIpListResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, int64", tag = "2")]
    pub ips: HashMap<String, i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetAllOnlineUsersResponse {
    #[prost(string, repeated, tag = "1")]
    pub users: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OnlineIpEntry {
    #[prost(string, tag = "1")]
    pub ip: String,
    #[prost(int64, tag = "2")]
    pub last_seen: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrafficUserStat {
    #[prost(int64, tag = "1")]
    pub uplink: i64,
    #[prost(int64, tag = "2")]
    pub downlink: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UserStat {
    #[prost(string, tag = "1")]
    pub email: String,
    #[prost(message, repeated, tag = "2")]
    pub ips: Vec<OnlineIpEntry>,
    #[prost(message, optional, tag = "3")]
    pub traffic: Option<TrafficUserStat>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetUsersStatsRequest {
    #[prost(bool, tag = "1")]
    pub include_traffic: bool,
    #[prost(bool, tag = "2")]
    pub reset: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetUsersStatsResponse {
    #[prost(message, repeated, tag = "1")]
    pub users: Vec<UserStat>,
}
