//! Blackhole in Xray's gRPC API: its config read into the JSON its builder takes.

use serde_json::{json, Value};

use crate::pb;
use crate::proxy::api::{parse, Error};
use crate::proxy::protocol::Api;

/// Blackhole's API codecs.
pub const API: Api = Api {
    outbound_configs: &["xray.proxy.blackhole.Config"],
    outbound_settings: Some(outbound_settings),
    ..Api::NONE
};

fn outbound_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    let c: pb::BlackholeConfig = parse(&m.value)?;
    let http = c
        .response
        .is_some_and(|r| r.r#type == "xray.proxy.blackhole.HTTPResponse");
    let ty = if http { "http" } else { "none" };
    Ok(json!({"response": {"type": ty}}))
}
