//! The server's accept path (transports2.md §1.3): dial the target, mirror the client's
//! ClientHello to it, authenticate; a stranger is spliced to the target and sees the real site
//! byte for byte; our client gets a TLS 1.3 handshake built on the target's own ServerHello,
//! each encrypted record padded to the length of the target's, with the HMAC-signed temporary
//! certificate.
//!
//! The decisions are pure functions ([`authenticate`], [`TargetFlight::parse`], [`respond`])
//! that tests drive with bytes; [`Server::accept`] only moves bytes between sockets.
//!
//! - `auth`: who a ClientHello is from, `replay`: the randoms already seen,
//! - `flight`: the target's first flight, `answer`: our handshake on top of it,
//! - `accept`: the accept path step by step, `fallback`: the splice to the target,
//! - `post`: the target's post-handshake records.

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::cert::Temporary;
use super::ServerSettings;

mod accept;
mod answer;
mod auth;
mod fallback;
mod flight;
mod post;
mod replay;
#[cfg(test)]
mod tests;

pub use answer::{respond, Answer};
pub use auth::{authenticate, Authenticated, Probe, Stranger};
pub use flight::{FlightError, TargetFlight};
pub use post::{alpn_class, measure_post_handshake};

/// Largest ClientHello the server waits for (Chrome's with ML-KEM is ~1.9 KB).
const MAX_HELLO: usize = 16 * 1024;
/// Largest first flight read from the target (Xray reads it into an 8 KiB buffer).
const MAX_FLIGHT: usize = 8192;
/// A target quiet this long after sending whole records has sent its first flight.
const FLIGHT_QUIET: Duration = Duration::from_secs(1);
/// The longest an accept may take. There is no handshake timeout: as with Xray, the target
/// ends a stranger's connection when it would end it (a silent or cut ClientHello, a
/// handshake left unfinished), and the prober sees the target's timing; this only bounds a
/// target that never ends anything.
pub const ACCEPT_CAP: Duration = Duration::from_secs(300);

/// The server side of a REALITY inbound.
pub struct Server {
    pub settings: ServerSettings,
    cert: Temporary,
    seen: std::sync::Mutex<replay::Seen>,
    /// The lengths of the records the target sends after its handshake, per server name and
    /// ALPN class (§1.3 step 7): measured once, in the background, from the first connection.
    post: std::sync::Mutex<std::collections::HashMap<(String, u8), post::Post>>,
    /// What carries a stranger to the target for good (see [`StrangerRelay`]).
    strangers: std::sync::OnceLock<StrangerRelay>,
}

pub use fallback::StrangerRelay;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

fn closed(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, format!("REALITY: {msg}"))
}

impl Server {
    /// Carries strangers to the target with `relay` from now on (the first call wins).
    pub fn relay_strangers_with(&self, relay: StrangerRelay) {
        let _ = self.strangers.set(relay);
    }

    pub fn new(settings: ServerSettings) -> Result<Server, String> {
        let cert = match &settings.mldsa65_seed {
            None => Temporary::generate(),
            Some(seed) => Temporary::generate()
                .with_mldsa65(seed)
                .ok_or("mldsa65Seed is not a valid ML-DSA-65 seed")?,
        };
        Ok(Server {
            settings,
            cert,
            seen: Default::default(),
            post: Default::default(),
            strangers: Default::default(),
        })
    }
}
