//! The resolver against DNS servers started by the tests (UDP and TCP on the loopback).

use super::message::{self, A, AAAA};
use super::*;
use crate::config::Diagnostics;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A DNS server on 127.0.0.1 (UDP and TCP on the same port) answering from `table`; unknown
/// names get NXDOMAIN. Counts the queries it gets.
struct TestServer {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn answer(table: &HashMap<String, Vec<IpAddr>>, q: &[u8]) -> Option<Vec<u8>> {
    let (name, _) = message::question(q)?;
    match table.get(&name.to_ascii_lowercase()) {
        Some(ips) => message::answer(q, 0, ips, 60),
        None => message::answer(q, 3, &[], 0),
    }
}

async fn server(entries: &[(&str, &[&str])]) -> TestServer {
    let table: HashMap<String, Vec<IpAddr>> = entries
        .iter()
        .map(|(n, ips)| {
            (
                n.to_string(),
                ips.iter().map(|i| i.parse().unwrap()).collect(),
            )
        })
        .collect();
    let table = Arc::new(table);
    // UDP and TCP on one port number: the TCP side of a fresh UDP port may be taken by another
    // test's connection, so try again with another port.
    let mut tries = 0;
    let (udp, port, tcp) = loop {
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = udp.local_addr().unwrap().port();
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(tcp) => break (udp, port, tcp),
            Err(e) if tries < 50 => {
                tries += 1;
                let _ = e;
            }
            Err(e) => panic!("no port free for both UDP and TCP: {e}"),
        }
    };
    let hits = Arc::new(AtomicUsize::new(0));
    let (t, h) = (table.clone(), hits.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            h.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = answer(&t, &buf[..n]) {
                let _ = udp.send_to(&r, from).await;
            }
        }
    });
    let (t, h) = (table, hits.clone());
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = tcp.accept().await {
            h.fetch_add(1, Ordering::Relaxed);
            let t = t.clone();
            tokio::spawn(async move {
                let mut l = [0u8; 2];
                s.read_exact(&mut l).await.ok()?;
                let mut q = vec![0u8; usize::from(u16::from_be_bytes(l))];
                s.read_exact(&mut q).await.ok()?;
                let r = answer(&t, &q)?;
                let mut m = (r.len() as u16).to_be_bytes().to_vec();
                m.extend(r);
                s.write_all(&m).await.ok()
            });
        }
    });
    TestServer { port, hits }
}

fn dns(v: serde_json::Value) -> std::result::Result<Dns, ConfigError> {
    let d = Diagnostics::default();
    let o = Obj::new(&v, "dns", &d)?;
    parse(&o, &Assets::only("."))
}

fn ips(v: &[&str]) -> Vec<IpAddr> {
    v.iter().map(|s| s.parse().unwrap()).collect()
}

#[tokio::test]
async fn hosts_merge_every_matching_key_in_xray_order() {
    let d = dns(json!({"hosts": {
        "domain:google.com": "1.1.1.1",
        "full:www.google.com": "2.2.2.2",
        "keyword:goo": ["3.3.3.3", "::3"],
        "alias.example": "www.google.com",
        "blocked.example": "#3",
        "plain.example": ["9.9.9.9", "other.example", "8.8.8.8"]
    }}))
    .unwrap();
    assert_eq!(
        d.lookup("www.google.com").await,
        ips(&["2.2.2.2", "1.1.1.1", "3.3.3.3", "::3"])
    );
    assert_eq!(
        d.lookup_families(
            "WWW.Google.com.",
            Families {
                v4: false,
                v6: true
            }
        )
        .await,
        ips(&["::3"])
    );
    assert_eq!(
        d.lookup("alias.example").await.len(),
        4,
        "an alias restarts"
    );
    assert!(d.lookup("blocked.example").await.is_empty());
    assert_eq!(
        d.hosts("plain.example"),
        Some(HostValue::Alias("other.example".into()))
    );
    // A plain key is a full name in hosts (not a substring).
    assert!(d.hosts("x.alias.example").is_none());
}

#[tokio::test]
async fn servers_by_domains_expect_ips_and_fallback() {
    let cn = server(&[("a.cn", &["1.0.1.1"]), ("poisoned.com", &["9.9.9.1"])]).await;
    let global = server(&[("a.cn", &["8.8.8.8"]), ("poisoned.com", &["9.9.9.9"])]).await;
    let tcp = server(&[("t.example", &["5.5.5.5", "::5"])]).await;
    let dir = crate::app::router::geodata::tests::fixture();
    let v = json!({"servers": [
        format!("127.0.0.1:{}", global.port),
        {"address": "127.0.0.1", "port": cn.port, "domains": ["domain:cn", "poisoned"],
         "expectIPs": ["geoip:cn"], "skipFallback": true},
        {"address": format!("tcp://127.0.0.1:{}", tcp.port), "domains": ["full:t.example"]}
    ], "queryStrategy": "UseIPv4"});
    let d = Obj::new(&v, "dns", &Diagnostics::default())
        .and_then(|o| parse(&o, &Assets::only(&dir)))
        .unwrap();
    // The domain rule sends a.cn to the second server first; its answer is in CN.
    assert_eq!(d.order("a.cn"), vec![1, 0, 2]);
    assert_eq!(d.lookup("a.cn").await, ips(&["1.0.1.1"]));
    // poisoned.com: the CN server answers outside CN (dropped by expectIPs), so the next
    // server in order answers.
    assert_eq!(d.lookup("poisoned.com").await, ips(&["9.9.9.9"]));
    // skipFallback: the CN server is not a fallback for other names.
    assert_eq!(d.order("other.org"), vec![0, 2]);
    // TCP server, IPv4 only by the global strategy.
    assert_eq!(d.lookup("t.example").await, ips(&["5.5.5.5"]));
    // Cached: a second lookup sends nothing.
    let before = tcp.hits.load(Ordering::Relaxed);
    assert_eq!(d.lookup("t.example").await, ips(&["5.5.5.5"]));
    assert_eq!(tcp.hits.load(Ordering::Relaxed), before);
    // NXDOMAIN everywhere: nothing.
    assert!(d.lookup("nothing.invalid").await.is_empty());
}

#[tokio::test]
async fn expect_ips_filter_and_prefer_modes() {
    let s = server(&[
        ("x.example", &["10.0.0.1", "1.0.1.9"]),
        ("y.example", &["10.0.0.2"]),
    ])
    .await;
    let other = server(&[("y.example", &["7.7.7.7"])]).await;
    let dir = crate::app::router::geodata::tests::fixture();
    let mk = |expect: serde_json::Value| {
        let v = json!({"servers": [
            {"address": "127.0.0.1", "port": s.port, "expectedIPs": expect},
            {"address": "127.0.0.1", "port": other.port}
        ], "queryStrategy": "UseIPv4", "disableCache": true});
        Obj::new(&v, "dns", &Diagnostics::default())
            .and_then(|o| parse(&o, &Assets::only(&dir)))
            .unwrap()
    };
    let d = mk(json!(["geoip:cn"]));
    assert_eq!(d.lookup("x.example").await, ips(&["1.0.1.9"]));
    // Filter mode: nothing left -> the next server.
    assert_eq!(d.lookup("y.example").await, ips(&["7.7.7.7"]));
    // Prefer mode ("*"): nothing in CN -> the whole answer is kept.
    let d = mk(json!(["geoip:cn", "*"]));
    assert_eq!(d.lookup("y.example").await, ips(&["10.0.0.2"]));
}

#[test]
fn disable_fallback_final_query_and_localhost_order() {
    let d = dns(json!({"servers": [
        "1.1.1.1",
        {"address": "2.2.2.2", "domains": ["full:a.example"]},
        {"address": "3.3.3.3", "domains": ["a.example"], "finalQuery": true},
        "4.4.4.4",
        "localhost"
    ]}))
    .unwrap();
    assert_eq!(d.order("a.example"), vec![1, 2]);
    assert_eq!(
        d.order("b.org"),
        vec![0, 1, 2],
        "the fallback stops at a finalQuery server"
    );
    // Local names go to the localhost server first.
    assert_eq!(d.order("b.example"), vec![4, 0, 1, 2]);
    let d = dns(json!({"servers": ["1.1.1.1", "localhost"]})).unwrap();
    assert_eq!(d.order("printer.lan"), vec![1, 0]);
    assert_eq!(d.order("nas"), vec![1, 0]);
    let d = dns(
        json!({"servers": ["1.1.1.1", {"address": "2.2.2.2", "domains": ["x"]}],
                       "disableFallback": true}),
    )
    .unwrap();
    assert_eq!(d.order("x.org"), vec![1]);
    assert_eq!(
        d.order("y.org"),
        vec![0],
        "no match and no fallback: the first server"
    );
    let d = dns(
        json!({"servers": ["1.1.1.1", {"address": "2.2.2.2", "domains": ["x"]}],
                       "disableFallbackIfMatch": true}),
    )
    .unwrap();
    assert_eq!(d.order("x.org"), vec![1]);
    assert_eq!(d.order("y.org"), vec![0, 1]);
}

#[test]
fn addresses_and_not_yet_forms() {
    let d = dns(
        json!({"servers": ["8.8.8.8", "8.8.4.4:5353", "udp://9.9.9.9:53", "[2001:db8::1]:53",
                                    "tcp://1.1.1.1", "tcp+local://dns.example:5353", "localhost",
                                    {"address": "1.0.0.1", "port": 5300}]}),
    )
    .unwrap();
    let t: Vec<&Transport> = d.servers_for_test().iter().map(|s| &s.transport).collect();
    assert_eq!(t[0], &Transport::Udp("8.8.8.8".into(), 53));
    assert_eq!(t[1], &Transport::Udp("8.8.4.4".into(), 5353));
    assert_eq!(t[2], &Transport::Udp("9.9.9.9".into(), 53));
    assert_eq!(t[3], &Transport::Udp("2001:db8::1".into(), 53));
    assert_eq!(t[4], &Transport::Tcp("1.1.1.1".into(), 53));
    assert_eq!(t[5], &Transport::Tcp("dns.example".into(), 5353));
    assert_eq!(t[6], &Transport::Localhost);
    assert_eq!(t[7], &Transport::Udp("1.0.0.1".into(), 5300));
    for (bad, path) in [
        (
            json!({"servers": ["quic+local://dns.adguard.com"]}),
            "dns.servers[0]",
        ),
        (
            json!({"servers": ["8.8.8.8", {"address": "quic://dns.adguard.com"}]}),
            "dns.servers[1].address",
        ),
    ] {
        let e = dns(bad).unwrap_err();
        assert_eq!(e.path, path);
        assert!(e.msg.contains("not supported yet"), "{e}");
    }
}

#[test]
fn a_and_aaaa_constants() {
    assert_eq!((A, AAAA), (1, 28));
}

#[tokio::test]
async fn routing_resolves_through_the_dns_object() {
    use crate::app::router::Router;
    let s = server(&[("srv.example", &["10.9.9.9"])]).await;
    let d = dns(json!({"hosts": {"x.example": "10.1.1.1"},
                       "servers": [format!("127.0.0.1:{}", s.port)]}))
    .unwrap();
    let v = json!({"domainStrategy": "IPIfNonMatch",
                   "rules": [{"ip": ["10.1.0.0/16"], "outboundTag": "hosts"},
                             {"ip": ["10.9.0.0/16"], "outboundTag": "server"}]});
    let diag = Diagnostics::default();
    let o = Obj::new(&v, "routing", &diag).unwrap();
    let r = Router::parse(&o).unwrap().with_dns(Some(Arc::new(d)));
    let sess = |dest: &str| crate::proxy::Session {
        inbound_tag: "in".into(),
        source: "10.0.0.1:1".parse().unwrap(),
        local: "127.0.0.1:1080".parse().unwrap(),
        dest: crate::common::Destination::parse(dest).unwrap(),
        network: crate::common::Network::Tcp,
        user: None,
        protocol: "test",
        sniffed: None,
    };
    let out = |d: &str| {
        let s = sess(d);
        let r = &r;
        async move { r.route(&s).await.map(|x| x.outbound.clone()) }
    };
    assert_eq!(out("x.example:80").await.as_deref(), Some("hosts"));
    assert_eq!(out("srv.example:80").await.as_deref(), Some("server"));
    assert_eq!(out("none.example:80").await, None);
}

/// What the dns outbound answers with: the first server with addresses wins (TTL from the
/// wire, hosts 10); no addresses anywhere gives the servers' common verdict (all NXDOMAIN →
/// rcode 3, all empty → NOERROR), and no verdict when they disagree or one is silent.
#[tokio::test]
async fn resolve_gives_rcode_ttl_and_the_common_verdict() {
    let one = server(&[("a.test", &["1.1.1.1"]), ("v6.test", &["::6"])]).await;
    let two = server(&[("b.test", &["2.2.2.2"]), ("v6.test", &["::7"])]).await;
    // A UDP port nobody answers on (bound, so nothing else takes it).
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sp = silent.local_addr().unwrap().port();
    let d = dns(json!({
        "hosts": {"h.test": "10.0.0.1", "gone.test": "#3"},
        "servers": [{"address": "127.0.0.1", "port": one.port}, {"address": "127.0.0.1", "port": two.port}]
    }))
    .unwrap();
    let v4 = Families {
        v4: true,
        v6: false,
    };
    let v6 = Families {
        v4: false,
        v6: true,
    };
    let a = d.resolve("b.test.", v4).await.unwrap();
    assert_eq!((a.ips, a.ttl, a.rcode), (ips(&["2.2.2.2"]), 60, 0));
    // Cached: the TTL left, not more than given.
    let a = d.resolve("b.test", v4).await.unwrap();
    assert!(a.ttl <= 60 && a.ttl >= 59, "{a:?}");
    assert_eq!(
        d.resolve("nowhere.test", v4).await,
        Some(Answer {
            ips: vec![],
            ttl: 0,
            rcode: 3
        })
    );
    // The first server knows a.test; asked for AAAA it has none: NOERROR but the second
    // says NXDOMAIN, so the verdicts differ.
    assert_eq!(d.resolve("a.test", v6).await, None);
    let a = d.resolve("v6.test", v6).await.unwrap();
    assert_eq!(a.ips, ips(&["::6"]));
    let a = d.resolve("h.test", v4).await.unwrap();
    assert_eq!((a.ips, a.ttl), (ips(&["10.0.0.1"]), 10));
    assert_eq!(d.resolve("h.test", v6).await.unwrap().ips, ips(&[]));
    assert_eq!(d.resolve("gone.test", v4).await.unwrap().rcode, 3);
    // A silent server among NXDOMAIN ones: no verdict.
    let d = dns(json!({"servers": [
        {"address": "127.0.0.1", "port": one.port},
        {"address": "127.0.0.1", "port": sp, "timeoutMs": 200}
    ]}))
    .unwrap();
    assert_eq!(d.resolve("nowhere.test", v4).await, None);
    assert_eq!(
        d.resolve("a.test", v4).await.unwrap().ips,
        ips(&["1.1.1.1"])
    );
    // Neither family allowed: an empty answer at once.
    let d =
        dns(json!({"queryStrategy": "UseIPv4", "servers": [{"address": "127.0.0.1", "port": sp}]}))
            .unwrap();
    assert_eq!(d.resolve("a.test", v6).await.unwrap(), Answer::empty(0));
    drop(silent);
}
