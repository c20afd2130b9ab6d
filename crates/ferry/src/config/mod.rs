//! Xray-shaped JSON configuration: reading, validation with JSON-path errors, typed results.
//!
//! Every protocol reads its own `settings` through [`reader::Obj`]; this module reads the
//! frame around them (`inbounds`, `outbounds`, `routing`, `policy`, `stats`), and
//! [`services`] reads `log`, `metrics` and `api`.

pub mod api;
pub mod headers;
/// The JSON reader and comment stripper (in `common`: every layer parses its own settings).
pub use crate::common::{json, reader};
pub mod reality;
pub mod services;
pub mod stream;
pub mod tls;
pub mod xhttp;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use serde_json::Value;

pub use reader::{ConfigError, Diagnostics, Obj};

use crate::app::log::LogConfig;
use crate::app::policy::Policy;
use crate::app::router::Router;
use crate::app::stats::Stats;
use crate::proxy::{self, InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::registry::{CounterSource, Outbounds};
use crate::transport::listener::UnixPath;
use stream::{ParseStream, StreamSettings};

/// Where an inbound listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// An IP address and one or more port ranges.
    Ip(IpAddr, Vec<(u16, u16)>),
    /// A unix socket: a path, `@abstract` or `@@padded` (the port is not used).
    Unix(UnixPath),
}

/// One inbound, ready to bind.
pub struct Inbound {
    pub tag: String,
    pub listen: Listen,
    pub protocol: String,
    pub handler: Arc<dyn InboundHandler>,
    /// Socket options and the acceptor chain's layers.
    pub stream: StreamSettings,
    /// The inbound's JSON object as configured.
    pub json: Value,
    /// `sniffing`, when enabled.
    pub sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
}

/// One outbound, ready to dial.
pub struct Outbound {
    pub tag: String,
    pub protocol: String,
    pub handler: Arc<dyn OutboundHandler>,
}

/// A whole, validated configuration.
pub struct Config {
    pub log: LogConfig,
    pub inbounds: Vec<Inbound>,
    pub outbounds: Vec<Outbound>,
    pub router: Router,
    pub policy: Policy,
    /// `Some` when the `stats` object is present: the counters every layer adds to.
    pub stats: Option<Arc<Stats>>,
    pub metrics: Option<SocketAddr>,
    /// The outbound registry chained outbounds dial through (filled when the instance starts).
    pub registry: Arc<Outbounds>,
    /// Resolves the counters of inbounds, outbounds and users.
    pub counters: CounterSource,
    /// The gRPC API (`api`), when configured.
    pub api: Option<api::ApiConfig>,
}

/// Merges several config files the way Xray does (untitled sources; see [`merge_named`]).
pub fn merge(docs: Vec<Value>) -> Value {
    merge_named(docs.into_iter().map(|d| (String::new(), d)).collect())
}

/// The `tag` of an inbound/outbound item (any key case); missing = "".
fn item_tag(v: &Value) -> &str {
    v.as_object()
        .and_then(|m| m.iter().find(|(k, _)| k.eq_ignore_ascii_case("tag")))
        .and_then(|(_, t)| t.as_str())
        .unwrap_or("")
}

/// Merges several config files as Xray does: the first file is taken as it is (so duplicate
/// tags inside one file stay and are reported); each later file then overrides it: an inbound
/// or outbound with the tag of an existing one replaces it, other inbounds are appended, other
/// outbounds are put first (they become the default) unless the file name contains "tail";
/// any other top-level object replaces the earlier one.
pub fn merge_named(docs: Vec<(String, Value)>) -> Value {
    let mut it = docs.into_iter();
    let mut out = match it.next() {
        Some((_, Value::Object(m))) => m,
        Some((_, other)) => return other,
        None => serde_json::Map::new(),
    };
    for (name, doc) in it {
        let Value::Object(m) = doc else { continue };
        let tail = name.to_ascii_lowercase().contains("tail");
        for (k, v) in m {
            let key = k.to_ascii_lowercase();
            let existing = out.keys().find(|e| e.eq_ignore_ascii_case(&k)).cloned();
            if let ("inbounds" | "outbounds", Value::Array(src), Some(ek)) =
                (key.as_str(), &v, &existing)
            {
                if let Some(Value::Array(dst)) = out.get_mut(ek) {
                    let mut prepend = Vec::new();
                    for item in src {
                        let tag = item_tag(item);
                        match dst.iter().position(|d| item_tag(d) == tag) {
                            Some(i) => {
                                if let Some(slot) = dst.get_mut(i) {
                                    *slot = item.clone();
                                }
                            }
                            None if key == "outbounds" && !tail => prepend.push(item.clone()),
                            None => dst.push(item.clone()),
                        }
                    }
                    if !prepend.is_empty() {
                        dst.splice(0..0, prepend);
                    }
                    continue;
                }
            }
            if let Some(ek) = existing {
                out.remove(&ek);
            }
            out.insert(k, v);
        }
    }
    Value::Object(out)
}

pub use crate::matchers::port::parse_ports;

/// Reads `listen`: an IP address (default 0.0.0.0), or a unix socket; `None` for an IP
/// listener means the caller reads the ports.
fn parse_listen(o: &Obj<'_>) -> reader::Result<Result<IpAddr, UnixPath>> {
    let Some(s) = o.str("listen")? else {
        return Ok(Ok(IpAddr::from([0, 0, 0, 0])));
    };
    let s = match s.strip_prefix("env:") {
        Some(n) => std::env::var(n).map_err(|_| {
            ConfigError::new(
                o.key_path("listen"),
                format!("environment variable {n} is not set"),
            )
        })?,
        None => s,
    };
    if s.eq_ignore_ascii_case("localhost") {
        return Ok(Ok(IpAddr::from([127, 0, 0, 1])));
    }
    if let Some(u) = UnixPath::parse(&s) {
        if matches!(&u, UnixPath::Abstract(n) | UnixPath::Padded(n) if n.is_empty()) {
            return Err(ConfigError::new(
                o.key_path("listen"),
                "an abstract socket needs a name",
            ));
        }
        return Ok(Err(u));
    }
    s.parse().map(Ok).map_err(|_| {
        ConfigError::new(
            o.key_path("listen"),
            format!("{s:?} is not an IP address or a unix socket path"),
        )
    })
}

/// Checks `proxySettings` / `dialerProxy` chains: each names an existing outbound, and no
/// chain loops back to where it started.
fn check_chains(chains: &[(String, String, String)], tags: &HashSet<String>) -> reader::Result<()> {
    let via: std::collections::HashMap<&str, &str> = chains
        .iter()
        .map(|(_, from, to)| (from.as_str(), to.as_str()))
        .collect();
    for (path, from, to) in chains {
        if !tags.contains(to) {
            return Err(ConfigError::new(
                path.as_str(),
                format!("dials through outbound {to:?}, which does not exist"),
            ));
        }
        let mut seen = vec![from.as_str()];
        let mut cur = to.as_str();
        while let Some(next) = via.get(cur) {
            seen.push(cur);
            if seen.contains(next) {
                return Err(ConfigError::new(
                    path.as_str(),
                    format!("dialer chain loops: {} -> {next}", seen.join(" -> ")),
                ));
            }
            cur = next;
        }
    }
    Ok(())
}

fn protocol_name(o: &Obj<'_>) -> reader::Result<String> {
    o.req_str("protocol")
}

fn unsupported_protocol(o: &Obj<'_>, name: &str, kind: &str) -> ConfigError {
    let msg = if proxy::KNOWN_ELSEWHERE
        .iter()
        .any(|k| k.eq_ignore_ascii_case(name))
    {
        format!("{name:?} is not supported yet as an {kind}")
    } else {
        format!("unknown protocol {name:?}")
    };
    ConfigError::new(o.key_path("protocol"), msg)
}

/// Reads one inbound object (its tag already read and checked by the caller).
pub fn parse_inbound(
    o: &Obj<'_>,
    tag: String,
    counters: &CounterSource,
    diag: &Diagnostics,
) -> reader::Result<Inbound> {
    let name = protocol_name(o)?;
    let builder =
        proxy::inbound_builder(&name).ok_or_else(|| unsupported_protocol(o, &name, "inbound"))?;
    let listen = match parse_listen(o)? {
        Ok(ip) => {
            let (pp, pv) = o
                .get("port")
                .ok_or_else(|| ConfigError::new(o.key_path("port"), "is required"))?;
            Listen::Ip(ip, parse_ports(pv, &pp)?)
        }
        Err(unix) => {
            // Xray ignores the port of a unix listener.
            o.ignore(&["port"]);
            Listen::Unix(unix)
        }
    };
    let ss = StreamSettings::parse(o, false)?;
    let mut sniffing = None;
    if let Some(s) = o.obj("sniffing")? {
        sniffing = crate::app::sniff::Sniffing::parse(&s)?.map(Arc::new);
        s.finish();
    }
    o.ignore(&["allocate"]);
    let settings_v = o.get("settings").map(|(_, v)| v).unwrap_or(&Value::Null);
    let settings = Obj::new(settings_v, o.key_path("settings"), diag)?;
    let handler = builder(
        &settings,
        &InboundBuild {
            tag: &tag,
            diag,
            counters,
            stream: &ss,
        },
    )?;
    settings.finish();
    Ok(Inbound {
        sniffing,
        tag,
        listen,
        protocol: name,
        handler,
        stream: ss,
        json: o.value(),
    })
}

/// Reads one outbound object (its tag already read and checked by the caller). Returns the
/// outbound and the tag of the outbound it dials through, if any (for the chain check).
pub fn parse_outbound(
    o: &Obj<'_>,
    tag: String,
    registry: &Arc<Outbounds>,
    dns: &Arc<crate::app::dns::Dns>,
    diag: &Diagnostics,
) -> reader::Result<(Outbound, Option<String>)> {
    let name = protocol_name(o)?;
    let builder =
        proxy::outbound_builder(&name).ok_or_else(|| unsupported_protocol(o, &name, "outbound"))?;
    let ss = StreamSettings::parse(o, true)?;
    let mux = match o.obj("mux")? {
        Some(m) => {
            let s = proxy::mux::MuxSettings::parse(&m)?;
            if s.enabled && !proxy::table::muxable(&name) {
                return Err(ConfigError::new(
                    m.key_path("enabled"),
                    format!("mux on a {name} outbound is not supported (vless and vmess have it)"),
                ));
            }
            m.finish();
            s.enabled.then_some(s)
        }
        None => None,
    };
    if let Some(t) = o.str("targetStrategy")? {
        if !t.is_empty() && !t.eq_ignore_ascii_case("asis") {
            return Err(ConfigError::new(
                o.key_path("targetStrategy"),
                format!("{t:?} on the outbound is not supported yet (freedom's settings.domainStrategy is)"),
            ));
        }
    }
    let mut ss = ss;
    if let Some(p) = o.obj("proxySettings")? {
        let t = p
            .str("tag")?
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ConfigError::new(p.key_path("tag"), "is required"))?;
        p.ignore(&["transportLayer"]);
        p.finish();
        ss.dialer_proxy = Some(t);
    }
    let send_through = match o.str("sendThrough")? {
        Some(s) => Some(s.parse::<IpAddr>().map_err(|_| {
            ConfigError::new(
                o.key_path("sendThrough"),
                format!("{s:?} is not an IP address"),
            )
        })?),
        None => None,
    };
    ss.sockopt.bind = send_through;
    if let Some(via) = &ss.dialer_proxy {
        if *via == tag {
            return Err(ConfigError::new(
                o.path(),
                format!("outbound {tag:?} cannot dial through itself"),
            ));
        }
    }
    let chain = ss.dialer_proxy.clone();
    let via = ss.dialer_proxy.clone().map(|t| {
        Arc::new(crate::registry::OutboundRef {
            tag: t,
            table: registry.clone(),
        }) as Arc<dyn crate::transport::Dialer>
    });
    let dialer = ss.dialer(via);
    let settings_v = o.get("settings").map(|(_, v)| v).unwrap_or(&Value::Null);
    let settings = Obj::new(settings_v, o.key_path("settings"), diag)?;
    let handler = builder(
        &settings,
        &OutboundBuild {
            tag: &tag,
            diag,
            dialer,
            sockopt: ss.sockopt.clone(),
            stream: &ss,
            dns: dns.clone(),
        },
    )?;
    settings.finish();
    let handler = match mux {
        Some(m) => Arc::new(proxy::mux::client::Muxed::new(handler, &m)),
        None => handler,
    };
    Ok((
        Outbound {
            tag,
            protocol: name,
            handler,
        },
        chain,
    ))
}

/// What a reloaded config takes over from the running one, so counters and chained outbounds
/// keep working across the reload.
#[derive(Clone, Default)]
pub struct Reuse {
    /// The running stats: counters keep their values when the new config has `stats` too.
    pub stats: Option<Arc<Stats>>,
    /// The running outbound registry, which chained outbounds and the dispatcher dial through.
    pub registry: Option<Arc<Outbounds>>,
}

impl Config {
    /// Reads a merged JSON document into a config; warnings go to `diag`.
    pub fn from_value(v: &Value, diag: &Diagnostics) -> reader::Result<Config> {
        Config::from_value_reusing(v, diag, &Reuse::default())
    }

    /// [`Config::from_value`] for a reload: the stats and the outbound registry are the
    /// running instance's (see [`Reuse`]).
    pub fn from_value_reusing(
        v: &Value,
        diag: &Diagnostics,
        reuse: &Reuse,
    ) -> reader::Result<Config> {
        let root = Obj::new(v, "", diag)?;
        let log = services::parse_log(&root, diag)?;
        let policy = match root.obj("policy")? {
            Some(p) => {
                let r = Policy::parse(&p)?;
                p.finish();
                r
            }
            None => Policy::default(),
        };
        let stats = match root.obj("stats")? {
            Some(s) => {
                s.finish();
                Some(reuse.stats.clone().unwrap_or_default())
            }
            None => None,
        };
        let counters = CounterSource {
            stats: stats.clone(),
            policy: policy.clone(),
        };
        let (metrics, api, special_outbounds) = services::parse_services(&root, &stats, diag)?;
        let fake = match root.get("fakedns") {
            Some((p, v)) => Some(crate::app::dns::fake::FakeDns::parse(v, &p, diag)?),
            None => None,
        };
        let dns = match root.obj("dns")? {
            Some(d) => {
                let dns = crate::app::dns::parse(&d, &crate::app::router::Assets::from_env())?;
                d.finish();
                Some(Arc::new(dns.with_fake(fake)))
            }
            // Pools without a `dns` object: sniffing can still map them (nothing hands them out).
            None => fake.map(|f| Arc::new(crate::app::dns::Dns::system().with_fake(Some(f)))),
        };
        // The dns outbound resolves with it, or with the system's resolver without one.
        let out_dns = dns
            .clone()
            .unwrap_or_else(|| Arc::new(crate::app::dns::Dns::system()));
        let mut outbounds = Vec::new();
        let mut tags = HashSet::new();
        // The registry chained outbounds dial through; the instance fills it.
        let registry = reuse.registry.clone().unwrap_or_default();
        // (path, outbound, the outbound it dials through)
        let mut chains: Vec<(String, String, String)> = Vec::new();
        for o in root.objs(&["outbounds"])? {
            let tag = o.str("tag")?.unwrap_or_default();
            if !tag.is_empty() && !tags.insert(tag.clone()) {
                return Err(ConfigError::new(
                    o.key_path("tag"),
                    format!("duplicate outbound tag {tag:?}"),
                ));
            }
            let (out, via) = parse_outbound(&o, tag, &registry, &out_dns, diag)?;
            if let Some(via) = via {
                chains.push((o.path().to_string(), out.tag.clone(), via));
            }
            o.finish();
            outbounds.push(out);
        }
        if outbounds.is_empty() {
            diag.warn(
                "outbounds",
                "no outbound configured; adding a default freedom outbound",
            );
            outbounds.push(Outbound {
                tag: String::new(),
                protocol: proxy::freedom::PROTOCOL.name().into(),
                handler: Arc::new(proxy::freedom::Freedom::default()),
            });
        }
        for (path, tag, protocol, handler) in special_outbounds {
            if !tags.insert(tag.clone()) {
                return Err(ConfigError::new(
                    path,
                    format!("outbound tag {tag:?} is already taken"),
                ));
            }
            outbounds.push(Outbound {
                tag,
                protocol: protocol.into(),
                handler,
            });
        }
        check_chains(&chains, &tags)?;

        let mut inbounds = Vec::new();
        let mut in_tags = HashSet::new();
        for o in root.objs(&["inbounds"])? {
            let tag = o.str("tag")?.unwrap_or_default();
            if !tag.is_empty() && !in_tags.insert(tag.clone()) {
                return Err(ConfigError::new(
                    o.key_path("tag"),
                    format!("duplicate inbound tag {tag:?}"),
                ));
            }
            inbounds.push(parse_inbound(&o, tag, &counters, diag)?);
            o.finish();
        }

        let router = match root.obj("routing")? {
            Some(r) => {
                let router = Router::parse(&r)?;
                r.finish();
                router
            }
            None => Router::default(),
        }
        .with_dns(dns);
        let mut observatory = None;
        for (k, burst) in [("observatory", false), ("burstObservatory", true)] {
            if let Some(o) = root.obj(k)? {
                if observatory.is_some() {
                    return Err(ConfigError::new(
                        o.path(),
                        "only one of observatory and burstObservatory is supported",
                    ));
                }
                let obs = if burst {
                    crate::app::observatory::Observatory::parse_burst(&o)?
                } else {
                    crate::app::observatory::Observatory::parse(&o)?
                };
                o.finish();
                observatory = Some(Arc::new(obs));
            }
        }
        let router = router.with_observatory(observatory)?;
        if let Some((rp, Value::Array(rules))) = root
            .get("routing")
            .and_then(|(p, v)| v.get("rules").map(|r| (p, r)))
        {
            for (i, rule) in router.rules.iter().enumerate() {
                if rule.balancer.is_none() && !tags.contains(&rule.outbound) {
                    let _ = rules;
                    return Err(ConfigError::new(
                        format!("{rp}.rules[{i}].outboundTag"),
                        format!("no outbound is tagged {:?}", rule.outbound),
                    ));
                }
            }
        }
        root.ignore(&["api", "transport", "reverse", "fakedns"]);
        // The legacy bridge/portal `reverse` (Xray v26.4.25 removed it): an empty object is
        // nothing; anything in it is a feature Ferry lacks.
        if let Some((p, v)) = root.get("reverse") {
            if v.as_object().is_some_and(|m| !m.is_empty()) {
                return Err(ConfigError::new(
                    p,
                    "the legacy reverse proxy (bridges/portals) is not supported yet",
                ));
            }
        }
        root.finish();
        Ok(Config {
            log,
            inbounds,
            outbounds,
            router,
            policy,
            stats,
            metrics,
            registry,
            counters,
            api,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outbound_tags(m: &Value) -> Vec<&str> {
        m["outbounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(item_tag)
            .collect()
    }

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

    #[test]
    fn merge_concatenates_and_replaces_by_tag() {
        let a = json!({"inbounds": [{"tag": "a", "port": 1}], "log": {"loglevel": "debug"}});
        let b = json!({"inbounds": [{"tag": "a", "port": 2}, {"tag": "b"}], "log": {"loglevel": "info"}});
        let m = merge(vec![a, b]);
        assert_eq!(m["inbounds"].as_array().unwrap().len(), 2);
        assert_eq!(m["inbounds"][0]["port"], 2);
        assert_eq!(m["log"]["loglevel"], "info");
    }

    #[test]
    fn merge_keeps_duplicates_of_the_first_file_and_prepends_outbounds() {
        let a = json!({"outbounds": [{"tag": "x"}, {"tag": "x"}]});
        let m = merge(vec![a.clone()]);
        assert_eq!(m["outbounds"].as_array().unwrap().len(), 2);
        let b = json!({"Outbounds": [{"tag": "y"}, {"Tag": "x", "protocol": "p"}]});
        let m = merge_named(vec![
            ("a.json".into(), a.clone()),
            ("b.json".into(), b.clone()),
        ]);
        let tags = outbound_tags(&m);
        assert_eq!(tags, ["y", "x", "x"]);
        assert_eq!(m["outbounds"][1]["protocol"], "p");
        let m = merge_named(vec![("a.json".into(), a), ("20_TAIL.json".into(), b)]);
        let tags = outbound_tags(&m);
        assert_eq!(tags, ["x", "x", "y"]);
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
        let e = load(json!({"outbounds": [{"protocol": "freedom", "tag": "d"}],
            "routing": {"rules": [{"inboundTag": ["x"], "outboundTag": "nope"}]}}))
        .err()
        .unwrap();
        assert_eq!(e.path, "routing.rules[0].outboundTag");
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
        let v = json!({"outbounds": [{"protocol": "freedom", "settings": {"targetStrategy": "Sideways"}}]});
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
}
