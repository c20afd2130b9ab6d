//! The one ticket a client holds for 0-RTT: its lifetime, the key it resumes and its bytes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Held {
    expire: Instant,
    pfs: [u8; 64],
    ticket: [u8; 16],
}

/// A client's ticket slot, shared by its connections.
#[derive(Default)]
pub struct TicketSlot(Mutex<Option<Held>>);

impl TicketSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live ticket, if any: the key it resumes and its bytes.
    pub fn live(&self) -> Option<([u8; 64], [u8; 16])> {
        self.lock()
            .as_ref()
            .filter(|t| Instant::now() < t.expire)
            .map(|t| (t.pfs, t.ticket))
    }

    /// A ticket from a 1-RTT handshake, good for `seconds`.
    pub fn set(&self, pfs: [u8; 64], ticket: [u8; 16], seconds: u64) {
        *self.lock() = Some(Held {
            expire: Instant::now() + Duration::from_secs(seconds),
            pfs,
            ticket,
        });
    }

    /// The server refused the ticket that resumed `pfs`: the next dial does 1-RTT (a newer
    /// ticket taken meanwhile stays).
    pub fn refused(&self, pfs: &[u8; 64]) {
        let mut t = self.lock();
        if t.as_ref().is_some_and(|t| &t.pfs == pfs) {
            *t = None;
        }
    }
}
