//! WebSocket streams over a pipe: messages, fragments, pings, close and the heartbeat.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn pair() -> (WsStream, WsStream) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    (
        WsStream::new(Box::new(a), true, Vec::new(), Bytes::new()),
        WsStream::new(Box::new(b), false, Vec::new(), Bytes::new()),
    )
}

#[tokio::test]
async fn bytes_cross_both_ways_in_frames_of_any_size() {
    let (mut c, mut s) = pair();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| ((i * 31) >> 3) as u8).collect();
    let d2 = data.clone();
    let w = tokio::spawn(async move {
        for chunk in d2.chunks(70_001) {
            c.write_all(chunk).await.unwrap();
        }
        c.write_all(&d2[..10]).await.unwrap();
        c.flush().await.unwrap();
        let mut back = vec![0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        back
    });
    let mut got = vec![0u8; data.len() + 10];
    s.read_exact(&mut got).await.unwrap();
    assert!(got[..data.len()] == data[..]);
    assert_eq!(&got[data.len()..], &data[..10]);
    s.write_all(b"hello").await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(w.await.unwrap(), b"hello");
}

/// Frames written by hand: fragmented text and binary, a ping in the middle of a
/// fragmented message, an empty frame, then a close.
#[tokio::test]
async fn fragments_pings_and_close() {
    let (mut raw, b) = tokio::io::duplex(64 * 1024);
    let mut s = WsStream::new(Box::new(b), false, Vec::new(), Bytes::from_static(b"ED"));
    let key = [7, 1, 9, 3];
    let frame = |fin: bool, op: u8, payload: &[u8]| {
        let mut h = [0u8; frame::MAX_HEADER];
        let n = frame::encode(op, payload.len(), Some(key), &mut h);
        if !fin {
            h[0] &= 0x7f;
        }
        let mut v = h[..n].to_vec();
        let mut p = payload.to_vec();
        frame::apply_mask(&mut p, key, 0);
        v.extend(p);
        v
    };
    let mut wire = Vec::new();
    wire.extend(frame(false, frame::TEXT, b"ab"));
    wire.extend(frame(true, frame::PING, b"hi"));
    wire.extend(frame(true, frame::CONTINUATION, b"cd"));
    wire.extend(frame(true, frame::BINARY, b""));
    wire.extend(frame(true, frame::BINARY, b"ef"));
    wire.extend(frame(true, frame::CLOSE, &[0x03, 0xe8, b'x']));
    raw.write_all(&wire).await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"EDabcdef");
    // The server answered the ping with a pong carrying its payload, and the close with
    // a close carrying the status code, both unmasked.
    let mut back = [0u8; 8];
    raw.read_exact(&mut back).await.unwrap();
    assert_eq!(back, [0x8a, 2, b'h', b'i', 0x88, 2, 0x03, 0xe8]);
}

#[tokio::test]
async fn bad_frames_are_errors() {
    for (wire, from_client) in [
        (vec![0x82u8, 0x02, 1, 2], true), // unmasked from a client
        (vec![0x82u8, 0x82, 0, 0, 0, 0, 1, 2], false), // masked from a server
        (vec![0x80u8, 0x80, 0, 0, 0, 0], true), // lone continuation
        (vec![0xf2u8, 0x80, 0, 0, 0, 0], true), // reserved bits
    ] {
        let (mut raw, b) = tokio::io::duplex(1024);
        let mut s = WsStream::new(Box::new(b), !from_client, Vec::new(), Bytes::new());
        raw.write_all(&wire).await.unwrap();
        let mut buf = [0u8; 16];
        let e = s.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{wire:?}");
    }
    // Cut inside a frame: an unexpected EOF, not a clean end.
    let (mut raw, b) = tokio::io::duplex(1024);
    let mut s = WsStream::new(Box::new(b), true, Vec::new(), Bytes::new());
    raw.write_all(&[0x82, 0x05, 1, 2]).await.unwrap();
    drop(raw);
    let mut buf = Vec::new();
    let e = s.read_to_end(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

/// A client that pings without end and reads nothing: the pongs waiting for it are
/// capped, then the connection is an error (and the server's buffer stayed small).
#[tokio::test]
async fn a_peer_that_pings_and_never_reads_is_closed() {
    let (mut raw, b) = tokio::io::duplex(4096);
    let mut s = WsStream::new(Box::new(b), false, Vec::new(), Bytes::new());
    let key = [1, 2, 3, 4];
    let mut ping = [0u8; frame::MAX_HEADER];
    let n = frame::encode(frame::PING, 125, Some(key), &mut ping);
    let mut one = ping[..n].to_vec();
    one.extend_from_slice(&[0u8; 125]);
    let pinger = tokio::spawn(async move {
        for _ in 0..100_000 {
            if raw.write_all(&one).await.is_err() {
                return true;
            }
        }
        false
    });
    let mut buf = [0u8; 1024];
    let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("the server never gave up");
    assert!(r.is_err(), "{r:?}");
    assert!(s.wbuf.len() < 2 * MAX_CONTROL_BACKLOG, "{}", s.wbuf.len());
    drop(s);
    assert!(pinger.await.unwrap(), "the pinger sent everything");
}

/// A peer that sends a large frame's header and part of its payload, then stalls: the stream
/// waiting for the rest holds no read buffer (the payload goes straight to the caller).
#[tokio::test]
async fn a_stalled_large_frame_holds_no_read_buffer() {
    let (mut raw, b) = tokio::io::duplex(256 * 1024);
    let mut s = WsStream::new(Box::new(b), false, Vec::new(), Bytes::new());
    let key = [1, 2, 3, 4];
    let mut h = [0u8; frame::MAX_HEADER];
    let n = frame::encode(frame::BINARY, 100_000, Some(key), &mut h);
    let mut part = vec![0u8; 30_000];
    frame::apply_mask(&mut part, key, 0);
    raw.write_all(&h[..n]).await.unwrap();
    raw.write_all(&part).await.unwrap();
    let mut got = vec![0u8; 100_000];
    let mut read = 0;
    while read < 30_000 {
        read += s.read(&mut got[read..]).await.unwrap();
    }
    assert_eq!(read, 30_000);
    let more = tokio::time::timeout(std::time::Duration::from_millis(50), s.read(&mut got)).await;
    assert!(more.is_err(), "the rest of the frame has not come");
    assert!(
        !s.rx.holds_buffer(),
        "a stream waiting inside a frame holds no buffer"
    );
}
