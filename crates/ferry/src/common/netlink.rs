//! Routes and policy rules through rtnetlink (what `ip route` and `ip rule` send), for the TUN
//! inbound's `auto_route`. Messages are built here byte by byte; the socket is socket2's, so
//! nothing here is unsafe. Every request asks for an acknowledgement, and a refusal comes back
//! as the kernel's errno.

use std::io;
use std::io::{Read, Write};
use std::net::IpAddr;

use socket2::{Domain, Protocol, Socket, Type};

const NLMSG_ERROR: u16 = 2;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_TABLE: u16 = 15;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 0xfd;
const RT_SCOPE_NOWHERE: u8 = 0xff;
const RTN_UNICAST: u8 = 1;
const RTN_UNREACHABLE: u8 = 7;

const FRA_DST: u16 = 1;
const FRA_SRC: u16 = 2;
const FRA_IIFNAME: u16 = 3;
const FRA_GOTO: u16 = 4;
const FRA_PRIORITY: u16 = 6;
const FRA_FWMARK: u16 = 10;
const FRA_SUPPRESS_PREFIXLEN: u16 = 14;
const FRA_TABLE: u16 = 15;
const FRA_FWMASK: u16 = 16;
const FRA_UID_RANGE: u16 = 20;
const FRA_IP_PROTO: u16 = 22;
const FRA_DPORT_RANGE: u16 = 24;
const FIB_RULE_INVERT: u32 = 0x2;
const FR_ACT_TO_TBL: u8 = 1;
const FR_ACT_GOTO: u8 = 2;
const FR_ACT_NOP: u8 = 3;
const FR_ACT_UNREACHABLE: u8 = 7;

fn family(v6: bool) -> u8 {
    if v6 {
        libc::AF_INET6 as u8
    } else {
        libc::AF_INET as u8
    }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Appends one attribute (length, type, payload padded to 4 bytes).
fn attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len() + (4 - len % 4) % 4, 0);
}

/// A route: `dst/prefix` through device `oif` (an index), or unreachable when `oif` is None.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub dst: IpAddr,
    pub prefix: u8,
    pub table: u32,
    pub oif: Option<u32>,
}

impl Route {
    /// The rtmsg and attributes of a RTM_NEWROUTE (`add`) or RTM_DELROUTE.
    fn body(&self, add: bool) -> Vec<u8> {
        let (scope, kind) = match (add, self.oif) {
            (false, _) => (RT_SCOPE_NOWHERE, 0),
            (true, Some(_)) => (RT_SCOPE_LINK, RTN_UNICAST),
            (true, None) => (RT_SCOPE_UNIVERSE, RTN_UNREACHABLE),
        };
        let protocol = if add { RTPROT_BOOT } else { 0 };
        let mut b = vec![
            family(self.dst.is_ipv6()),
            self.prefix,
            0,
            0,
            0,
            protocol,
            scope,
            kind,
        ];
        b.extend_from_slice(&0u32.to_ne_bytes());
        if self.prefix > 0 {
            attr(&mut b, RTA_DST, &ip_bytes(self.dst));
        }
        attr(&mut b, RTA_TABLE, &self.table.to_ne_bytes());
        if let Some(i) = self.oif {
            attr(&mut b, RTA_OIF, &i.to_ne_bytes());
        }
        b
    }
}

/// What a rule does when it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Lookup(u32),
    Goto(u32),
    /// Matches and does nothing (the target of a `goto`).
    Nop,
    Unreachable,
}

/// A policy rule (`ip rule`): what it matches, at which priority, and what it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub v6: bool,
    pub priority: u32,
    pub invert: bool,
    pub to: Option<(IpAddr, u8)>,
    pub from: Option<(IpAddr, u8)>,
    pub iif: Option<String>,
    pub fwmark: Option<(u32, u32)>,
    pub uids: Option<(u32, u32)>,
    pub ip_proto: Option<u8>,
    pub dport: Option<u16>,
    /// A lookup's answer is refused when its prefix is this long or shorter.
    pub suppress_prefixlength: Option<u32>,
    pub action: Action,
}

impl Rule {
    /// A rule that matches everything, at `priority`.
    pub fn new(v6: bool, priority: u32, action: Action) -> Rule {
        Rule {
            v6,
            priority,
            invert: false,
            to: None,
            from: None,
            iif: None,
            fwmark: None,
            uids: None,
            ip_proto: None,
            dport: None,
            suppress_prefixlength: None,
            action,
        }
    }

    fn body(&self) -> Vec<u8> {
        let act = match self.action {
            Action::Lookup(_) => FR_ACT_TO_TBL,
            Action::Goto(_) => FR_ACT_GOTO,
            Action::Nop => FR_ACT_NOP,
            Action::Unreachable => FR_ACT_UNREACHABLE,
        };
        let dst_len = self.to.map_or(0, |(_, p)| p);
        let src_len = self.from.map_or(0, |(_, p)| p);
        let mut b = vec![family(self.v6), dst_len, src_len, 0, 0, 0, 0, act];
        let flags = if self.invert { FIB_RULE_INVERT } else { 0 };
        b.extend_from_slice(&flags.to_ne_bytes());
        attr(&mut b, FRA_PRIORITY, &self.priority.to_ne_bytes());
        if let Some((ip, _)) = self.to {
            attr(&mut b, FRA_DST, &ip_bytes(ip));
        }
        if let Some((ip, _)) = self.from {
            attr(&mut b, FRA_SRC, &ip_bytes(ip));
        }
        if let Some(name) = &self.iif {
            let mut n = name.as_bytes().to_vec();
            n.push(0);
            attr(&mut b, FRA_IIFNAME, &n);
        }
        if let Some((mark, mask)) = self.fwmark {
            attr(&mut b, FRA_FWMARK, &mark.to_ne_bytes());
            attr(&mut b, FRA_FWMASK, &mask.to_ne_bytes());
        }
        if let Some((lo, hi)) = self.uids {
            let mut r = lo.to_ne_bytes().to_vec();
            r.extend_from_slice(&hi.to_ne_bytes());
            attr(&mut b, FRA_UID_RANGE, &r);
        }
        if let Some(p) = self.ip_proto {
            attr(&mut b, FRA_IP_PROTO, &[p]);
        }
        if let Some(p) = self.dport {
            let mut r = p.to_ne_bytes().to_vec();
            r.extend_from_slice(&p.to_ne_bytes());
            attr(&mut b, FRA_DPORT_RANGE, &r);
        }
        match self.action {
            Action::Lookup(t) => attr(&mut b, FRA_TABLE, &t.to_ne_bytes()),
            Action::Goto(p) => attr(&mut b, FRA_GOTO, &p.to_ne_bytes()),
            Action::Nop | Action::Unreachable => {}
        }
        if let Some(n) = self.suppress_prefixlength {
            attr(&mut b, FRA_SUPPRESS_PREFIXLEN, &n.to_ne_bytes());
        }
        b
    }
}

/// A route netlink socket in the caller's network namespace.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
}

impl Rtnl {
    pub fn open() -> io::Result<Rtnl> {
        let sock = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW.cloexec(),
            Some(Protocol::from(libc::NETLINK_ROUTE)),
        )?;
        Ok(Rtnl { sock, seq: 0 })
    }

    pub fn add_route(&mut self, r: &Route) -> io::Result<()> {
        self.request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &r.body(true))
    }

    pub fn del_route(&mut self, r: &Route) -> io::Result<()> {
        self.request(RTM_DELROUTE, 0, &r.body(false))
    }

    pub fn add_rule(&mut self, r: &Rule) -> io::Result<()> {
        self.request(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, &r.body())
    }

    pub fn del_rule(&mut self, r: &Rule) -> io::Result<()> {
        self.request(RTM_DELRULE, 0, &r.body())
    }

    /// Sends one request (unconnected netlink sends go to the kernel) and waits for its
    /// acknowledgement.
    fn request(&mut self, kind: u16, flags: u16, body: &[u8]) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let m = message(kind, NLM_F_REQUEST | NLM_F_ACK | flags, seq, body);
        let n = (&self.sock).write(&m)?;
        if n != m.len() {
            return Err(io::Error::other("netlink: short send"));
        }
        let mut buf = vec![0u8; 8192];
        loop {
            let n = (&self.sock).read(&mut buf)?;
            if let Some(r) = ack(&buf[..n], seq) {
                return r;
            }
        }
    }
}

/// A whole netlink message: header, then `body`.
fn message(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let len = 16 + body.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

/// The answer to request `seq` among the messages of `buf`: Ok for an acknowledgement, the
/// errno as an error; None if `buf` holds no answer to it.
fn ack(buf: &[u8], seq: u32) -> Option<io::Result<()>> {
    let mut at = 0;
    while buf.len() >= at + 16 {
        let h = &buf[at..];
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let kind = u16::from_ne_bytes([h[4], h[5]]);
        let s = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
        if len < 16 || at + len > buf.len() {
            return Some(Err(io::Error::other("netlink: truncated answer")));
        }
        if kind == NLMSG_ERROR && s == seq && len >= 20 {
            let code = i32::from_ne_bytes([h[16], h[17], h[18], h[19]]);
            return Some(if code == 0 {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(-code))
            });
        }
        at += (len + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ip` 6.1's bytes for the same requests (strace of `ip rule add` and `ip route add`).
    fn b(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|x| u8::from_str_radix(x, 16).unwrap())
            .collect()
    }

    #[test]
    fn rules_are_encoded_as_ip_rule_sends_them() {
        // ip rule add priority 9001 not fwmark 0x2023/0xffffffff lookup 2022
        let mut r = Rule::new(false, 9001, Action::Lookup(2022));
        r.invert = true;
        r.fwmark = Some((0x2023, u32::MAX));
        assert_eq!(
            r.body(),
            b("02 00 00 00 00 00 00 01 02 00 00 00 08 00 06 00 29 23 00 00 08 00 0a 00 23 20 00 00
               08 00 10 00 ff ff ff ff 08 00 0f 00 e6 07 00 00")
        );
        // ip -6 rule add priority 9002 uidrange 100-200 ipproto udp dport 53 goto 9010
        let mut r = Rule::new(true, 9002, Action::Goto(9010));
        r.uids = Some((100, 200));
        r.ip_proto = Some(17);
        r.dport = Some(53);
        assert_eq!(
            r.body(),
            b("0a 00 00 00 00 00 00 02 00 00 00 00 08 00 06 00 2a 23 00 00 0c 00 14 00 64 00 00 00
               c8 00 00 00 05 00 16 00 11 00 00 00 08 00 18 00 35 00 35 00 08 00 04 00 32 23 00 00")
        );
    }

    #[test]
    fn source_interface_and_suppression_as_ip_sends_them() {
        // ip rule add priority 9004 not from 10.0.0.0/30 iif lo lookup 2022 suppress_prefixlength 0
        let mut r = Rule::new(false, 9004, Action::Lookup(2022));
        r.invert = true;
        r.from = Some(("10.0.0.0".parse().unwrap(), 30));
        r.iif = Some("lo".into());
        r.suppress_prefixlength = Some(0);
        assert_eq!(
            r.body(),
            b("02 00 1e 00 00 00 00 01 02 00 00 00 08 00 06 00 2c 23 00 00 08 00 02 00 0a 00 00 00
               07 00 03 00 6c 6f 00 00 08 00 0f 00 e6 07 00 00 08 00 0e 00 00 00 00 00")
        );
    }

    #[test]
    fn routes_are_encoded_as_ip_route_sends_them() {
        // ip route add default dev t0 table 2022 (t0 has index 2)
        let r = Route {
            dst: "0.0.0.0".parse().unwrap(),
            prefix: 0,
            table: 2022,
            oif: Some(2),
        };
        assert_eq!(
            r.body(true),
            b("02 00 00 00 00 03 fd 01 00 00 00 00 08 00 0f 00 e6 07 00 00 08 00 04 00 02 00 00 00")
        );
        // ip route del default dev t0 table 2022
        assert_eq!(
            r.body(false),
            b("02 00 00 00 00 00 ff 00 00 00 00 00 08 00 0f 00 e6 07 00 00 08 00 04 00 02 00 00 00")
        );
        // ip -6 route add unreachable 2001:db8::/32 table 2022
        let r = Route {
            dst: "2001:db8::".parse().unwrap(),
            prefix: 32,
            table: 2022,
            oif: None,
        };
        assert_eq!(
            r.body(true),
            b("0a 20 00 00 00 03 00 07 00 00 00 00 14 00 01 00 20 01 0d b8 00 00 00 00 00 00 00 00
               00 00 00 00 08 00 0f 00 e6 07 00 00")
        );
    }

    #[test]
    fn acknowledgements_and_refusals_are_read_by_sequence() {
        let err = |seq: u32, code: i32| {
            let mut body = code.to_ne_bytes().to_vec();
            body.extend_from_slice(&[0; 16]);
            message(NLMSG_ERROR, 0, seq, &body)
        };
        let mut two = err(6, -libc::EEXIST);
        two.extend(err(7, 0));
        assert!(matches!(ack(&two, 7), Some(Ok(()))));
        let e = ack(&two, 6).unwrap().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        assert!(ack(&two, 8).is_none());
        assert!(matches!(ack(&two[..30], 7), Some(Err(_))), "a cut message");
    }
}
