//! Freedom in Xray's gRPC API: its config read into the JSON its builder takes.

use serde_json::{json, Value};

use crate::pb;
use crate::proxy::api::{endpoint, parse, Error};
use crate::proxy::protocol::Api;

/// Freedom's API codecs.
pub const API: Api = Api {
    outbound_configs: &["xray.proxy.freedom.Config"],
    outbound_settings: Some(outbound_settings),
    ..Api::NONE
};

/// `DomainStrategy` values in order.
const STRATEGIES: [&str; 11] = [
    "AsIs",
    "UseIP",
    "UseIPv4",
    "UseIPv6",
    "UseIPv46",
    "UseIPv64",
    "ForceIP",
    "ForceIPv4",
    "ForceIPv6",
    "ForceIPv46",
    "ForceIPv64",
];

fn outbound_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    let c: pb::FreedomConfig = parse(&m.value)?;
    let ds = STRATEGIES
        .get(c.domain_strategy as usize)
        .copied()
        .unwrap_or("AsIs");
    let mut s = json!({ "domainStrategy": ds });
    if let Some(d) = &c.destination_override {
        let (a, p, _) = endpoint(&d.server)?;
        s["redirect"] = json!(format!("{a}:{p}"));
    }
    if c.user_level != 0 {
        s["userLevel"] = json!(c.user_level);
    }
    Ok(s)
}
