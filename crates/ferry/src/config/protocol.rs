//! An inbound's or outbound's `protocol`, and the error naming one Ferry cannot build.

use super::reader::{self, ConfigError, Obj};
use crate::proxy;

/// Reads `protocol` (required).
pub(super) fn protocol_name(o: &Obj<'_>) -> reader::Result<String> {
    o.req_str("protocol")
}

/// The error for a protocol with no builder of this `kind`: not supported yet when Xray has
/// it, unknown otherwise.
pub(super) fn unsupported_protocol(o: &Obj<'_>, name: &str, kind: &str) -> ConfigError {
    let msg = if proxy::KNOWN_ELSEWHERE
        .iter()
        .any(|k| k.eq_ignore_ascii_case(name))
    {
        format!("{name:?} is not supported yet as an {kind}")
    } else {
        format!("unknown protocol {name:?}")
    };
    ConfigError::new(o.key_path("protocol"), msg)
}
