//! The sniffing loop over a live stream or a UDP session's first datagrams: reads what the
//! client sends within Xray's window (200 ms, two undecided reads, 32767 bytes), applies the
//! result to the session, and hands every byte read on, untouched.

use std::time::Instant;

use bytes::Bytes;
use tokio::io::AsyncReadExt;

use super::{Loop, Sniffed, Sniffers, Sniffing, Step, MAX_SNIFF, SNIFF_WINDOW};
use crate::app::dns::fake::FakeDns;
use crate::proxy::Session;
use crate::transport::{prefixed::Prefixed, BoxStream};

/// Applies a sniffing result to the session: the protocol (and HTTP attributes) always; the
/// domain as the new destination, or only as the route target with `routeOnly` (never for a
/// FakeDNS name or address, which always replace the destination).
pub fn apply(cfg: &Sniffing, session: &mut Session, mut found: Sniffed, in_pool: bool) {
    if cfg.overrides(&found, &session.dest, in_pool) {
        if cfg.route_only && !found.fake_domain && !in_pool {
            found.route_target = true;
        } else {
            session.dest = Sniffing::new_dest(&found, &session.dest);
        }
    }
    tracing::debug!(
        "[{}] sniffed {} {:?}{}{}",
        session.inbound_tag,
        found.protocol,
        found.domain,
        if found.fake_domain { " (fakedns)" } else { "" },
        if found.route_target {
            " (route only)"
        } else {
            ""
        }
    );
    session.sniffed = Some(Box::new(found));
}

/// Sniffs a stream's first bytes; returns the stream with those bytes put back in front.
pub async fn stream(
    cfg: &Sniffing,
    fake: Option<&FakeDns>,
    session: &mut Session,
    mut s: BoxStream,
) -> BoxStream {
    let (fake_name, in_pool) = Sniffing::fake_name(fake, &session.dest);
    if cfg.metadata_only {
        if let Some(f) = Sniffing::join(None, fake_name) {
            apply(cfg, session, f, in_pool);
        }
        return s;
    }
    let start = Instant::now();
    let mut buf = vec![0u8; MAX_SNIFF];
    let mut len = 0;
    let mut l = Loop::new(Sniffers::tcp());
    let found = loop {
        let left = SNIFF_WINDOW.saturating_sub(start.elapsed());
        let got = if left.is_zero() {
            false
        } else {
            match tokio::time::timeout(left, s.read(&mut buf[len..])).await {
                Ok(Ok(n)) => {
                    len += n;
                    n > 0
                }
                Ok(Err(e)) => {
                    tracing::debug!("[{}] sniffing: {e}", session.inbound_tag);
                    break None;
                }
                Err(_) => false,
            }
        };
        match l.step(&buf[..len], got, start.elapsed() < SNIFF_WINDOW) {
            Step::Done(r) => break r,
            Step::More => {}
        }
    };
    if let Some(f) = Sniffing::join(found, fake_name) {
        apply(cfg, session, f, in_pool);
    }
    if len == 0 {
        return s;
    }
    buf.truncate(len);
    Box::new(Prefixed::new(Bytes::from(buf), s))
}

/// Sniffs the datagrams of a UDP session as they arrive: `first` is what came so far; `next`
/// waits for the next one (`None` when the window closes or the client is done). Returns
/// every datagram read, in order, to be sent as they came.
pub async fn datagrams<T, F, Fut>(
    cfg: &Sniffing,
    fake: Option<&FakeDns>,
    session: &mut Session,
    first: T,
    payload: impl Fn(&T) -> &[u8],
    mut next: F,
) -> Vec<T>
where
    F: FnMut(std::time::Duration) -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let mut got = vec![first];
    let (fake_name, in_pool) = Sniffing::fake_name(fake, &session.dest);
    if cfg.metadata_only {
        if let Some(f) = Sniffing::join(None, fake_name) {
            apply(cfg, session, f, in_pool);
        }
        return got;
    }
    let start = Instant::now();
    let mut joined: Vec<u8> = payload(&got[0]).to_vec();
    let mut l = Loop::new(Sniffers::udp());
    let mut fresh = true;
    loop {
        let step = l.step(&joined, fresh, start.elapsed() < SNIFF_WINDOW);
        match step {
            Step::Done(r) => {
                if let Some(f) = Sniffing::join(r, fake_name) {
                    apply(cfg, session, f, in_pool);
                }
                return got;
            }
            Step::More => {}
        }
        let left = SNIFF_WINDOW.saturating_sub(start.elapsed());
        match next(left).await {
            Some(d) => {
                fresh = true;
                if joined.len() + payload(&d).len() <= MAX_SNIFF {
                    joined.extend_from_slice(payload(&d));
                }
                got.push(d);
            }
            None => fresh = false,
        }
    }
}
