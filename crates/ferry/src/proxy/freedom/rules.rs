//! Freedom's `finalRules` and the default rule behind them: which final (resolved) destinations
//! a session may reach. As in Xray v26.5.3+: the user's rules in order, the first match decides;
//! when none matches, sessions from the inbounds proxy users come through (VLESS, VMess, Trojan,
//! Shadowsocks, ShadowsocksR, Hysteria, WireGuard) may not reach the private ranges below, and
//! everything else goes. Ferry adds one rule of its own: those sessions never reach a socket this
//! process listens on (the API, metrics, another inbound), whatever address names it, unless a
//! user rule that names addresses or ports allows it. A blocked TCP session is not dialed; its
//! client is drained for the rule's `blockDelay` (by default a random 30-90 s), then closed.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::common::addr::parse_prefix as parse_cidr;
use crate::common::{own, Destination, Network};
use crate::config::reader::{int32_range, ConfigError, Obj, Result};

/// One of freedom's `finalRules`: when every condition it has matches the final destination,
/// its action decides.
#[derive(Clone, Debug)]
pub struct FinalRule {
    pub allow: bool,
    pub networks: Option<Vec<Network>>,
    pub ports: Option<Vec<(u16, u16)>>,
    pub ips: Option<Vec<(IpAddr, u8)>>,
    /// `blockDelay` in seconds (`None`: the default 30-90 s).
    pub block_delay: Option<(u32, u32)>,
}

/// `geoip:private`: the ranges of Xray's private list (RFC 1918, loopback, link-local, CGNAT,
/// multicast, unspecified and the reserved blocks, and their IPv6 kin).
const PRIVATE: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/3",
    "::/127",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// Whether sessions of an inbound speaking `protocol` fall under the default rule (the
/// protocols the table marks `guarded`: Xray's list, ShadowsocksR with Shadowsocks).
pub fn guarded(protocol: &str) -> DefaultRule {
    if protocol == crate::proxy::reverse::BRIDGE_PROTOCOL {
        DefaultRule::All
    } else if crate::proxy::table::guarded(protocol) {
        DefaultRule::Private
    } else {
        DefaultRule::Open
    }
}

/// What freedom refuses when no `finalRules` entry matches (Xray v26.5.3's default rule per
/// inbound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultRule {
    /// Nothing (SOCKS, HTTP, dokodemo-door, TUN, a chain's hop).
    Open,
    /// The private ranges and this server's own listeners (proxy users' inbounds).
    Private,
    /// Everything (the bridge side of VLESS Reverse: only what a `finalRules` allow opens).
    All,
}

fn in_cidr(ip: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    match (ip.to_canonical(), net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

/// Whether `ip` is in Xray's private list (parsed once: UDP checks every datagram).
pub fn is_private(ip: IpAddr) -> bool {
    static NETS: std::sync::LazyLock<Vec<(IpAddr, u8)>> =
        std::sync::LazyLock::new(|| PRIVATE.iter().filter_map(|c| parse_cidr(c)).collect());
    NETS.iter().any(|c| in_cidr(ip, *c))
}

impl FinalRule {
    pub fn parse(r: &Obj<'_>) -> Result<FinalRule> {
        let allow = match r.req_str("action")?.to_ascii_lowercase().as_str() {
            "allow" => true,
            "block" => false,
            other => {
                return Err(ConfigError::new(
                    r.key_path("action"),
                    format!("unknown action {other:?} (allow or block)"),
                ))
            }
        };
        let networks = match r.str_list("network")? {
            None => None,
            Some(list) => {
                let mut v = Vec::new();
                for n in list.iter().flat_map(|n| n.split(',')).map(str::trim) {
                    v.push(match n.to_ascii_lowercase().as_str() {
                        "tcp" => Network::Tcp,
                        "udp" => Network::Udp,
                        other => {
                            return Err(ConfigError::new(
                                r.key_path("network"),
                                format!("unknown network {other:?}"),
                            ))
                        }
                    });
                }
                Some(v)
            }
        };
        let ports = match r.get("port") {
            Some((p, v)) => Some(crate::config::parse_ports(v, &p)?),
            None => None,
        };
        let ips = match r.str_list("ip")? {
            None => None,
            Some(list) => {
                let mut v = Vec::new();
                for s in list {
                    if s.eq_ignore_ascii_case("geoip:private") {
                        v.extend(PRIVATE.iter().filter_map(|c| parse_cidr(c)));
                        continue;
                    }
                    v.push(parse_cidr(&s).ok_or_else(|| {
                        ConfigError::new(
                            r.key_path("ip"),
                            format!("{s:?} is not an IP or CIDR (geoip: lists other than private are not supported yet)"),
                        )
                    })?);
                }
                Some(v)
            }
        };
        let block_delay = match r.get("blockDelay") {
            None => None,
            Some((p, v)) => {
                let (a, b) = int32_range(v, &p)?;
                if a < 0 {
                    return Err(ConfigError::new(p, "a delay is not negative"));
                }
                Some((a as u32, b as u32))
            }
        };
        Ok(FinalRule {
            allow,
            networks,
            ports,
            ips,
            block_delay,
        })
    }

    fn matches(&self, network: Network, addr: SocketAddr) -> bool {
        self.networks.as_ref().is_none_or(|n| n.contains(&network))
            && self
                .ports
                .as_ref()
                .is_none_or(|p| p.iter().any(|(a, b)| (*a..=*b).contains(&addr.port())))
            && self
                .ips
                .as_ref()
                .is_none_or(|c| c.iter().any(|c| in_cidr(addr.ip(), *c)))
    }

    /// An allow that names the addresses or ports it lets through (what opens one of this
    /// process's own listeners to a proxy user).
    fn targeted(&self) -> bool {
        self.ips.is_some() || self.ports.is_some()
    }
}

/// Why a destination was refused, and how long the client is held before it is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub addr: SocketAddr,
    pub delay: Duration,
    pub why: &'static str,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "blocked target {} ({})", self.addr, self.why)
    }
}

impl std::error::Error for Blocked {}

impl Blocked {
    /// As an error a dial returns (the dispatcher finds it with [`Blocked::of`]).
    pub fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::PermissionDenied, self)
    }

    /// The refusal inside a dial error, if it is one.
    pub fn of(e: &io::Error) -> Option<&Blocked> {
        e.get_ref().and_then(|e| e.downcast_ref::<Blocked>())
    }
}

/// The rules one session is held to: the outbound's `finalRules`, and whether the default rule
/// applies (the session came in through a proxy protocol).
#[derive(Clone, Copy)]
pub struct Guard<'a> {
    pub rules: &'a [FinalRule],
    pub default_rule: DefaultRule,
}

impl Guard<'_> {
    /// `Ok` when `addr` may be reached over `network`, the refusal otherwise.
    pub fn check(&self, network: Network, addr: SocketAddr) -> std::result::Result<(), Blocked> {
        let matched = self.rules.iter().find(|r| r.matches(network, addr));
        let block = |delay: Option<(u32, u32)>, why| {
            Err(Blocked {
                addr,
                delay: pick_delay(delay),
                why,
            })
        };
        if self.default_rule != DefaultRule::Open
            && !matched.is_some_and(|r| r.allow && r.targeted())
            && own::is_own(network, addr)
        {
            return block(None, "one of this server's own listeners");
        }
        match matched {
            Some(r) if r.allow => Ok(()),
            Some(r) => block(r.block_delay, "finalRules"),
            None if self.default_rule == DefaultRule::All => block(
                None,
                "a session through a VLESS Reverse bridge; a finalRules allow opens it",
            ),
            None if self.default_rule == DefaultRule::Private && is_private(addr.ip()) => {
                block(None, "a private address; a finalRules allow opens it")
            }
            None => Ok(()),
        }
    }
}

/// A delay in `[a, b]` seconds, or Xray's default 30-90 s.
fn pick_delay(range: Option<(u32, u32)>) -> Duration {
    let (a, b) = range.unwrap_or((30, 90));
    if b <= a {
        return Duration::from_secs(a.into());
    }
    let mut r = [0u8; 4];
    crate::common::rand::fill(&mut r);
    let span = u64::from(b - a) * 1000;
    Duration::from_millis(u64::from(a) * 1000 + u64::from(u32::from_le_bytes(r)) % (span + 1))
}

/// For logs: what the session asked for and where that led.
pub fn describe(dest: &Destination, b: &Blocked) -> String {
    if dest.socket_addr() == Some(b.addr) {
        b.to_string()
    } else {
        format!("{dest}: {b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> FinalRule {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let diag = crate::config::reader::Diagnostics::default();
        let o = Obj::new(&v, "finalRules[0]", &diag).unwrap();
        FinalRule::parse(&o).unwrap()
    }

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_default_rule_blocks_private_destinations_of_proxy_users_only() {
        let proxy = Guard {
            rules: &[],
            default_rule: DefaultRule::Private,
        };
        let socks = Guard {
            rules: &[],
            default_rule: DefaultRule::Open,
        };
        for d in [
            "127.0.0.1:80",
            "[::1]:80",
            "10.1.2.3:80",
            "172.20.0.1:80",
            "192.168.1.1:80",
            "169.254.169.254:80",
            "100.64.0.1:80",
            "0.0.0.0:80",
            "224.0.0.1:80",
            "[fd00::1]:80",
            "[fe80::1]:80",
            "[::ffff:127.0.0.1]:80",
            "[::]:80",
        ] {
            assert!(proxy.check(Network::Tcp, a(d)).is_err(), "{d}");
            assert!(proxy.check(Network::Udp, a(d)).is_err(), "{d}");
            assert!(socks.check(Network::Tcp, a(d)).is_ok(), "{d}");
        }
        for d in ["1.1.1.1:443", "[2606:4700::1111]:443", "100.128.0.1:80"] {
            assert!(proxy.check(Network::Tcp, a(d)).is_ok(), "{d}");
        }
        for p in ["vless", "shadowsocks", "shadowsocksr"] {
            assert_eq!(guarded(p), DefaultRule::Private);
        }
        for p in ["socks", "http", "dokodemo-door"] {
            assert_eq!(guarded(p), DefaultRule::Open);
        }
        assert_eq!(guarded("vless-reverse"), DefaultRule::All);
        let all = Guard {
            rules: &[rule(r#"{"action": "allow", "ip": ["127.0.0.1"]}"#)],
            default_rule: DefaultRule::All,
        };
        assert!(all
            .check(Network::Tcp, "1.1.1.1:443".parse().unwrap())
            .is_err());
        assert!(all
            .check(Network::Tcp, "127.0.0.1:80".parse().unwrap())
            .is_ok());
    }

    #[test]
    fn user_rules_come_first_and_name_their_delay() {
        let rules = [
            rule(r#"{"action":"allow","ip":["127.0.0.0/8"],"port":"1-1000"}"#),
            rule(r#"{"action":"block","network":"udp","blockDelay":"2-3"}"#),
        ];
        let g = Guard {
            rules: &rules,
            default_rule: DefaultRule::Private,
        };
        assert!(g.check(Network::Tcp, a("127.0.0.1:80")).is_ok());
        // Past the allow's ports the default rule blocks, with the default delay.
        let b = g.check(Network::Tcp, a("127.0.0.1:8080")).unwrap_err();
        assert!(b.delay >= Duration::from_secs(30) && b.delay <= Duration::from_secs(90));
        let b = g.check(Network::Udp, a("1.1.1.1:53")).unwrap_err();
        assert!(b.delay >= Duration::from_secs(2) && b.delay <= Duration::from_secs(3));
        assert_eq!(
            rule(r#"{"action":"block","blockDelay":0}"#).block_delay,
            Some((0, 0))
        );
    }

    #[test]
    fn own_listeners_stay_shut_unless_a_targeted_allow_opens_them() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let _own = own::register(Network::Tcp, at);
        let open = [rule(r#"{"action":"allow"}"#)];
        let g = Guard {
            rules: &open,
            default_rule: DefaultRule::Private,
        };
        // An allow for everything lets private addresses through, not this process's sockets.
        assert!(g.check(Network::Tcp, a("127.0.0.1:1")).is_ok());
        assert!(g.check(Network::Tcp, at).is_err());
        let targeted = [rule(r#"{"action":"allow","ip":["127.0.0.0/8"]}"#)];
        let g = Guard {
            rules: &targeted,
            default_rule: DefaultRule::Private,
        };
        assert!(g.check(Network::Tcp, at).is_ok());
        // Sessions from SOCKS and the like are not held to it.
        let g = Guard {
            rules: &[],
            default_rule: DefaultRule::Open,
        };
        assert!(g.check(Network::Tcp, at).is_ok());
    }
}
