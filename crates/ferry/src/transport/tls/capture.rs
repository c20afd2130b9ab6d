//! The TLS 1.3 application traffic secrets of a rustls handshake, so that Ferry's own record
//! layer ([`crate::transport::tls13`]) can take the connection over with them (and follow
//! KeyUpdates, which need the secret, not only the key rustls's secret extraction gives).
//!
//! rustls hands secrets to its config's [`KeyLog`]; every secret of a connection is derived
//! inside `process_new_packets`, which runs synchronously on the caller's thread. So the key log
//! writes into a slot of the current thread that the stream opens around that call
//! ([`capture`]), and nothing is shared between connections.

use std::cell::RefCell;

use rustls::KeyLog;

const CLIENT: &str = "CLIENT_TRAFFIC_SECRET_0";
const SERVER: &str = "SERVER_TRAFFIC_SECRET_0";

/// The first application traffic secrets of both directions.
#[derive(Default)]
pub struct Secrets {
    pub client: Option<Vec<u8>>,
    pub server: Option<Vec<u8>>,
}

impl Secrets {
    /// Both secrets are known.
    pub fn complete(&self) -> bool {
        self.client.is_some() && self.server.is_some()
    }
}

thread_local! {
    static SLOT: RefCell<Option<Secrets>> = const { RefCell::new(None) };
}

/// The key log every TLS config of Ferry carries: it keeps only the two application traffic
/// secrets, and only while a stream [`capture`]s them on this thread.
#[derive(Debug)]
pub struct TrafficSecretLog;

impl KeyLog for TrafficSecretLog {
    fn will_log(&self, label: &str) -> bool {
        label == CLIENT || label == SERVER
    }

    fn log(&self, label: &str, _client_random: &[u8], secret: &[u8]) {
        SLOT.with(|s| {
            if let Some(got) = s.borrow_mut().as_mut() {
                match label {
                    CLIENT => got.client = Some(secret.to_vec()),
                    SERVER => got.server = Some(secret.to_vec()),
                    _ => {}
                }
            }
        })
    }
}

/// Runs `f` (a rustls `process_new_packets`) and adds the secrets it logged to `into`.
pub fn capture<T>(into: &mut Secrets, f: impl FnOnce() -> T) -> T {
    SLOT.with(|s| *s.borrow_mut() = Some(Secrets::default()));
    let out = f();
    if let Some(got) = SLOT.with(|s| s.borrow_mut().take()) {
        if got.client.is_some() {
            into.client = got.client;
        }
        if got.server.is_some() {
            into.server = got.server;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_logged_inside_a_capture_is_kept() {
        let log = TrafficSecretLog;
        assert!(log.will_log(CLIENT) && log.will_log(SERVER));
        assert!(!log.will_log("CLIENT_HANDSHAKE_TRAFFIC_SECRET"));
        log.log(CLIENT, &[0; 32], b"outside");
        let mut s = Secrets::default();
        capture(&mut s, || log.log(SERVER, &[0; 32], b"server"));
        assert_eq!(s.server.as_deref(), Some(&b"server"[..]));
        assert!(s.client.is_none() && !s.complete());
        capture(&mut s, || log.log(CLIENT, &[0; 32], b"client"));
        assert!(s.complete());
        // Nothing lingers on the thread after a capture.
        log.log(CLIENT, &[0; 32], b"late");
        assert_eq!(s.client.as_deref(), Some(&b"client"[..]));
    }
}
