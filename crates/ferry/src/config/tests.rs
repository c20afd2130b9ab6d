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
        "streamSettings": {"network": "kcp"}}]}))
    .err()
    .unwrap();
    assert_eq!(
        e.to_string(),
        "inbounds[0].streamSettings.network: \"kcp\" is not supported"
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
