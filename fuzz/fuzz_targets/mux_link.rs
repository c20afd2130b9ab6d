//! Mux.Cool's link state on hostile frames, as the server and the client read them: the frame
//! reader over reads of any size, the session table (New, Keep, End, KeepAlive, ids reused,
//! frames for sessions that never were or already ended), stream and packet sessions that
//! echo, read to the end or are dropped at once, and the writer. Any bytes end the connection
//! (never a panic or a hang), and everything written back is whole, well-formed frames.
#![no_main]
mod feed;

use std::sync::Arc;

use bytes::Bytes;
use ferry::common::{Address, Destination, Network};
use ferry::proxy::mux::frame::{self, Meta};
use ferry::proxy::mux::link::{write_frames, FrameReader, Link};
use ferry::proxy::mux::packets::{CLIENT_MAX_DATAGRAM, SERVER_MAX_DATAGRAM};
use ferry::proxy::mux::client;
use ferry::transport::{BoxStream, PacketConn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Everything written is a run of whole frames.
fn whole_frames(w: &[u8]) {
    if w.len() >= 1 << 20 {
        return; // the feed stopped keeping it
    }
    let mut at = 0;
    while at < w.len() {
        let f = frame::decode(&w[at..]).expect("a frame we wrote decodes").expect("whole");
        at += f.len;
    }
}

async fn echo(mut s: BoxStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = s.shutdown().await;
}

/// A New frame on the server: the session as `app/mux.rs` starts it, then what the input's
/// bits say it does (its dispatch, in the real server).
async fn open(link: &Arc<Link>, meta: Meta, data: Bytes, how: u8) {
    let Some((network, dest)) = meta.target.clone() else {
        return;
    };
    match network {
        Network::Tcp => {
            let Some(s) = link.add_stream(meta.id) else {
                return;
            };
            if meta.has_data() && !data.is_empty() {
                link.deliver(&Meta::keep(meta.id, None), data).await;
            }
            match how & 3 {
                0 => drop(s),
                1 => {
                    tokio::spawn(echo(Box::new(s)));
                }
                _ => {
                    tokio::spawn(async move {
                        let mut s: BoxStream = Box::new(s);
                        let mut sink = tokio::io::sink();
                        let _ = tokio::io::copy(&mut s, &mut sink).await;
                    });
                }
            }
        }
        Network::Udp => {
            let Some(p) = link.add_packets(meta.id, dest.clone(), SERVER_MAX_DATAGRAM) else {
                return;
            };
            if meta.has_data() {
                link.deliver(&Meta::keep(meta.id, Some(dest)), data).await;
            }
            if how & 1 == 0 {
                return;
            }
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok((n, from)) = p.recv_from(&mut buf).await {
                    if p.send_to(&buf[..n], &from).await.is_err() {
                        break;
                    }
                }
            });
        }
    }
}

async fn server(input: &[u8], step: usize, ctl: u8) {
    let (link, rx) = Link::new(None);
    let (feed, written) = feed::Feed::new(input, step);
    let (r, w) = tokio::io::split(feed);
    let write = async {
        let _ = write_frames(w, rx, link.stopped()).await;
        link.shutdown();
    };
    let read = async {
        let mut reader = FrameReader::new(r, &[]);
        let mut n = 0u32;
        while let Ok(Some((meta, data))) = reader.next().await {
            if let Some((meta, data)) = link.handle(meta, data).await {
                open(&link, meta, data, ctl.rotate_left(n)).await;
                n += 1;
            }
        }
        link.shutdown();
    };
    tokio::join!(write, read);
    assert!(link.is_closed() && link.active() == 0);
    whole_frames(&written.lock().unwrap());
}

async fn client_side(input: &[u8], step: usize, ctl: u8) {
    let (stream, written) = feed::Feed::boxed(input, step);
    let dest = Destination::new(Address::Domain("example.com".into()), 443);
    let limit = input.len() + 4;
    if ctl & 1 != 0 {
        // XUDP: packet session 0.
        let Ok(p) = client::xudp(stream, &dest) else {
            return;
        };
        let _ = p.send_to(b"x", &dest).await;
        let mut buf = vec![0u8; 65536];
        for _ in 0..limit {
            if p.recv_from(&mut buf).await.is_err() {
                break;
            }
        }
    } else {
        let link = client::start(stream, Some(2));
        let s = link.open_stream(&dest, 0);
        let p = link.open_packets(&dest, 0, CLIENT_MAX_DATAGRAM);
        if let Some(p) = p {
            let _ = p.send_to(b"x", &dest).await;
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while p.recv_from(&mut buf).await.is_ok() {}
            });
        }
        if let Some(mut s) = s {
            let _ = s.write_all(b"hello").await;
            let mut buf = [0u8; 4096];
            let mut total = 0;
            for _ in 0..limit {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n,
                }
            }
            assert!(total <= input.len());
        }
        while !link.is_closed() {
            tokio::task::yield_now().await;
        }
    }
    whole_frames(&written.lock().unwrap());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (ctl, step, rest) = feed::split(data);
    let rt = feed::runtime();
    rt.block_on(server(rest, step, ctl));
    rt.block_on(client_side(rest, step, ctl));
});
