//! Inner TLS (`--inner-tls`): loadgen and receiver speak TLS 1.3 or 1.2 through a relay that
//! reads the TLS records passing by. Byte counts agree in both directions, the receiver serves
//! the version and record size asked for, the records on the wire have that size, the
//! ServerHello is one small record (X25519 only), and damage to the stream is an error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_lab::inner_tls::{InnerTls, TlsVersion};
use ferry_lab::loadgen::{self, BulkOpts, Target};
use ferry_lab::receiver::{self, ConnReport};
use ferry_lab::wire::Mode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn opts(amount: u64, concurrency: usize, reverse: bool) -> BulkOpts {
    BulkOpts {
        amount,
        concurrency,
        reverse,
        stall: Duration::from_secs(3),
    }
}

/// Waits for `n` reports of `mode`.
async fn reports_of(r: &receiver::Reports, mode: Mode, n: usize) -> Vec<ConnReport> {
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
    seen.into_iter().filter(|x| x.mode == Some(mode)).collect()
}

/// What one direction of a connection looked like as TLS records.
#[derive(Default, Debug, Clone)]
struct Records {
    /// (content type, length) of the first records.
    first: Vec<(u8, usize)>,
    /// Longest application-data record body.
    max_app: usize,
    /// Bytes that did not parse as records (must stay 0).
    garbage: usize,
}

/// Reads TLS record headers out of a byte stream split anywhere.
#[derive(Default)]
struct RecordParser {
    head: Vec<u8>,
    body_left: usize,
}

impl RecordParser {
    fn feed(&mut self, mut data: &[u8], out: &mut Records) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.head.len() == 5 {
                let (typ, len) = (
                    self.head[0],
                    u16::from_be_bytes([self.head[3], self.head[4]]) as usize,
                );
                if !(0x14..=0x17).contains(&typ) || self.head[1] != 3 {
                    out.garbage += 5;
                }
                if out.first.len() < 8 {
                    out.first.push((typ, len));
                }
                if typ == 0x17 {
                    out.max_app = out.max_app.max(len);
                }
                self.body_left = len;
                self.head.clear();
            }
        }
    }
}

type Seen = Arc<Mutex<Vec<(Records, Records)>>>;

async fn watch(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    rec: Arc<Mutex<Records>>,
) {
    let mut p = RecordParser::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        p.feed(&buf[..n], &mut rec.lock().unwrap());
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// A relay to `dest` that records each connection's records (client -> server, server ->
/// client) once it closes.
async fn watching_relay(dest: SocketAddr) -> (u16, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((c, _)) = l.accept().await else {
                continue;
            };
            let seen = s2.clone();
            tokio::spawn(async move {
                let Ok(s) = TcpStream::connect(dest).await else {
                    return;
                };
                let (cr, cw) = c.into_split();
                let (sr, sw) = s.into_split();
                let (up, down) = (Arc::default(), Arc::default());
                tokio::join!(
                    watch(cr, sw, Arc::clone(&up)),
                    watch(sr, cw, Arc::clone(&down))
                );
                let up = up.lock().unwrap().clone();
                let down = down.lock().unwrap().clone();
                seen.lock().unwrap().push((up, down));
            });
        }
    });
    (port, seen)
}

async fn records_of(seen: &Seen, n: usize) -> Vec<(Records, Records)> {
    for _ in 0..200 {
        if seen.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::mem::take(&mut *seen.lock().unwrap())
}

/// Bulk both ways with `version` and `record`; checks counts, the receiver's view and the
/// records on the wire.
async fn bulk_case(version: TlsVersion, record: usize) {
    const AMOUNT: u64 = 3 << 20;
    let (port, reports, _h) = receiver::start(0).await.unwrap();
    let (relay, seen) = watching_relay(local(port)).await;
    let t = Target {
        connect: local(relay),
        socks_dest: None,
        inner_tls: Some(InnerTls::new(version, record).unwrap()),
    };
    let what = format!("TLS {} with {record}-byte records", version.label());
    for reverse in [false, true] {
        let mode = if reverse {
            Mode::Download
        } else {
            Mode::Upload
        };
        let r = loadgen::bulk(&t, &opts(AMOUNT, 2, reverse))
            .await
            .unwrap_or_else(|e| panic!("{what}, reverse {reverse}: {e:#}"));
        assert_eq!(r.bytes, 2 * AMOUNT);
        let rep = reports_of(&reports, mode, 2).await;
        assert_eq!(rep.len(), 2, "{what}: {rep:?}");
        for x in &rep {
            assert_eq!(x.bytes, AMOUNT, "{what}");
            let tls = x.tls.as_ref().expect("served in TLS");
            assert_eq!(
                (tls.version.as_str(), tls.record),
                (version.label(), record)
            );
            assert!(tls.cipher.contains("AES_128_GCM"), "{what}: {tls:?}");
        }
        for (up, down) in records_of(&seen, 2).await {
            assert_eq!((up.garbage, down.garbage), (0, 0), "{what}: not TLS");
            // Both start with a handshake record; the ServerHello (X25519) is one small record.
            assert_eq!(up.first[0].0, 0x16, "{what}: {up:?}");
            assert_eq!(down.first[0].0, 0x16, "{what}: {down:?}");
            if version == TlsVersion::V13 {
                assert!(down.first[0].1 < 200, "{what}: ServerHello {down:?}");
            }
            // The bulk direction fills its records: plaintext + AEAD overhead (TLS 1.3: type
            // byte and tag; TLS 1.2: explicit nonce and tag).
            let bulk = if reverse { &down } else { &up };
            assert!(
                (record + 16..=record + 24).contains(&bulk.max_app),
                "{what}, reverse {reverse}: longest record {} for {record}-byte plaintext",
                bulk.max_app
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls13_16k_records_both_ways() {
    bulk_case(TlsVersion::V13, 16384).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls13_1k_records_both_ways() {
    bulk_case(TlsVersion::V13, 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_4k_records_both_ways() {
    bulk_case(TlsVersion::V12, 4096).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_and_idle_over_inner_tls() {
    let (port, _reports, _h) = receiver::start(0).await.unwrap();
    let t = Target {
        connect: local(port),
        socks_dest: None,
        inner_tls: Some(InnerTls::new(TlsVersion::V13, 16384).unwrap()),
    };
    let f = loadgen::ttfb(&t, 10, Duration::from_secs(5)).await.unwrap();
    assert_eq!(f.samples, 10);
    let r = loadgen::round_trips(&t, 64, 50, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.samples, 50);
    let held = loadgen::hold_idle(&t, 20, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(held.len(), 20);
}

/// A relay that flips one bit of the client -> server stream after `after` bytes.
async fn flipping_relay(dest: SocketAddr, after: usize) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let Ok(mut s) = TcpStream::connect(dest).await else {
                    return;
                };
                let (mut cr, mut cw) = c.split();
                let (mut sr, mut sw) = s.split();
                let up = async {
                    let mut buf = vec![0u8; 32 * 1024];
                    let mut passed = 0;
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if passed <= after && after < passed + n {
                            buf[after - passed] ^= 1;
                        }
                        passed += n;
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_inner_tls_is_an_error() {
    let (port, _reports, _h) = receiver::start(0).await.unwrap();
    let relay = flipping_relay(local(port), 1_000_000).await;
    let t = Target {
        connect: local(relay),
        socks_dest: None,
        inner_tls: Some(InnerTls::new(TlsVersion::V13, 16384).unwrap()),
    };
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        loadgen::bulk(&t, &opts(4 << 20, 1, false)),
    )
    .await
    .expect("loadgen must give up by itself");
    assert!(r.is_err(), "a damaged TLS stream must be an error");
}
