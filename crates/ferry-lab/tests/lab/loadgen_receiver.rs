//! loadgen and receiver agree on byte counts, directly and through SOCKS5, in both directions;
//! a relay that loses or adds bytes is caught.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::time::Duration;

use ferry_lab::loadgen::{self, BulkOpts, Target};
use ferry_lab::receiver;
use ferry_lab::wire::Mode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const AMOUNT: u64 = 20 << 20;

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn opts(amount: u64, concurrency: usize, reverse: bool) -> BulkOpts {
    BulkOpts {
        amount,
        concurrency,
        reverse,
        stall: Duration::from_secs(2),
    }
}

/// Waits for the receiver's reports of `n` connections of `mode`; returns their byte counts.
async fn receiver_counts(r: &receiver::Reports, mode: Mode, n: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen.extend(r.take());
        if seen.iter().filter(|x| x.mode == Some(mode)).count() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for x in &seen {
        assert!(x.error.is_none(), "receiver error: {x:?}");
    }
    seen.iter()
        .filter(|x| x.mode == Some(mode))
        .map(|x| x.bytes)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_upload_and_download_agree() {
    let (port, reports, _h) = receiver::start(0).await.unwrap();
    let t = Target {
        connect: local(port),
        socks_dest: None,
        inner_tls: None,
    };
    let up = loadgen::bulk(&t, &opts(AMOUNT, 3, false)).await.unwrap();
    assert_eq!(up.bytes, 3 * AMOUNT);
    assert_eq!(up.per_conn_secs.len(), 3);
    assert!(up.secs > 0.0);
    assert_eq!(
        receiver_counts(&reports, Mode::Upload, 3).await,
        vec![AMOUNT; 3]
    );
    let down = loadgen::bulk(&t, &opts(AMOUNT, 2, true)).await.unwrap();
    assert_eq!(down.bytes, 2 * AMOUNT);
    assert_eq!(
        receiver_counts(&reports, Mode::Download, 2).await,
        vec![AMOUNT; 2]
    );
    // Odd sizes that do not fill the last chunk.
    let odd = loadgen::bulk(&t, &opts(131_073, 1, false)).await.unwrap();
    assert_eq!(odd.bytes, 131_073);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_modes_report_every_sample() {
    let (port, _reports, _h) = receiver::start(0).await.unwrap();
    let t = Target {
        connect: local(port),
        socks_dest: None,
        inner_tls: None,
    };
    let f = loadgen::ttfb(&t, 20, Duration::from_secs(5)).await.unwrap();
    assert_eq!(f.samples, 20);
    assert!(f.p50_ms > 0.0 && f.p50_ms <= f.p90_ms && f.p90_ms <= f.p99_ms);
    let r = loadgen::round_trips(&t, 64, 100, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.samples, 100);
    let held = loadgen::hold_idle(&t, 150, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(held.len(), 150);
}

/// A minimal SOCKS5 server (no auth, CONNECT only) that relays with tokio's copy.
async fn socks5_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut m = [0u8; 3];
                c.read_exact(&mut m).await?;
                c.write_all(&[5, 0]).await?;
                let mut h = [0u8; 4];
                c.read_exact(&mut h).await?;
                assert_eq!(&h[..3], &[5, 1, 0]);
                assert_eq!(h[3], 1, "test server takes IPv4 only");
                let mut a = [0u8; 6];
                c.read_exact(&mut a).await?;
                let dest =
                    SocketAddr::from(([a[0], a[1], a[2], a[3]], u16::from_be_bytes([a[4], a[5]])));
                let mut up = TcpStream::connect(dest).await?;
                c.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0]).await?;
                tokio::io::copy_bidirectional(&mut c, &mut up).await?;
                Ok::<_, std::io::Error>(())
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks5_upload_and_download_agree() {
    let (port, reports, _h) = receiver::start(0).await.unwrap();
    let socks = socks5_server().await;
    let t = Target {
        connect: local(socks),
        socks_dest: Some(local(port)),
        inner_tls: None,
    };
    let up = loadgen::bulk(&t, &opts(AMOUNT, 2, false)).await.unwrap();
    assert_eq!(up.bytes, 2 * AMOUNT);
    assert_eq!(
        receiver_counts(&reports, Mode::Upload, 2).await,
        vec![AMOUNT; 2]
    );
    let down = loadgen::bulk(&t, &opts(AMOUNT, 1, true)).await.unwrap();
    assert_eq!(down.bytes, AMOUNT);
    assert_eq!(
        receiver_counts(&reports, Mode::Download, 1).await,
        vec![AMOUNT]
    );
}

/// How the faulty relay damages the stream.
#[derive(Clone, Copy)]
enum Fault {
    /// Drops one byte once `after` bytes have passed client -> server.
    DropUp { after: u64 },
    /// Drops one byte once `after` bytes have passed server -> client.
    DropDown { after: u64 },
    /// Sends one byte twice once `after` bytes have passed client -> server.
    DuplicateUp { after: u64 },
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    drop_at: Option<u64>,
    dup_at: Option<u64>,
) {
    let mut buf = vec![0u8; 32 * 1024];
    let mut passed = 0u64;
    let mut done = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut chunk = buf[..n].to_vec();
        if !done {
            if let Some(at) = drop_at {
                if passed + n as u64 > at {
                    chunk.remove((at - passed.min(at)) as usize);
                    done = true;
                }
            }
            if let Some(at) = dup_at {
                if passed + n as u64 > at {
                    let i = (at - passed.min(at)) as usize;
                    chunk.insert(i, chunk[i]);
                    done = true;
                }
            }
        }
        passed += n as u64;
        if to.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

async fn faulty_relay(dest: SocketAddr, fault: Fault) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((c, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let Ok(s) = TcpStream::connect(dest).await else {
                    return;
                };
                let (cr, cw) = c.into_split();
                let (sr, sw) = s.into_split();
                let (du, dd, dup) = match fault {
                    Fault::DropUp { after } => (Some(after), None, None),
                    Fault::DropDown { after } => (None, Some(after), None),
                    Fault::DuplicateUp { after } => (None, None, Some(after)),
                };
                tokio::join!(pump(cr, sw, du, dup), pump(sr, cw, dd, None));
            });
        }
    });
    port
}

async fn faulty_result(fault: Fault, reverse: bool) -> String {
    let (port, _reports, _h) = receiver::start(0).await.unwrap();
    let relay = faulty_relay(local(port), fault).await;
    let t = Target {
        connect: local(relay),
        socks_dest: None,
        inner_tls: None,
    };
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        loadgen::bulk(&t, &opts(4 << 20, 1, reverse)),
    )
    .await
    .expect("loadgen must give up by itself");
    format!("{:#}", r.expect_err("a damaged stream must be an error"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_relay_is_detected_upload() {
    let e = faulty_result(Fault::DropUp { after: 1_000_000 }, false).await;
    assert!(e.contains("byte-count mismatch"), "{e}");
    assert!(e.contains("4194303 of 4194304"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_relay_is_detected_download() {
    let e = faulty_result(Fault::DropDown { after: 2_000_000 }, true).await;
    assert!(e.contains("byte-count mismatch"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicating_relay_is_detected() {
    let e = faulty_result(Fault::DuplicateUp { after: 300_000 }, false).await;
    assert!(e.contains("byte-count mismatch"), "{e}");
    // The very last byte doubled: all bytes look acknowledged, then one more arrives.
    let e = faulty_result(
        Fault::DuplicateUp {
            after: (4 << 20) - 1,
        },
        false,
    )
    .await;
    assert!(e.contains("byte-count mismatch"), "{e}");
}

/// An echo connection that brings more than its message (what Xray's XHTTP packet-up did once
/// in a few thousand fresh connections: another session's upload appended) is an error that
/// says how far it got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_with_extra_bytes_says_how_far_it_got() {
    let (port, reports, _h) = receiver::start(0).await.unwrap();
    let mut s = TcpStream::connect(local(port)).await.unwrap();
    let mut one = ferry_lab::wire::Header {
        mode: Mode::Echo,
        arg: 32,
    }
    .encode()
    .to_vec();
    one.extend_from_slice(&[7u8; 32]);
    // The message, then a second copy of header and message: 80 bytes after the header.
    let mut sent = one.clone();
    sent.extend_from_slice(&one);
    s.write_all(&sent).await.unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).await.unwrap();
    assert_eq!(back.len(), 64);
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen.extend(reports.take());
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].bytes, 64);
    assert_eq!(
        seen[0].error.as_deref(),
        Some("closed in the middle of a message: 16 of 32 bytes after 2 whole messages")
    );
}
