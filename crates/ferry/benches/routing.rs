//! Routing decisions per second with real geodata (no harness): a realistic rule list
//! (private IPs, ads, one country's sites and IPs, a proxy list with regexes, ports, sources)
//! built from the v2fly files, then a mix of domain and IP destinations routed in a loop.
//! Also prints the tables' build time and each destination's outbound tag. Needs FERRY_GEO_DIR (a
//! folder with geoip.dat and geosite.dat; scripts/bench_geodata.py fetches them). Run with
//! `FERRY_GEO_DIR=DIR cargo bench -p ferry --bench routing`. scripts/bench_xray_router is the
//! same benchmark around Xray's router.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use ferry::app::router::{Assets, Router};
use ferry::common::{Destination, Network};
use ferry::config::{Diagnostics, Obj};
use ferry::proxy::Session;

fn main() {
    let Ok(dir) = std::env::var("FERRY_GEO_DIR") else {
        eprintln!("FERRY_GEO_DIR is not set: nothing to do");
        return;
    };
    let v = serde_json::json!({"domainStrategy": "AsIs", "rules": [
        {"inboundTag": ["api"], "outboundTag": "api"},
        {"protocol": ["bittorrent"], "outboundTag": "block"},
        {"ip": ["geoip:private"], "outboundTag": "direct"},
        {"domain": ["geosite:category-ads-all"], "outboundTag": "block"},
        {"domain": ["geosite:cn", "domain:example.cn", "full:a.example.com", "keyword:baidu"], "outboundTag": "direct"},
        {"ip": ["geoip:cn"], "outboundTag": "direct"},
        {"domain": ["geosite:geolocation-!cn", "geosite:google"], "outboundTag": "proxy"},
        {"network": "udp", "port": "443", "outboundTag": "block"},
        {"port": "53,853,1000-2000", "sourceIP": ["192.168.1.0/24"], "outboundTag": "proxy"}
    ]});
    let d = Diagnostics::default();
    let o = Obj::new(&v, "routing", &d).unwrap();
    let t = Instant::now();
    let r = Router::parse_with(&o, &Assets::only(&dir)).expect("rules");
    println!("build: {:?}", t.elapsed());
    let dests = [
        "www.google.com:443",
        "www.baidu.com:443",
        "ads.example.com:80",
        "github.com:443",
        "1.0.1.5:443",
        "8.8.8.8:53",
        "192.168.1.1:80",
        "cdn.jsdelivr.net:443",
        "api.weixin.qq.com:443",
        "update.microsoft.com:443",
        "223.5.5.5:53",
        "news.ycombinator.com:443",
        "x.y.z.unknown-domain.org:8443",
        "[2001:4860:4860::8888]:443",
        "doubleclick.net:443",
        "t.co:443",
    ];
    let sessions: Vec<Session> = dests
        .iter()
        .map(|d| Session {
            inbound_tag: "in".into(),
            source: "10.0.0.2:40000".parse().unwrap(),
            local: "127.0.0.1:1080".parse().unwrap(),
            dest: Destination::parse(d).unwrap(),
            network: Network::Tcp,
            user: None,
            protocol: "socks",
            sniffed: None,
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        // Each destination's outbound tag, in the form scripts/bench_xray_router prints Xray's,
        // so the two can be diffed ("-": no rule matched, the default outbound).
        for (d, s) in dests.iter().zip(&sessions) {
            let tag = r.route(s).await.map_or("-", |rule| {
                rule.balancer.as_deref().unwrap_or(rule.outbound.as_str())
            });
            println!("decision {d} {tag}");
        }
        let (mut n, t) = (0u64, Instant::now());
        let mut hits = 0usize;
        while t.elapsed() < Duration::from_secs(3) {
            for s in &sessions {
                hits += usize::from(r.route(s).await.is_some());
                n += 1;
            }
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "decisions: {n} in {secs:.2} s = {:.2} M/s ({:.0} ns each; {hits} matched a rule)",
            n as f64 / secs / 1e6,
            secs * 1e9 / n as f64
        );
    });
}
