//! The router's tests: each rule field, rule order, domain strategies and geodata rules.

use super::*;
use crate::common::{Destination, Network};
use crate::config::reader::Obj;
use crate::config::Diagnostics;
use serde_json::{json, Value};
use std::net::SocketAddr;

fn sess(dest: &str) -> Session {
    Session {
        inbound_tag: "in".into(),
        source: "10.1.2.3:4444".parse().unwrap(),
        local: "127.0.0.1:1080".parse().unwrap(),
        dest: Destination::parse(dest).unwrap(),
        network: Network::Tcp,
        user: None,
        protocol: "test",
        sniffed: None,
    }
}

fn router(v: Value) -> Result<Router> {
    let d = Diagnostics::default();
    let o = Obj::new(&v, "routing", &d)?;
    Router::parse(&o)
}

fn route(r: &Router, s: &Session) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(r.route(s)).map(|r| r.outbound.clone())
}

#[test]
fn missing_geo_files_are_an_error_naming_the_path() {
    let empty = std::env::temp_dir().join(format!("ferry-nogeo-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let assets = Assets::only(&empty);
    let parse = |v: Value| {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "routing", &d)?;
        Router::parse_with(&o, &assets)
    };
    let e = parse(json!({"rules": [{"domain": ["full:a.com", "geosite:cn"], "outboundTag": "x"}]}))
        .unwrap_err();
    assert_eq!(e.path, "routing.rules[0].domain[1]");
    assert!(e.msg.contains("geosite.dat"), "{e}");
    let e = parse(json!({"rules": [{"ip": ["geoip:private"], "outboundTag": "x"}]})).unwrap_err();
    assert_eq!(e.path, "routing.rules[0].ip[0]");
    let e = parse(json!({"rules": [{"domains": ["ext:h2y.dat:ads"], "outboundTag": "x"}]}))
        .unwrap_err();
    assert_eq!(e.path, "routing.rules[0].domains[0]");
    assert!(e.msg.contains("h2y.dat"), "{e}");
}

#[test]
fn geo_rules_route() {
    let dir = geodata::tests::fixture();
    let d = Diagnostics::default();
    let v = json!({"rules": [
        {"ip": ["geoip:private"], "outboundTag": "private"},
        {"domain": ["geosite:google@ads"], "outboundTag": "ads"},
        {"domain": ["geosite:google", "geosite:cn"], "outboundTag": "site"},
        {"ip": ["geoip:!cn"], "outboundTag": "notcn"},
        {"source": ["ext:ext/custom.dat:office"], "outboundTag": "office"}
    ]});
    let o = Obj::new(&v, "routing", &d).unwrap();
    let r = Router::parse_with(&o, &Assets::only(&dir)).unwrap();
    assert_eq!(route(&r, &sess("10.0.0.1:80")).as_deref(), Some("private"));
    assert_eq!(
        route(&r, &sess("ads.google.com:80")).as_deref(),
        Some("ads")
    );
    assert_eq!(
        route(&r, &sess("www.google.com:80")).as_deref(),
        Some("site")
    );
    assert_eq!(route(&r, &sess("x.cn:80")).as_deref(), Some("site"));
    assert_eq!(route(&r, &sess("9.9.9.9:80")).as_deref(), Some("notcn"));
    assert_eq!(route(&r, &sess("1.0.1.1:80")), None);
    let mut s = sess("1.0.1.1:80");
    s.source = "172.16.0.9:1".parse::<SocketAddr>().unwrap().into();
    assert_eq!(route(&r, &s).as_deref(), Some("office"));
}

#[test]
fn each_rule_field_routes() {
    let r = router(json!({"rules": [
        {"type": "field", "inboundTag": ["other"], "outboundTag": "tag"},
        {"network": "udp", "outboundTag": "udp"},
        {"user": ["a@b.c"], "outboundTag": "user"},
        {"domain": ["full:x.com"], "outboundTag": "full"},
        {"domain": ["domain:y.com"], "outboundTag": "suffix"},
        {"ip": ["1.2.3.0/24", "2001:db8::/32"], "outboundTag": "ip"},
        {"port": "7000-7100", "outboundTag": "port"},
        {"sourcePort": 5555, "outboundTag": "sport"},
        {"source": ["10.9.0.0/16"], "outboundTag": "src"},
        {"sourceIP": ["10.8.0.1"], "outboundTag": "src2"},
        {"ruleTag": "t", "domain": ["regexp:^re\\."], "outboundTag": "re"}
    ]}))
    .unwrap();
    let mut s = sess("a.com:80");
    assert_eq!(route(&r, &s), None, "no match -> default");
    s.inbound_tag = "other".into();
    assert_eq!(route(&r, &s).as_deref(), Some("tag"));
    let mut s = sess("a.com:80");
    s.network = Network::Udp;
    assert_eq!(route(&r, &s).as_deref(), Some("udp"));
    let mut s = sess("a.com:80");
    s.user = Some(crate::proxy::User::new("a@b.c", 0));
    assert_eq!(route(&r, &s).as_deref(), Some("user"));
    assert_eq!(route(&r, &sess("x.com:1")).as_deref(), Some("full"));
    assert_eq!(route(&r, &sess("www.x.com:1")), None);
    assert_eq!(route(&r, &sess("www.y.com:1")).as_deref(), Some("suffix"));
    assert_eq!(route(&r, &sess("1.2.3.4:1")).as_deref(), Some("ip"));
    assert_eq!(route(&r, &sess("[2001:db8::1]:1")).as_deref(), Some("ip"));
    assert_eq!(route(&r, &sess("a.com:7050")).as_deref(), Some("port"));
    let mut s = sess("a.com:1");
    s.source = "10.0.0.1:5555".parse::<SocketAddr>().unwrap().into();
    assert_eq!(route(&r, &s).as_deref(), Some("sport"));
    s.source = "10.9.3.3:1".parse::<SocketAddr>().unwrap().into();
    assert_eq!(route(&r, &s).as_deref(), Some("src"));
    s.source = "10.8.0.1:1".parse::<SocketAddr>().unwrap().into();
    assert_eq!(route(&r, &s).as_deref(), Some("src2"));
    let rule = rt_route(&r, &sess("re.example:1")).unwrap();
    assert_eq!((rule.0.as_str(), rule.1.as_deref()), ("re", Some("t")));
}

fn rt_route(r: &Router, s: &Session) -> Option<(String, Option<String>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(r.route(s))
        .map(|r| (r.outbound.clone(), r.tag.clone()))
}

#[test]
fn conditions_are_and_lists_are_or_first_match_wins() {
    let r = router(json!({"rules": [
        {"domain": ["domain:a.com", "full:b.com"], "port": 443, "outboundTag": "first"},
        {"domain": ["domain:a.com"], "outboundTag": "second"},
        {"port": "443", "outboundTag": "third"}
    ]}))
    .unwrap();
    assert_eq!(route(&r, &sess("www.a.com:443")).as_deref(), Some("first"));
    assert_eq!(route(&r, &sess("b.com:443")).as_deref(), Some("first"));
    assert_eq!(route(&r, &sess("www.a.com:80")).as_deref(), Some("second"));
    assert_eq!(route(&r, &sess("c.com:443")).as_deref(), Some("third"));
    assert_eq!(route(&r, &sess("c.com:80")), None);
}

#[test]
fn domain_strategy_resolves_localhost() {
    let rules = json!([
        {"domain": ["full:nomatch.invalid"], "outboundTag": "d"},
        {"ip": ["127.0.0.0/8", "::1"], "outboundTag": "loop"}
    ]);
    let asis = router(json!({"rules": rules})).unwrap();
    assert_eq!(route(&asis, &sess("localhost:80")), None);
    for st in ["IPIfNonMatch", "IPOnDemand"] {
        let r = router(json!({"domainStrategy": st, "rules": rules})).unwrap();
        assert_eq!(
            route(&r, &sess("localhost:80")).as_deref(),
            Some("loop"),
            "{st}"
        );
        assert_eq!(
            route(&r, &sess("nomatch.invalid:80")).as_deref(),
            Some("d"),
            "{st}"
        );
    }
    // An unknown strategy is AsIs, as in Xray, with a warning naming it.
    let d = Diagnostics::default();
    let v = json!({"domainStrategy": "Sometimes"});
    let r = Router::parse(&Obj::new(&v, "routing", &d).unwrap()).unwrap();
    assert!(matches!(r.strategy, DomainStrategy::AsIs));
    let w = d.take();
    assert!(
        w.iter()
            .any(|w| w.starts_with("routing.domainStrategy: unknown")),
        "{w:?}"
    );
}

#[test]
fn ip_on_demand_resolves_in_rule_order() {
    // The IP rule comes first, so IPOnDemand takes it; IPIfNonMatch prefers the domain rule.
    let rules = json!([
        {"ip": ["127.0.0.0/8", "::1"], "outboundTag": "ip"},
        {"domain": ["full:localhost"], "outboundTag": "dom"}
    ]);
    let r = router(json!({"domainStrategy": "IPOnDemand", "rules": rules})).unwrap();
    assert_eq!(route(&r, &sess("localhost:80")).as_deref(), Some("ip"));
    let r = router(json!({"domainStrategy": "IPIfNonMatch", "rules": rules})).unwrap();
    assert_eq!(route(&r, &sess("localhost:80")).as_deref(), Some("dom"));
}
