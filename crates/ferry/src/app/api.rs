//! The outbound `api.tag` names. Xray serves its gRPC API to connections routed to that tag;
//! Ferry has no API yet, so the tag exists (panels route their API inbound to it) and every
//! connection routed to it is refused with a clear error.

use std::io;

use async_trait::async_trait;

use crate::common::Destination;
use crate::transport::{BoxStream, Dialer, PacketConn};

/// Refuses what is routed to the API's tag.
pub struct ApiOutbound;

fn not_served() -> io::Error {
    io::Error::other("the gRPC API (api.tag) is not supported yet")
}

#[async_trait]
impl Dialer for ApiOutbound {
    async fn dial_tcp(&self, _dest: &Destination) -> io::Result<BoxStream> {
        Err(not_served())
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        Err(not_served())
    }
}
