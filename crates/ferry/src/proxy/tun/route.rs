//! sing-box's `auto_route` for the TUN inbound (Xray v26.3.27 has none): routes into the
//! device in a table of its own (2022) and policy rules from priority 9000 that send the
//! machine's own traffic and what it forwards there, as sing-box's rules on Linux do, while
//! Ferry's own sockets (marked [`OWN_MARK`]) and the main table's specific routes (the LAN)
//! stay out. Everything it added is removed when the inbound stops; a rule a killed run left
//! behind is taken over.
//!
//! The rules, per family with an address on the device (P = `iproute2_rule_index`, T =
//! `iproute2_table_index`):
//! - P: `fwmark 0x2024 goto P+10` (Ferry's own sockets), `uidrange A-B goto P+10` (users
//!   left out by `exclude_uid`, or outside `include_uid`)
//! - P+1: `to <the device's subnet> lookup T`
//! - P+2: `lookup T suppress_prefixlength 0` (`route_address` prefixes win over the LAN)
//! - P+3: `not dport 53 lookup main suppress_prefixlength 0` (the main table's specific
//!   routes stay, except for DNS, which the TUN hijacks), `iif <tun> goto P+10`
//! - P+4, IPv4: `not iif lo lookup T` (what the machine forwards), `iif lo from 0.0.0.0/32
//!   lookup T` and `iif lo from <the device's subnet> lookup T` (its own sockets); IPv6,
//!   whose rules with a source match only lookups that have one: `iif lo from <the device's
//!   subnet> lookup T`, `iif lo from ::/1 goto P+10`, `iif lo from 8000::/1 goto P+10` (a
//!   socket bound elsewhere), `lookup T` (the rest: forwarded, and sockets without a source)
//! - P+10: nop
//!
//! A family without an address gets no rules, or with `strict_route` an `unreachable` rule at
//! P, so nothing of it leaves outside the tunnel.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::common::netlink::{Action, Route, Rtnl, Rule};
use crate::common::reader::{ConfigError, Obj, Result};

/// The mark Ferry's own sockets carry while `auto_route` is on (sing-box's output mark).
pub const OWN_MARK: u32 = 0x2024;
const MAIN_TABLE: u32 = 254;

/// `auto_route` and its scope, as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutoRoute {
    pub enabled: bool,
    pub strict: bool,
    pub table: u32,
    pub rule_index: u32,
    /// `route_address`: what goes into the device (everything when empty).
    pub include: Vec<(IpAddr, u8)>,
    /// `route_exclude_address`: left out of it.
    pub exclude: Vec<(IpAddr, u8)>,
    /// `include_uid`(`_range`): only these users' sockets (all when empty).
    pub include_uid: Vec<(u32, u32)>,
    /// `exclude_uid`(`_range`): never these users' sockets.
    pub exclude_uid: Vec<(u32, u32)>,
}

/// Keys of sing-box's that scope routes by interface or Android package: refused by name.
const NOT_YET: &[(&str, &str)] = &[
    ("include_interface", "includeInterface"),
    ("exclude_interface", "excludeInterface"),
    ("include_package", "includePackage"),
    ("exclude_package", "excludePackage"),
    ("include_android_user", "includeAndroidUser"),
    ("auto_redirect", "autoRedirect"),
];

fn prefixes(o: &Obj<'_>, names: &[&str]) -> Result<Vec<(IpAddr, u8)>> {
    let Some((path, _)) = o.get_alias(names) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, a) in o
        .str_list_alias(names)?
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        match crate::common::addr::parse_prefix(a) {
            Some((ip, len)) => out.push((mask(ip, len), len)),
            None => {
                return Err(ConfigError::new(
                    format!("{path}[{i}]"),
                    format!("{a:?} is not an address prefix (10.0.0.0/8, fd00::/8)"),
                ))
            }
        }
    }
    Ok(out)
}

fn uids(o: &Obj<'_>, list: &[&str], ranges: &[&str]) -> Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    if let Some((path, v)) = o.get_alias(list) {
        let bad = || ConfigError::new(path.clone(), "expected an array of user ids");
        for u in v.as_array().ok_or_else(bad)? {
            let n = u
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(bad)?;
            out.push((n, n));
        }
    }
    if let Some((path, _)) = o.get_alias(ranges) {
        for (i, r) in o
            .str_list_alias(ranges)?
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let parsed = r
                .split_once(':')
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
                .filter(|(a, b): &(u32, u32)| a <= b);
            match parsed {
                Some(p) => out.push(p),
                None => {
                    return Err(ConfigError::new(
                        format!("{path}[{i}]"),
                        format!("{r:?} is not a user id range (1000:1999)"),
                    ))
                }
            }
        }
    }
    Ok(out)
}

/// Reads the keys in sing-box's spelling or Xray's camel case (`auto_route`, `autoRoute`).
pub fn parse(o: &Obj<'_>) -> Result<AutoRoute> {
    for (a, b) in NOT_YET {
        if let Some((p, _)) = o.get_alias(&[a, b]) {
            return Err(ConfigError::new(
                p,
                "not supported yet by Ferry's tun inbound",
            ));
        }
    }
    let flag = |names: &[&str]| -> Result<bool> {
        match o.get_alias(names) {
            None => Ok(false),
            Some((_, serde_json::Value::Bool(b))) => Ok(*b),
            Some((p, _)) => Err(ConfigError::new(p, "expected a boolean")),
        }
    };
    let number = |names: &[&str], default: u32| -> Result<u32> {
        match o.get_alias(names) {
            None => Ok(default),
            Some((p, v)) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(0) | None => Err(ConfigError::new(p, "expected a number from 1 to 2^32-1")),
                Some(n) => Ok(n),
            },
        }
    };
    let r = AutoRoute {
        enabled: flag(&["auto_route", "autoRoute"])?,
        strict: flag(&["strict_route", "strictRoute"])?,
        table: number(&["iproute2_table_index", "iproute2TableIndex"], 2022)?,
        rule_index: number(&["iproute2_rule_index", "iproute2RuleIndex"], 9000)?,
        include: prefixes(o, &["route_address", "routeAddress"])?,
        exclude: prefixes(o, &["route_exclude_address", "routeExcludeAddress"])?,
        include_uid: uids(
            o,
            &["include_uid", "includeUid"],
            &["include_uid_range", "includeUidRange"],
        )?,
        exclude_uid: uids(
            o,
            &["exclude_uid", "excludeUid"],
            &["exclude_uid_range", "excludeUidRange"],
        )?,
    };
    if !r.enabled {
        for names in [
            ["strict_route", "strictRoute"],
            ["route_address", "routeAddress"],
        ] {
            if let Some((p, _)) = o.get_alias(&names) {
                if r.strict || !r.include.is_empty() {
                    return Err(ConfigError::new(p, "needs auto_route"));
                }
            }
        }
    }
    Ok(r)
}

fn bits(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

fn from_bits(v: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(v))
    } else {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    }
}

/// `ip` with the bits after `len` cleared.
pub fn mask(ip: IpAddr, len: u8) -> IpAddr {
    let (v, width) = bits(ip);
    let keep = u32::from(width.saturating_sub(len));
    let m = if keep >= 128 { 0 } else { !0u128 << keep };
    from_bits(
        v & m & (u128::MAX >> (128 - u32::from(width))),
        ip.is_ipv6(),
    )
}

fn covers(outer: (IpAddr, u8), inner: (IpAddr, u8)) -> bool {
    outer.0.is_ipv6() == inner.0.is_ipv6()
        && outer.1 <= inner.1
        && mask(inner.0, outer.1) == outer.0
}

/// The prefixes of `set` with every prefix of `minus` taken out (as few as cover the rest).
pub fn subtract(set: &[(IpAddr, u8)], minus: &[(IpAddr, u8)]) -> Vec<(IpAddr, u8)> {
    let mut out = Vec::new();
    let mut work: Vec<(IpAddr, u8)> = set.to_vec();
    while let Some(p) = work.pop() {
        if minus.iter().any(|m| covers(*m, p)) {
            continue;
        }
        if !minus.iter().any(|m| covers(p, *m)) {
            out.push(p);
            continue;
        }
        // Something inside it is excluded: split in two.
        let (v, width) = bits(p.0);
        let len = p.1 + 1;
        let half = 1u128 << (u32::from(width) - u32::from(len));
        work.push((p.0, len));
        work.push((from_bits(v | half, p.0.is_ipv6()), len));
    }
    out.sort();
    out
}

/// The routes and rules `auto_route` installs for a device with index `ifindex`, name `dev`
/// and addresses `addrs`.
pub fn plan(
    r: &AutoRoute,
    dev: &str,
    ifindex: u32,
    addrs: &[(IpAddr, u8)],
) -> (Vec<Route>, Vec<Rule>) {
    let (mut routes, mut rules) = (Vec::new(), Vec::new());
    for v6 in [false, true] {
        let any: IpAddr = if v6 {
            Ipv6Addr::UNSPECIFIED.into()
        } else {
            Ipv4Addr::UNSPECIFIED.into()
        };
        let own: Vec<(IpAddr, u8)> = addrs
            .iter()
            .filter(|(ip, _)| ip.is_ipv6() == v6)
            .map(|&(ip, len)| (mask(ip, len), len))
            .collect();
        let p = r.rule_index;
        let nop = p + 10;
        if own.is_empty() {
            if r.strict {
                rules.push(Rule::new(v6, p, Action::Unreachable));
            }
            continue;
        }
        let include: Vec<_> = r
            .include
            .iter()
            .filter(|(ip, _)| ip.is_ipv6() == v6)
            .copied()
            .collect();
        let include = if include.is_empty() {
            vec![(any, 0)]
        } else {
            include
        };
        for (dst, prefix) in subtract(&include, &r.exclude) {
            routes.push(Route {
                dst,
                prefix,
                table: r.table,
                oif: Some(ifindex),
            });
        }
        let mut mark = Rule::new(v6, p, Action::Goto(nop));
        mark.fwmark = Some((OWN_MARK, u32::MAX));
        rules.push(mark);
        for (lo, hi) in uid_skips(&r.include_uid, &r.exclude_uid) {
            let mut u = Rule::new(v6, p, Action::Goto(nop));
            u.uids = Some((lo, hi));
            rules.push(u);
        }
        for &to in &own {
            let mut t = Rule::new(v6, p + 1, Action::Lookup(r.table));
            t.to = Some(to);
            rules.push(t);
        }
        let mut t = Rule::new(v6, p + 2, Action::Lookup(r.table));
        t.suppress_prefixlength = Some(0);
        rules.push(t);
        let mut main = Rule::new(v6, p + 3, Action::Lookup(MAIN_TABLE));
        main.invert = true;
        main.dport = Some(53);
        main.suppress_prefixlength = Some(0);
        rules.push(main);
        let mut back = Rule::new(v6, p + 3, Action::Goto(nop));
        back.iif = Some(dev.to_string());
        rules.push(back);
        let from_lo = |from: (IpAddr, u8), action| {
            let mut l = Rule::new(v6, p + 4, action);
            l.iif = Some("lo".into());
            l.from = Some(from);
            l
        };
        if v6 {
            // An IPv6 rule with a source matches only a lookup that has one: a socket that
            // has none yet is caught by the last rule, one bound elsewhere leaves.
            for &from in &own {
                rules.push(from_lo(from, Action::Lookup(r.table)));
            }
            rules.push(from_lo(p6("::", 1), Action::Goto(nop)));
            rules.push(from_lo(p6("8000::", 1), Action::Goto(nop)));
            rules.push(Rule::new(v6, p + 4, Action::Lookup(r.table)));
        } else {
            let mut fwd = Rule::new(v6, p + 4, Action::Lookup(r.table));
            fwd.invert = true;
            fwd.iif = Some("lo".into());
            rules.push(fwd);
            for from in std::iter::once((any, 32)).chain(own.iter().copied()) {
                rules.push(from_lo(from, Action::Lookup(r.table)));
            }
        }
        rules.push(Rule::new(v6, nop, Action::Nop));
    }
    (routes, rules)
}

fn p6(ip: &str, len: u8) -> (IpAddr, u8) {
    (ip.parse().unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED)), len)
}

/// The uid ranges whose sockets stay out: `exclude`, and everything outside `include`.
fn uid_skips(include: &[(u32, u32)], exclude: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = exclude.to_vec();
    if !include.is_empty() {
        let mut inc = include.to_vec();
        inc.sort();
        let mut next = 0u32;
        for (lo, hi) in inc {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = next.max(hi.saturating_add(1));
        }
        if next <= 0xFFFF_FFFE {
            out.push((next, 0xFFFF_FFFE));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What `auto_route` installed; removed on drop (the process mark too).
pub struct Installed {
    routes: Vec<Route>,
    rules: Vec<Rule>,
}

impl Installed {
    /// Installs `plan`'s routes and rules; a rule already there (a killed run's) is taken
    /// over. On an error what was added so far is removed again.
    pub fn install(routes: Vec<Route>, rules: Vec<Rule>) -> io::Result<Installed> {
        let mut nl = Rtnl::open()?;
        let mut done = Installed {
            routes: Vec::new(),
            rules: Vec::new(),
        };
        for r in routes {
            nl.add_route(&r).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("auto_route: route {}/{}: {e}", r.dst, r.prefix),
                )
            })?;
            done.routes.push(r);
        }
        for r in rules {
            match nl.add_rule(&r) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("auto_route: rule at priority {}: {e}", r.priority),
                    ))
                }
            }
            done.rules.push(r);
        }
        crate::transport::sockopt::set_own_mark(OWN_MARK);
        Ok(done)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        crate::transport::sockopt::set_own_mark(0);
        let Ok(mut nl) = Rtnl::open() else {
            tracing::warn!("auto_route: no netlink socket: rules left in place");
            return;
        };
        // The kernel deletes the first rule a request matches, and a request matches every rule
        // at its priority that has at least its selectors: within one priority the rules go in
        // the order they were added (the bare `lookup T` last), the priorities from the highest
        // down, so the mark's exemption at P goes last.
        let mut order: Vec<&Rule> = self.rules.iter().collect();
        order.sort_by_key(|r| std::cmp::Reverse(r.priority));
        for r in order {
            if let Err(e) = nl.del_rule(r) {
                tracing::warn!(
                    "auto_route: rule at priority {} not removed: {e}",
                    r.priority
                );
            }
        }
        // The device's routes go with the device; these are removed for a device that stays.
        for r in &self.routes {
            let _ = nl.del_route(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::reader::Diagnostics;
    use serde_json::{json, Value};

    fn p(s: &str) -> (IpAddr, u8) {
        crate::common::addr::parse_prefix(s).unwrap()
    }

    fn parsed(v: Value) -> Result<AutoRoute> {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "inbounds[0].settings", &d)?;
        parse(&o)
    }

    #[test]
    fn subtracting_leaves_the_fewest_prefixes_around_the_hole() {
        assert_eq!(subtract(&[p("0.0.0.0/0")], &[]), [p("0.0.0.0/0")]);
        assert_eq!(
            subtract(&[p("10.0.0.0/8")], &[p("10.128.0.0/9")]),
            [p("10.0.0.0/9")]
        );
        let rest = subtract(&[p("0.0.0.0/0")], &[p("192.168.0.0/16")]);
        assert_eq!(rest.len(), 16, "{rest:?}");
        assert!(rest.iter().all(|r| !covers(*r, p("192.168.1.1/32"))));
        assert!(rest.iter().any(|r| covers(*r, p("192.169.0.1/32"))));
        assert!(rest.iter().any(|r| covers(*r, p("8.8.8.8/32"))));
        assert!(subtract(&[p("10.1.0.0/16")], &[p("10.0.0.0/8")]).is_empty());
        // Families never mix.
        assert_eq!(subtract(&[p("::/0")], &[p("10.0.0.0/8")]), [p("::/0")]);
        assert_eq!(
            mask("10.1.2.3".parse().unwrap(), 8),
            "10.0.0.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            mask("fd31:9::1".parse().unwrap(), 126),
            "fd31:9::".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn included_users_become_the_excluded_complement() {
        assert_eq!(uid_skips(&[], &[(5, 5)]), [(5, 5)]);
        assert_eq!(
            uid_skips(&[(1000, 1999)], &[]),
            [(0, 999), (2000, 0xFFFF_FFFE)]
        );
        assert_eq!(
            uid_skips(&[(0, 10)], &[(3, 3)]),
            [(3, 3), (11, 0xFFFF_FFFE)]
        );
    }

    #[test]
    fn the_plan_keeps_ferry_and_the_lan_out_and_sends_the_rest_in() {
        let r = parsed(json!({"auto_route": true, "strict_route": true})).unwrap();
        let (routes, rules) = plan(&r, "tun0", 7, &[p("172.19.0.1/30")]);
        assert_eq!(
            routes,
            [Route {
                dst: "0.0.0.0".parse().unwrap(),
                prefix: 0,
                table: 2022,
                oif: Some(7)
            }]
        );
        // IPv4 gets the whole set; IPv6, without an address, only strict_route's refusal.
        let v4: Vec<_> = rules.iter().filter(|r| !r.v6).collect();
        let v6: Vec<_> = rules.iter().filter(|r| r.v6).collect();
        assert_eq!(v6.len(), 1);
        assert_eq!((v6[0].priority, v6[0].action), (9000, Action::Unreachable));
        assert_eq!(
            v4[0].fwmark,
            Some((OWN_MARK, u32::MAX)),
            "Ferry's own sockets first"
        );
        assert_eq!(v4[0].action, Action::Goto(9010));
        assert_eq!(v4[1].to, Some(p("172.19.0.0/30")));
        let dns = v4.iter().find(|r| r.dport == Some(53)).unwrap();
        assert!(dns.invert && dns.suppress_prefixlength == Some(0));
        assert_eq!(dns.action, Action::Lookup(254));
        let fwd = v4
            .iter()
            .find(|r| r.invert && r.iif.as_deref() == Some("lo"))
            .unwrap();
        assert_eq!(fwd.action, Action::Lookup(2022));
        let back = v4
            .iter()
            .find(|r| r.iif.as_deref() == Some("tun0"))
            .unwrap();
        assert_eq!(back.action, Action::Goto(9010));
        assert_eq!(v4.last().unwrap().action, Action::Nop);
        assert_eq!(v4.last().unwrap().priority, 9010);
        assert!(
            v4.windows(2).all(|w| w[0].priority <= w[1].priority),
            "in order"
        );

        let r = parsed(
            json!({"autoRoute": true, "routeAddress": ["10.9.0.0/16", "fd00::/8"],
            "routeExcludeAddress": ["10.9.128.0/17"], "excludeUid": [0],
            "iproute2_table_index": 300, "iproute2_rule_index": 100}),
        )
        .unwrap();
        let (routes, rules) = plan(&r, "tun0", 7, &[p("172.19.0.1/30"), p("fd31:9::1/126")]);
        let dsts: Vec<_> = routes.iter().map(|r| (r.dst, r.prefix)).collect();
        assert_eq!(dsts, [p("10.9.0.0/17"), p("fd00::/8")]);
        assert!(routes.iter().all(|r| r.table == 300));
        let uid = rules.iter().find(|r| r.uids.is_some()).unwrap();
        assert_eq!(
            (uid.priority, uid.uids, uid.action),
            (100, Some((0, 0)), Action::Goto(110))
        );
        assert_eq!(rules.iter().filter(|r| r.action == Action::Nop).count(), 2);
    }

    #[test]
    fn bad_keys_name_their_path() {
        let e = parsed(json!({"auto_route": true, "route_address": ["10.0.0.0/8", "nope"]}))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("inbounds[0].settings.route_address[1]:"),
            "{e}"
        );
        let e = parsed(json!({"auto_route": true, "exclude_uid_range": ["9:1"]})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("inbounds[0].settings.exclude_uid_range[0]:"),
            "{e}"
        );
        let e = parsed(json!({"auto_route": true, "include_interface": ["eth0"]})).unwrap_err();
        assert!(e.to_string().contains("not supported yet"), "{e}");
        let e = parsed(json!({"strict_route": true})).unwrap_err();
        assert!(e.to_string().contains("needs auto_route"), "{e}");
        let e = parsed(json!({"auto_route": "yes"})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("inbounds[0].settings.auto_route:"),
            "{e}"
        );
        assert!(!parsed(json!({})).unwrap().enabled);
    }
}
