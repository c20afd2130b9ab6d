//! What the API's services share: the running instance, the services enabled, what the
//! handler service remembers, and the request decoding and error shapes every service uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tonic::Status;

use super::pb;
use super::Service;
use crate::app::instance::Core;

/// The API's state: the running instance, the services `api.services` enabled, and what the
/// handler service remembers (configs as added, accounts by inbound).
pub struct Api {
    pub core: Arc<Core>,
    pub(super) services: Vec<Service>,
    /// The API's own outbound tag (hidden from ListOutbounds).
    pub tag: String,
    pub handler: HandlerState,
}

impl Api {
    pub fn new(core: Arc<Core>, services: Vec<Service>, tag: String) -> Api {
        Api {
            core,
            services,
            tag,
            handler: Default::default(),
        }
    }
}

/// What the service remembers besides the running instance: the configs added through it
/// (ListInbounds/ListOutbounds answer with them) and each inbound's accounts by email (the
/// inbounds keep only what authenticates a user; GetInboundUsers answers with accounts).
#[derive(Default)]
pub struct HandlerState {
    pub(super) inner: tokio::sync::Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) inbounds: HashMap<String, pb::InboundHandlerConfig>,
    pub(super) outbounds: HashMap<String, pb::OutboundHandlerConfig>,
    /// By inbound tag, then lower-cased email.
    pub(super) accounts: HashMap<String, BTreeMap<String, pb::User>>,
}

/// Decodes a request message; undecodable bytes get grpc-go's answer.
pub fn decode<M: prost::Message + Default>(b: &[u8]) -> Result<M, Status> {
    M::decode(b).map_err(|_| {
        Status::internal(
            "grpc: error unmarshalling request: proto: cannot parse invalid wire-format data",
        )
    })
}

/// An Xray-style handler error: code UNKNOWN, the text as Xray builds it.
pub fn unknown(text: impl Into<String>) -> Status {
    Status::unknown(text)
}
