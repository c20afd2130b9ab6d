//! The packet-up uplink: POSTs of what the tunnel wrote, numbered, spaced and a few in flight
//! (HTTP/2), or one after the other on the tunnel's own upload connection (HTTP/1.1).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http::{HeaderValue, Request, StatusCode};
use hyper::body::Body;
use hyper_util::rt::TokioIo;

use super::super::obfs::DataPlacement;
use super::super::pipe::PipeBody;
use super::leg::Entry;
use super::{build, hyper_err, uplink_method, ClientBody, LegClient, Version, POSTS_IN_FLIGHT};
use crate::common::Destination;

/// The packet-up uplink: what the tunnel wrote, in POSTs of `max` bytes at most, spaced by
/// `scMinPostsIntervalMs`, a few in flight at once (HTTP/2) or one after the other on an
/// upload connection of the tunnel's own (HTTP/1.1).
pub(super) async fn upload_packets(
    client: Arc<LegClient>,
    server: Destination,
    session: String,
    mut entry: Option<Arc<Entry>>,
    max: usize,
    mut body: PipeBody,
) {
    let interval = client.settings.min_posts_interval_ms;
    let flights = Arc::new(tokio::sync::Semaphore::new(POSTS_IN_FLIGHT));
    let mut carry = BytesMut::new();
    let mut seq = 0u64;
    let mut last: Option<Instant> = None;
    let mut ended = false;
    let mut h1: Option<hyper::client::conn::http1::SendRequest<ClientBody>> = None;
    loop {
        if carry.is_empty() {
            if ended {
                return;
            }
            match poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        carry = BytesMut::from(&d[..]);
                    }
                }
                _ => return,
            }
        }
        if let Some(t) = last {
            let wait = Duration::from_millis(interval.rand().into());
            tokio::time::sleep_until((t + wait).into()).await;
        }
        // What came while waiting goes in the same POST.
        while carry.len() < max && !ended {
            match poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await {
                Poll::Ready(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        carry.extend_from_slice(&d);
                    }
                }
                Poll::Ready(_) => ended = true,
                Poll::Pending => break,
            }
        }
        let chunk = carry.split_to(carry.len().min(max)).freeze();
        last = Some(Instant::now());
        let this_seq = seq;
        seq += 1;
        let in_head = matches!(
            client.settings.data_placement,
            DataPlacement::Header | DataPlacement::Cookie
        );
        let make = || {
            let head = client.request(
                &server,
                uplink_method(&client.settings),
                &session,
                Some(this_seq),
                false,
                in_head.then_some(&chunk[..]),
            )?;
            if in_head {
                // The data went into the head: an empty body.
                let head = head.header(http::header::CONTENT_LENGTH, HeaderValue::from(0));
                return build(head, ClientBody::Full(None));
            }
            let head = head.header(http::header::CONTENT_LENGTH, HeaderValue::from(chunk.len()));
            build(head, ClientBody::Full(Some(chunk.clone())))
        };
        let result = match client.version {
            Version::H2 => {
                if entry.as_ref().is_none_or(|e| !e.usable()) {
                    entry = Some(client.entry());
                }
                let Ok(permit) = flights.clone().acquire_owned().await else {
                    return;
                };
                let req = match make() {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::info!("{e}");
                        return;
                    }
                };
                client
                    .send(entry.as_deref(), &server, req)
                    .await
                    .map(|(f, _)| {
                        tokio::spawn(async move {
                            let _permit = permit;
                            match f.await {
                                Ok(r) if r.status() == StatusCode::OK => {}
                                Ok(r) => {
                                    tracing::info!(
                                        "XHTTP: a packet POST was answered {}",
                                        r.status()
                                    )
                                }
                                Err(e) => tracing::info!("XHTTP: packet POST: {e}"),
                            }
                        });
                    })
            }
            Version::H1 => post_h1(&client, &mut h1, &server, &make).await,
        };
        if let Err(e) = result {
            tracing::info!("XHTTP: failed to send an upload packet: {e}");
            return;
        }
    }
}

/// One packet POST over HTTP/1.1, on the tunnel's upload connection (kept alive, redialed
/// when it closed), its response awaited before the next. A kept connection the server
/// closed as the POST went out (an idle keep-alive ends after a few seconds) gets the POST
/// again on a fresh one: the server drops a sequence number it already has, so sending
/// twice is safe, and losing it would lose the tunnel.
async fn post_h1(
    client: &LegClient,
    conn: &mut Option<hyper::client::conn::http1::SendRequest<ClientBody>>,
    server: &Destination,
    make: &(dyn Fn() -> io::Result<Request<ClientBody>> + Sync),
) -> io::Result<()> {
    let mut fresh = false;
    loop {
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            let s = client.below.dial_tcp(server).await?;
            let (send, c) = hyper::client::conn::http1::Builder::new()
                .handshake::<_, ClientBody>(TokioIo::new(s))
                .await
                .map_err(hyper_err)?;
            tokio::spawn(async move {
                if let Err(e) = c.await {
                    tracing::debug!("XHTTP: HTTP/1.1 upload connection ended: {e}");
                }
            });
            *conn = Some(send);
            fresh = true;
        }
        let Some(send) = conn.as_mut() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let req = make()?;
        let sent = async {
            poll_fn(|cx| send.poll_ready(cx)).await?;
            send.send_request(req).await
        };
        let r = match sent.await {
            Ok(r) => r,
            Err(e) if !fresh => {
                tracing::debug!(
                    "XHTTP: the kept upload connection failed ({e}); again on a new one"
                );
                *conn = None;
                continue;
            }
            Err(e) => return Err(hyper_err(e)),
        };
        let status = r.status();
        let mut b = r.into_body();
        while let Some(f) = poll_fn(|cx| Pin::new(&mut b).poll_frame(cx)).await {
            f.map_err(hyper_err)?;
        }
        if status != StatusCode::OK {
            return Err(io::Error::other(format!("the server answered {status}")));
        }
        return Ok(());
    }
}
