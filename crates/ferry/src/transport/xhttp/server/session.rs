//! The sessions of one inbound: a session's uplink as it arrives (packets reordered by their
//! sequence numbers, or the stream-up body), bounded by a per-source budget, and reaped when
//! its GET does not come.

use std::collections::{BTreeMap, HashMap};
use std::future::poll_fn;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};
use hyper::body::Incoming;
use tokio::io::ReadBuf;

use super::super::budget::Budget;
use super::super::pipe::BodyReader;
use super::REAP_AFTER;
use crate::session::Endpoint;

/// The sessions of one inbound.
#[derive(Default)]
pub(super) struct Sessions {
    pub(super) map: Mutex<HashMap<String, Arc<Session>>>,
    /// Bytes queued in sessions whose proxied connection has not answered yet: a session
    /// counts until then, GET or not (a stranger can GET too, and send every packet but the
    /// first), by the address that made it. Past the budget, a packet ends its session (500).
    pub(super) unanswered: Arc<Budget>,
}

impl Sessions {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session `id`, made if new (then reaped after [`REAP_AFTER`] unless connected).
    pub(super) fn upsert(
        self: &Arc<Self>,
        id: &str,
        max_buffered: usize,
        source: &Endpoint,
    ) -> Arc<Session> {
        let mut map = self.lock();
        if let Some(s) = map.get(id) {
            return s.clone();
        }
        let s = Arc::new(Session {
            up: Mutex::new(Upload::default()),
            connected: AtomicBool::new(false),
            max_buffered,
            source: match source {
                Endpoint::Ip(a) => Some(a.ip().to_canonical()),
                Endpoint::Unix(_) => None,
            },
            unanswered: self.unanswered.clone(),
        });
        map.insert(id.to_string(), s.clone());
        let open = map.len();
        drop(map);
        tracing::debug!("XHTTP: session {id} opened ({open} open)");
        let (me, id, weak) = (Arc::downgrade(self), id.to_string(), Arc::downgrade(&s));
        tokio::spawn(async move {
            tokio::time::sleep(REAP_AFTER).await;
            let (Some(me), Some(s)) = (me.upgrade(), weak.upgrade()) else {
                return;
            };
            if !s.connected.load(Ordering::Acquire) {
                tracing::info!("XHTTP: session {id} reaped (no GET within {REAP_AFTER:?})");
                me.remove(&id, &s);
            }
        });
        s
    }

    /// Drops `s` from the table (if it is still the session of `id`) and closes it.
    pub(super) fn remove(&self, id: &str, s: &Arc<Session>) {
        let mut map = self.lock();
        if map.get(id).is_some_and(|cur| Arc::ptr_eq(cur, s)) {
            map.remove(id);
        }
        let open = map.len();
        drop(map);
        s.close();
        tracing::debug!("XHTTP: session {id} closed ({open} open)");
    }

    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A session's uplink as it arrives.
#[derive(Default)]
pub(super) struct Upload {
    /// Packets by sequence number, waiting for their turn.
    pub(super) heap: BTreeMap<u64, Bytes>,
    pub(super) next: u64,
    /// The stream-up body, once its POST came.
    pub(super) stream: Option<BodyReader>,
    /// A stream-up POST came (a second is refused).
    pub(super) streamed: bool,
    pub(super) closed: bool,
    /// The proxied connection's read, waiting for bytes.
    pub(super) reader: Option<Waker>,
    /// Packet POSTs waiting for room.
    pub(super) others: Vec<Waker>,
    /// The stream-up response, waiting for the end.
    pub(super) end: Option<Waker>,
    /// Bytes of `heap` counted in the inbound's budget (queued before the answer).
    pub(super) counted: usize,
    /// The proxied connection wrote: bytes queued from now on are not counted.
    pub(super) answered: bool,
}

pub(super) struct Session {
    pub(super) up: Mutex<Upload>,
    /// The GET came: no reaping.
    pub(super) connected: AtomicBool,
    pub(super) max_buffered: usize,
    /// The address that made the session, whose budget its packets count against.
    pub(super) source: Option<IpAddr>,
    /// The inbound's budget ([`Sessions::unanswered`]).
    pub(super) unanswered: Arc<Budget>,
}

impl Session {
    pub(super) fn lock(&self) -> MutexGuard<'_, Upload> {
        self.up.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn close(&self) {
        let mut u = self.lock();
        self.release(&mut u);
        u.closed = true;
        u.heap.clear();
        u.stream = None;
        wake(&mut u);
    }

    /// Takes this session's queued bytes out of the inbound's budget.
    pub(super) fn release(&self, u: &mut Upload) {
        self.unanswered.give(self.source, u.counted);
        u.counted = 0;
    }

    /// The GET came: marks the session connected (false if it was already).
    pub(super) fn claim(&self) -> bool {
        !self.connected.swap(true, Ordering::AcqRel)
    }

    /// The proxied connection answered (the client authenticated): its packets count no more.
    pub(super) fn answered(&self) {
        let mut u = self.lock();
        u.answered = true;
        self.release(&mut u);
    }

    /// Queues packet `seq`, waiting while the reader is behind. An error ends the session.
    pub(super) async fn push(&self, seq: u64, data: Bytes) -> Result<(), &'static str> {
        let mut data = Some(data);
        poll_fn(|cx| {
            let mut u = self.lock();
            if u.closed {
                return Poll::Ready(Err("the session is closed"));
            }
            if seq < u.next || u.heap.contains_key(&seq) {
                // A duplicate: Xray drops it.
                return Poll::Ready(Ok(()));
            }
            if u.heap.len() >= self.max_buffered {
                if !u.heap.contains_key(&u.next) {
                    // Packets wait for one that does not come: the reorder buffer is full.
                    return Poll::Ready(Err("too many packets out of order"));
                }
                u.others.push(cx.waker().clone());
                return Poll::Pending;
            }
            let d = data.take().unwrap_or_default();
            if !u.answered {
                if let Err(e) = self.unanswered.take(self.source, d.len()) {
                    return Poll::Ready(Err(e));
                }
                u.counted += d.len();
            }
            u.heap.insert(seq, d);
            if let Some(w) = u.reader.take() {
                w.wake();
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Hands the stream-up body to the reader; `false` if one came already.
    pub(super) fn set_stream(&self, body: Incoming) -> bool {
        let mut u = self.lock();
        if u.streamed || u.closed {
            return false;
        }
        u.streamed = true;
        u.stream = Some(BodyReader::new(body));
        if let Some(w) = u.reader.take() {
            w.wake();
        }
        true
    }

    /// The uplink as the proxied connection reads it.
    pub(super) fn poll_read(
        &self,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut u = self.lock();
        if let Some(body) = u.stream.as_mut() {
            return match std::task::ready!(body.poll_read(cx, out)) {
                Ok(true) => Poll::Ready(Ok(())),
                Ok(false) => {
                    u.stream = None;
                    u.closed = true;
                    Poll::Ready(Ok(()))
                }
                Err(e) => {
                    u.stream = None;
                    Poll::Ready(Err(io::Error::other(format!("XHTTP stream-up: {e}"))))
                }
            };
        }
        let next = u.next;
        let u = &mut *u;
        if let Some(mut entry) = u.heap.first_entry() {
            if *entry.key() == next {
                let d = entry.get_mut();
                let n = d.len().min(out.remaining());
                out.put_slice(&d[..n]);
                d.advance(n);
                // Bytes read are no longer held.
                let freed = n.min(u.counted);
                u.counted -= freed;
                self.unanswered.give(self.source, freed);
                if d.is_empty() {
                    entry.remove();
                    u.next += 1;
                    wake_others(u);
                }
                return Poll::Ready(Ok(()));
            }
        }
        if u.closed {
            return Poll::Ready(Ok(()));
        }
        u.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

pub(super) fn wake_others(u: &mut Upload) {
    for w in u.others.drain(..) {
        w.wake();
    }
}

pub(super) fn wake(u: &mut Upload) {
    if let Some(w) = u.reader.take() {
        w.wake();
    }
    if let Some(w) = u.end.take() {
        w.wake();
    }
    wake_others(u);
}
