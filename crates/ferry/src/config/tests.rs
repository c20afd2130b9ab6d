//! The config reader's tests: ports, protocols and fields unsupported or unknown, spellings, services.

use super::*;
use serde_json::json;

#[test]
fn ports() {
    assert_eq!(parse_ports(&json!(1080), "p").unwrap(), vec![(1080, 1080)]);
    assert_eq!(
        parse_ports(&json!("1000-1010, 2000"), "p").unwrap(),
        vec![(1000, 1010), (2000, 2000)]
    );
    assert!(parse_ports(&json!("10-5"), "p").is_err());
    assert!(parse_ports(&json!("x"), "p").is_err());
    assert!(parse_ports(&json!(0), "p").is_err());
}

fn load(v: Value) -> Result<Config, ConfigError> {
    Config::from_value(&v, &Diagnostics::default())
}

#[test]
fn unsupported_things_name_their_path() {
    let e = load(json!({"inbounds": [{"port": 1, "protocol": "dokodemo-door", "settings": {"address": "1.1.1.1", "port": 53},
        "streamSettings": {"network": "quic"}}]}))
    .err()
    .unwrap();
    assert_eq!(
        e.to_string(),
        "inbounds[0].streamSettings.network: \"quic\" is not supported"
    );
    let e = load(json!({"outbounds": [{"protocol": "wat"}]}))
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "outbounds[0].protocol: unknown protocol \"wat\""
    );
    // A rule naming no outbound is a warning (Xray starts and closes what it matches).
    assert!(
        load(json!({"outbounds": [{"protocol": "freedom", "tag": "d"}],
        "routing": {"rules": [{"inboundTag": ["x"], "outboundTag": "nope"}]}}))
        .is_ok()
    );
}

#[test]
fn unknown_fields_warn_with_path() {
    let d = Diagnostics::default();
    let v = json!({"outbounds": [{"protocol": "freedom", "bogus": 1}]});
    Config::from_value(&v, &d).unwrap();
    assert!(d
        .take()
        .contains(&"outbounds[0].bogus: unknown field, ignored".to_string()));
}

#[test]
fn xray_current_spellings_are_accepted() {
    let d = Diagnostics::default();
    let v = json!({
        "inbounds": [
            {"tag": "t", "port": 1, "protocol": "tunnel",
             "settings": {"rewriteAddress": "127.0.0.1", "rewritePort": 2, "allowedNetwork": "tcp,udp"}},
            {"tag": "v", "port": 3, "protocol": "vmess",
             "settings": {"users": [{"id": "27848739-7e62-4138-9fd3-098a63964b6b", "email": "a@b"}]}}],
        "outbounds": [{"protocol": "freedom", "settings": {"targetStrategy": "UseIPv4"}}]});
    let c = Config::from_value(&v, &d).unwrap();
    assert_eq!(d.take(), Vec::<String>::new());
    let users = c.inbounds[1].handler.users().unwrap().list_users();
    assert_eq!(&*users[0].email, "a@b");
    let v = json!({"outbounds": [{"protocol": "freedom", "targetStrategy": "UseIP"}]});
    assert_eq!(load(v).err().unwrap().path, "outbounds[0].targetStrategy");
    assert!(
        load(json!({"outbounds": [{"protocol": "freedom", "targetStrategy": "AsIs"}]})).is_ok()
    );
    let v =
        json!({"outbounds": [{"protocol": "freedom", "settings": {"targetStrategy": "Sideways"}}]});
    assert_eq!(
        load(v).err().unwrap().path,
        "outbounds[0].settings.targetStrategy"
    );
}

#[test]
fn api_object_names_its_errors() {
    let d = Diagnostics::default();
    let v = json!({"api": {"tag": "api", "listen": "127.0.0.1:10085",
                           "services": ["handlerservice", "StatsService", "ObservatoryService"]}});
    let c = Config::from_value(&v, &d).unwrap();
    let api = c.api.expect("api");
    assert_eq!(
        api.services,
        [
            crate::app::api::Service::Handler,
            crate::app::api::Service::Stats
        ]
    );
    assert!(
        d.take().iter().any(|w| w.contains("api.services[2]")),
        "an unknown service warns with its path"
    );
    assert_eq!(
        load(json!({"api": {"services": []}})).err().unwrap().path,
        "api.tag"
    );
    assert_eq!(
        load(json!({"api": {"tag": "api", "listen": "nowhere"}}))
            .err()
            .unwrap()
            .path,
        "api.listen"
    );
    let unix = load(json!({"api": {"tag": "api", "listen": "@ferry-api"}})).unwrap();
    assert!(matches!(
        unix.api.unwrap().listen,
        Some(crate::app::api::ApiListen::Unix(_))
    ));
}

#[test]
fn log_metrics_and_api_as_panels_write_them() {
    let d = Diagnostics::default();
    let v = json!({
        "log": {"access": "none", "dnsLog": false, "error": "", "loglevel": "warning", "maskAddress": ""},
        "api": {"tag": "api", "services": ["HandlerService", "StatsService"]},
        "metrics": {"tag": "metrics_out"},
        "stats": {},
        "outbounds": [{"protocol": "freedom", "tag": "direct"}],
        "routing": {"rules": [{"inboundTag": ["api"], "outboundTag": "api"},
                              {"inboundTag": ["m"], "outboundTag": "metrics_out"}]}});
    let c = Config::from_value(&v, &d).unwrap();
    let tags: Vec<_> = c.outbounds.iter().map(|o| o.tag.as_str()).collect();
    assert_eq!(tags, ["direct", "metrics_out", "api"]);
    assert_eq!(c.metrics, None);
    let half = load(json!({"log": {"maskAddress": "half"}}))
        .unwrap()
        .log
        .mask;
    assert_eq!(half, Some(crate::app::mask::Mask { v4: 16, v6: 32 }));
    assert_eq!(
        load(json!({"log": {"maskAddress": "/12"}}))
            .err()
            .unwrap()
            .path,
        "log.maskAddress"
    );
    assert_eq!(load(json!({"metrics": {}})).err().unwrap().path, "metrics");
    let v = json!({"metrics": {"tag": "direct"}, "outbounds": [{"protocol": "freedom", "tag": "direct"}]});
    assert_eq!(load(v).err().unwrap().path, "metrics.tag");
}

/// VLESS Reverse and the legacy `reverse` object: what they build, and Xray's refusals with
/// their paths.
#[test]
fn reverse_settings_build_and_refuse_as_xray() {
    let id = "ac04551d-6ebf-4685-86e2-17c12491f7f4";
    let c = load(json!({
        "reverse": {"bridges": [{"tag": "b", "domain": "r.internal"}],
                    "portals": [{"tag": "p", "domain": "r.internal"}]},
        "inbounds": [{"port": 1, "protocol": "vless", "settings": {"decryption": "none",
            "clients": [{"id": id, "reverse": {"tag": "r-out"}}]}}],
        "outbounds": [{"protocol": "freedom", "tag": "direct"},
            {"protocol": "vless", "tag": "up", "settings": {"address": "127.0.0.1", "port": 2,
             "id": id, "encryption": "none",
             "reverse": {"tag": "r-in", "sniffing": {"enabled": true, "destOverride": ["tls"]}}}}],
        "routing": {"rules": [{"inboundTag": ["x"], "outboundTag": "r-out"}]}
    }))
    .unwrap();
    assert_eq!(c.bridges.len(), 1);
    assert_eq!(&*c.bridges[0].tag, "b");
    let portal = c.outbounds.iter().find(|o| o.tag == "p").unwrap();
    assert_eq!(portal.protocol, "reverse");
    let up = c.outbounds.iter().find(|o| o.tag == "up").unwrap();
    match &up.bridge.as_ref().unwrap().via {
        crate::proxy::reverse::Via::Vless { sniffing, .. } => assert!(sniffing.is_some()),
        _ => panic!("not a VLESS bridge"),
    }
    let cases = [
        (json!({"reverse": {"bridges": [{"tag": "", "domain": "d"}]}}),
            "reverse.bridges[0].tag: bridge tag is empty"),
        (json!({"reverse": {"portals": [{"tag": "p"}]}}),
            "reverse.portals[0].domain: portal domain is empty"),
        (json!({"reverse": {"portals": [{"tag": "direct", "domain": "d"}]},
                "outbounds": [{"protocol": "freedom", "tag": "direct"}]}),
            "reverse.portals[0].tag: outbound tag \"direct\" is already taken"),
        (json!({"inbounds": [{"port": 1, "protocol": "vless", "settings": {"decryption": "none",
            "clients": [{"id": id, "reverse": {"tag": ""}}]}}]}),
            "inbounds[0].settings.clients[0].reverse.tag: VLESS clients: \"tag\" can't be empty for \"reverse\""),
        (json!({"inbounds": [{"port": 1, "protocol": "vless", "settings": {"decryption": "none",
            "clients": [{"id": id, "reverse": {"tag": "t", "sniffing": {}}}]}}]}),
            "inbounds[0].settings.clients[0].reverse.sniffing: VLESS clients: inbound's \"reverse\" can't have \"sniffing\""),
        (json!({"outbounds": [{"protocol": "vless", "settings": {"vnext": [{"address": "a", "port": 1,
            "users": [{"id": id, "encryption": "none", "reverse": {"tag": "t"}}]}]}}]}),
            "outbounds[0].settings.vnext[0].users[0].reverse: VLESS users: please use simplified outbound's config style to use \"reverse\""),
        (json!({"outbounds": [{"protocol": "vless", "settings": {"address": "a", "port": 1,
            "id": id, "encryption": "none", "reverse": {}}}]}),
            "outbounds[0].settings.reverse.tag: VLESS reverse: \"tag\" can't be empty"),
    ];
    for (v, want) in cases {
        let e = load(v).err().unwrap();
        assert_eq!(e.to_string(), want);
    }
    // A rule naming a portal user's tag is not warned about.
    let d = Diagnostics::default();
    Config::from_value(
        &json!({"inbounds": [{"port": 1, "protocol": "vless", "settings": {"decryption": "none",
            "clients": [{"id": id, "reverse": {"tag": "r-out"}}]}}],
            "routing": {"rules": [{"inboundTag": ["x"], "outboundTag": "r-out"}]}}),
        &d,
    )
    .unwrap();
    assert!(
        d.take().iter().all(|w| !w.to_string().contains("r-out")),
        "warned"
    );
}
