//! What every layer of a connection is (PROXY protocol, TLS, REALITY, WebSocket, ...): one
//! trait with the server's and the client's entry points, so a layer written once serves both
//! sides. The chains of layers are built in `chain`.

use std::io;

use async_trait::async_trait;

use super::BoxStream;
use crate::common::Destination;
use crate::session::ConnInfo;

/// One layer of a connection (PROXY protocol, TLS, WebSocket, ...).
#[async_trait]
pub trait Layer: Send + Sync + 'static {
    /// Server side: wraps an accepted stream, recording what it learns in `info`.
    async fn accept(&self, stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream>;
    /// Client side: wraps a dialed stream to `server`.
    async fn connect(&self, stream: BoxStream, server: &Destination) -> io::Result<BoxStream>;
    /// Whether the server side's accept ends when its peers decide, outside the inbound's
    /// handshake timeout: REALITY, whose strangers the target website times as it would
    /// time them itself (Xray sets no deadline of its own there either).
    fn times_itself(&self) -> bool {
        false
    }
}
