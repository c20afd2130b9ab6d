//! LoggerService (`xray.app.log.command`): RestartLogger reopens the access log file (what
//! logrotate's postrotate hook asks for).

use bytes::Bytes;
use tonic::Status;

use super::state::{unknown, Api};

/// Runs `method`; `None` when the service has no such method.
pub fn call(api: &Api, method: &str, _req: Bytes) -> Option<Result<Vec<u8>, Status>> {
    match method {
        "RestartLogger" => Some(
            api.core
                .dispatcher
                .access
                .reopen(&api.core.log)
                .map(|()| Vec::new())
                .map_err(|e| unknown(format!("app/log/command: failed to start logger > {e}"))),
        ),
        _ => None,
    }
}
