//! Two stacks wired back to back: a client's packets are the server's input and back.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::*;

struct Udp(Mutex<Vec<(SocketAddr, SocketAddr, Vec<u8>)>>, Stack2);
type Stack2 = Arc<Mutex<Option<Stack>>>;

impl UdpIn for Udp {
    fn datagram(&self, src: SocketAddr, dst: SocketAddr, data: &[u8]) {
        self.0.lock().unwrap().push((src, dst, data.to_vec()));
        // Echo from the address the client sent to, and from another one (full cone).
        let s = self.1.lock().unwrap().clone().unwrap();
        let data = data.to_vec();
        tokio::spawn(async move {
            s.send_udp(dst, src, &data).await;
            let other: SocketAddr = "192.0.2.77:7777".parse().unwrap();
            s.send_udp(other, src, b"cone").await;
        });
    }
}

/// Which packets a wire loses: it is told each packet, counted from 1.
type Loss = Box<dyn FnMut(usize, &[u8]) -> bool + Send>;

fn wire(from: mpsc::Receiver<Vec<u8>>, to: Stack, mut lost: Loss) {
    let mut from = from;
    tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(p) = from.recv().await {
            n += 1;
            if lost(n, &p) {
                continue;
            }
            to.input(&p);
        }
    });
}

fn every(k: usize) -> Loss {
    Box::new(move |n, _| k > 0 && n.is_multiple_of(k))
}

fn pair(loss_every: usize) -> (Stack, Stack, Accept, Arc<Udp>) {
    pair_with(every(loss_every), every(loss_every))
}

fn pair_with(up: Loss, down: Loss) -> (Stack, Stack, Accept, Arc<Udp>) {
    let (ctx, crx) = mpsc::channel(1024);
    let (stx, srx) = mpsc::channel(1024);
    let client = Stack::new(
        &Config {
            addrs: vec!["10.66.0.2".parse().unwrap(), "fd66::2".parse().unwrap()],
            mtu: 1420,
            promiscuous: false,
        },
        ctx,
        None,
    )
    .0;
    let slot: Stack2 = Arc::new(Mutex::new(None));
    let udp = Arc::new(Udp(Mutex::new(Vec::new()), slot.clone()));
    let (server, accept) = Stack::new(
        &Config {
            addrs: vec!["10.66.0.1".parse().unwrap()],
            mtu: 1420,
            promiscuous: true,
        },
        stx,
        Some(udp.clone() as Arc<dyn UdpIn>),
    );
    *slot.lock().unwrap() = Some(server.clone());
    wire(crx, server.clone(), up);
    wire(srx, client.clone(), down);
    (client, server, accept.unwrap(), udp)
}

async fn transfer(loss_every: usize) {
    let (client, _server, mut accept, _) = pair(loss_every);
    let dst: SocketAddr = "203.0.113.9:443".parse().unwrap();
    let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let srv = tokio::spawn(async move {
        let mut f = accept.tcp.recv().await.unwrap();
        assert_eq!(f.local(), Some(dst));
        assert_eq!(f.remote().unwrap().ip().to_string(), "10.66.0.2");
        let mut got = Vec::new();
        f.read_to_end(&mut got).await.unwrap();
        // Back the other way, reversed.
        got.reverse();
        f.write_all(&got).await.unwrap();
        f.shutdown().await.unwrap();
        got.len()
    });
    let mut c = client.connect(dst).await.unwrap();
    let (mut r, mut w) = tokio::io::split(&mut c);
    let p2 = payload.clone();
    let writer = async move {
        w.write_all(&p2).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut back = Vec::new();
    let reader = r.read_to_end(&mut back);
    let (_, n) = tokio::join!(writer, reader);
    n.unwrap();
    assert_eq!(srv.await.unwrap(), payload.len());
    let mut want = payload;
    want.reverse();
    assert!(back == want, "echoed bytes differ");
}

#[tokio::test]
async fn tcp_through_two_stacks_is_byte_exact() {
    tokio::time::timeout(std::time::Duration::from_secs(60), transfer(0))
        .await
        .expect("transfer timed out");
}

#[tokio::test]
async fn tcp_recovers_from_lost_packets() {
    tokio::time::timeout(std::time::Duration::from_secs(120), transfer(50))
        .await
        .expect("lossy transfer timed out");
}

/// The first sending of 20 data segments in a row, from the 300th packet on, lost at once (as
/// a peer's full socket buffer loses them); their retransmissions pass.
fn a_burst() -> Loss {
    let mut lost = HashSet::new();
    Box::new(move |n, p| {
        let Some(pkt) = packet::parse(p) else {
            return false;
        };
        // IPv4 (the client's address): the TCP header after the IP header's `ihl` words.
        let tcp = &p[usize::from(p[0] & 15) * 4..];
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        if lost.contains(&seq) {
            return false;
        }
        if n >= 300 && lost.len() < 20 && pkt.payload.len() > 20 {
            lost.insert(seq);
            return true;
        }
        false
    })
}

/// A lost burst stalls the flow for one retransmission timeout, and that timeout is Linux's
/// 200 ms floor, well under the 1 s Xray's `uplinkOnly`/`downlinkOnly` leave a half-closed
/// relay before closing it (smoltcp's own 1 s floor let Xray close transfers mid-way).
#[tokio::test]
async fn a_lost_burst_stalls_the_flow_well_under_a_second() {
    let (client, _server, mut accept, _) = pair_with(a_burst(), every(0));
    let dst: SocketAddr = "203.0.113.9:443".parse().unwrap();
    let payload: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let srv = tokio::spawn(async move {
        let mut f = accept.tcp.recv().await.unwrap();
        let (mut got, mut buf) = (Vec::new(), vec![0u8; 65536]);
        let (mut last, mut stall) = (std::time::Instant::now(), std::time::Duration::ZERO);
        loop {
            let n = f.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            stall = stall.max(last.elapsed());
            last = std::time::Instant::now();
            got.extend_from_slice(&buf[..n]);
        }
        (got, stall)
    });
    let mut c = client.connect(dst).await.unwrap();
    c.write_all(&payload).await.unwrap();
    c.shutdown().await.unwrap();
    let (got, stall) = tokio::time::timeout(std::time::Duration::from_secs(60), srv)
        .await
        .expect("transfer timed out")
        .unwrap();
    assert!(got == payload, "bytes differ");
    assert!(
        stall < std::time::Duration::from_millis(800),
        "the lost burst stalled the flow {stall:?}"
    );
}

#[tokio::test]
async fn udp_goes_out_and_replies_come_from_anywhere() {
    let (client, _server, _accept, udp) = pair(0);
    let sock = client.udp().unwrap();
    let dst: SocketAddr = "198.51.100.1:53".parse().unwrap();
    sock.send(b"query", dst).await.unwrap();
    let mut buf = [0u8; 64];
    let mut from = Vec::new();
    for _ in 0..2 {
        let (n, d) = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            crate::transport::PacketConn::recv_from(&sock, &mut buf),
        )
        .await
        .unwrap()
        .unwrap();
        from.push((d.to_string(), buf[..n].to_vec()));
    }
    from.sort();
    assert_eq!(from[0], ("192.0.2.77:7777".to_string(), b"cone".to_vec()));
    assert_eq!(from[1], ("198.51.100.1:53".to_string(), b"query".to_vec()));
    let seen = udp.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].1, dst);
    // No IPv6 address on the server side is needed to carry IPv6 from the client.
    sock.send(b"six", "[2001:db8::1]:53".parse().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(udp.0.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_stack_without_an_address_of_a_family_refuses_it() {
    let (out, _rx) = mpsc::channel(8);
    let (s, _) = Stack::new(
        &Config {
            addrs: vec!["10.0.0.1".parse().unwrap()],
            mtu: 1420,
            promiscuous: false,
        },
        out,
        None,
    );
    let e = s
        .connect("[2001:db8::1]:80".parse().unwrap())
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrNotAvailable);
}

#[tokio::test]
async fn closed_flows_free_their_sockets() {
    let (client, server, mut accept, _) = pair(0);
    for i in 0..20u16 {
        let dst: SocketAddr = format!("203.0.113.9:{}", 1000 + i).parse().unwrap();
        let mut c = client.connect(dst).await.unwrap();
        let mut f = accept.tcp.recv().await.unwrap();
        c.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        f.read_exact(&mut b).await.unwrap();
        c.shutdown().await.unwrap();
        f.shutdown().await.unwrap();
        drop(c);
        drop(f);
    }
    // TIME-WAIT ends a socket's life here: nothing is kept for closed connections.
    for _ in 0..50 {
        if client.connections() == 0 && server.connections() == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "sockets left: client {} server {}",
        client.connections(),
        server.connections()
    );
}

#[tokio::test]
async fn garbage_and_a_syn_flood_stay_bounded() {
    let (out, _rx) = mpsc::channel(8);
    let (s, _accept) = Stack::new(
        &Config {
            addrs: vec!["10.0.0.1".parse().unwrap()],
            mtu: 1420,
            promiscuous: true,
        },
        out,
        None,
    );
    for n in 0..64usize {
        s.input(&vec![0x45; n]);
        s.input(&vec![0x60; n]);
    }
    // SYNs from many sources: listeners are capped.
    for i in 0..(MAX_FLOWS as u32 + 100) {
        let mut p = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, packet::PROTO_TCP, 0, 0];
        p.extend_from_slice(&[10, 1, (i >> 8) as u8, i as u8, 1, 1, 1, 1]);
        p.extend_from_slice(&(1024 + (i % 60000) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, packet::TCP_SYN]);
        p.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        s.input(&p);
    }
    let st = s.inner.lock();
    assert!(st.pending.len() + st.conns.len() <= MAX_FLOWS);
    assert!(st.dev.rx.len() <= RX_QUEUE);
}
