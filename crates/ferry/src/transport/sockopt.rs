//! `streamSettings.sockopt` as Xray applies it on Linux: what a listener sets before it binds,
//! what every TCP connection (accepted or dialed) gets, what a dialing socket sets before it
//! connects, and what a UDP socket takes.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};

use crate::common::sys;

/// `sockopt.tproxy`: whether a listener is transparent (`IP_TRANSPARENT`) and how a TCP
/// connection's original destination is read: `redirect` from `SO_ORIGINAL_DST` (iptables
/// `REDIRECT`, nft `redirect`), `tproxy` from the accepted socket's local address (`TPROXY`).
/// A UDP listener in either mode reads each datagram's original destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TProxy {
    #[default]
    Off,
    Redirect,
    TProxy,
}

/// `sockopt.domainStrategy`: which addresses of a domain a dialer connects to, in which order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Family {
    /// `AsIs`: every address, as resolved.
    #[default]
    AsIs,
    /// `UseIP`/`ForceIP`: every address, as resolved.
    Both,
    V4,
    V6,
    /// IPv4 first, then IPv6.
    V4V6,
    /// IPv6 first, then IPv4.
    V6V4,
}

/// `sockopt.domainStrategy` as read: the family choice, and whether it is forced (`Force…`:
/// no address of the families is an error; `Use…`: then every address is tried).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DomainStrategy {
    pub family: Family,
    pub force: bool,
}

impl DomainStrategy {
    /// Xray's names, case-insensitive; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<DomainStrategy> {
        let l = s.to_ascii_lowercase();
        let (force, rest) = if let Some(r) = l.strip_prefix("forceip") {
            (true, r)
        } else if let Some(r) = l.strip_prefix("useip") {
            (false, r)
        } else if l == "asis" || l.is_empty() {
            return Some(DomainStrategy::default());
        } else {
            return None;
        };
        let family = match rest {
            "" => Family::Both,
            "v4" => Family::V4,
            "v6" => Family::V6,
            "v4v6" => Family::V4V6,
            "v6v4" => Family::V6V4,
            _ => return None,
        };
        Some(DomainStrategy { family, force })
    }

    /// The addresses of `addrs` to try, in order.
    pub fn pick(&self, addrs: Vec<SocketAddr>) -> io::Result<Vec<SocketAddr>> {
        let (v4, v6): (Vec<_>, Vec<_>) = addrs.iter().partition(|a| a.is_ipv4());
        let picked: Vec<SocketAddr> = match self.family {
            Family::AsIs | Family::Both => return Ok(addrs),
            Family::V4 => v4,
            Family::V6 => v6,
            Family::V4V6 => v4.into_iter().chain(v6).collect(),
            Family::V6V4 => v6.into_iter().chain(v4).collect(),
        };
        if !picked.is_empty() {
            Ok(picked)
        } else if self.force {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "sockopt.domainStrategy {:?}: no address of that family",
                    self.family
                ),
            ))
        } else {
            Ok(addrs)
        }
    }
}

/// `sockopt.happyEyeballs`: connections to a domain's addresses raced, a new attempt every
/// `try_delay` while none has connected (RFC 8305), families interleaved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HappyEyeballs {
    pub try_delay: Duration,
    /// The first address is IPv6 when there is one (else IPv4).
    pub prioritize_ipv6: bool,
    /// How many addresses of one family before one of the other.
    pub interleave: u32,
    /// Attempts in flight at once.
    pub max_concurrent: u32,
}

impl Default for HappyEyeballs {
    fn default() -> Self {
        HappyEyeballs {
            try_delay: Duration::ZERO,
            prioritize_ipv6: false,
            interleave: 1,
            max_concurrent: 4,
        }
    }
}

impl HappyEyeballs {
    /// `addrs` in the order the attempts start: the first family's `interleave`, then one of
    /// the other, and so on.
    pub fn order(&self, addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
        let (v4, v6): (Vec<_>, Vec<_>) = addrs.into_iter().partition(|a| a.is_ipv4());
        let (mut first, mut second) = if self.prioritize_ipv6 && !v6.is_empty() {
            (v6.into_iter(), v4.into_iter())
        } else {
            (v4.into_iter(), v6.into_iter())
        };
        let mut out = Vec::new();
        loop {
            let mut any = false;
            for a in first.by_ref().take(self.interleave.max(1) as usize) {
                out.push(a);
                any = true;
            }
            if let Some(a) = second.next() {
                out.push(a);
                any = true;
            }
            if !any {
                return out;
            }
        }
    }
}

/// `sockopt.customSockopt`: one `setsockopt` Xray passes through (Linux entries only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomOpt {
    pub level: i32,
    pub opt: i32,
    pub value: CustomValue,
    /// `network`: `"tcp"`, `"udp"` or both (empty).
    pub network: Option<crate::common::Network>,
}

/// A custom option's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CustomValue {
    Int(i32),
    Str(Vec<u8>),
}

/// Socket options from `streamSettings.sockopt` that Ferry honours.
#[derive(Clone, Debug, Default)]
pub struct SockOpts {
    /// `tproxy` (listeners).
    pub tproxy: TProxy,
    /// `SO_MARK` (needs CAP_NET_ADMIN).
    pub mark: u32,
    /// `tcpKeepAliveIdle` seconds: probes after this long idle (0: a dialer's default of
    /// [`DIAL_KEEPALIVE`], a listener's none; negative, with the interval not positive: off).
    pub keepalive_idle: i32,
    /// `tcpKeepAliveInterval` seconds between probes (0 as the idle's; negative: off).
    pub keepalive_interval: i32,
    /// `TCP_NODELAY`; Ferry always sets it, as Xray does.
    pub no_delay: bool,
    /// `SO_BINDTODEVICE` interface name.
    pub interface: Option<String>,
    /// Source address to bind outgoing sockets to (`sendThrough`).
    pub bind: Option<std::net::IpAddr>,
    /// `tcpFastOpen` in Xray's numbers (true = 256, false = -1): `None` or 0 leaves it; a
    /// listener takes `TCP_FASTOPEN` = n when n > 0 (0 when negative), a dialer
    /// `TCP_FASTOPEN_CONNECT` 1 or 0.
    pub fast_open: Option<i32>,
    /// `tcpCongestion`: `TCP_CONGESTION` (`bbr`, `cubic`, `reno`, ...).
    pub congestion: Option<String>,
    /// `tcpUserTimeout` in milliseconds: `TCP_USER_TIMEOUT` (0: untouched).
    pub user_timeout_ms: u32,
    /// `tcpMaxSeg`: `TCP_MAXSEG` (0: untouched).
    pub max_seg: u32,
    /// `tcpWindowClamp`: `TCP_WINDOW_CLAMP` (0: untouched).
    pub window_clamp: u32,
    /// `v6only`: an IPv6 listener takes no IPv4 (`IPV6_V6ONLY`).
    pub v6only: bool,
    /// `tcpMptcp`: Multipath TCP sockets (plain TCP where the kernel has none, as Go falls back).
    pub mptcp: bool,
    /// `domainStrategy`: the addresses of a domain a dialer tries.
    pub domain_strategy: DomainStrategy,
    /// `happyEyeballs` (with a `domainStrategy` other than `AsIs`, as in Xray).
    pub happy_eyeballs: Option<HappyEyeballs>,
    /// `customSockopt`.
    pub custom: Vec<CustomOpt>,
}

/// The mark every socket Ferry opens without a mark of its own carries (0: none): set while a
/// TUN inbound's `auto_route` is installed, whose first rule lets this mark out of the tunnel.
static OWN_MARK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub fn set_own_mark(mark: u32) {
    OWN_MARK.store(mark, std::sync::atomic::Ordering::Relaxed);
}

/// Gives `s` the process's own mark, if one is set (DNS and QUIC sockets, which have no
/// sockopt of their own, call this too).
pub fn mark_own(s: &SockRef<'_>) -> io::Result<()> {
    match OWN_MARK.load(std::sync::atomic::Ordering::Relaxed) {
        0 => Ok(()),
        m => s.set_mark(m).map_err(named("mark (auto_route)")),
    }
}

/// What Xray's dialer gives an outgoing TCP connection whose config names no keepalive (seen
/// on its sockets: `ss -tnoe` shows `timer:(keepalive,45sec)`; accepted ones get none).
pub const DIAL_KEEPALIVE: Duration = Duration::from_secs(45);

fn named(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("sockopt.{what}: {e}"))
}

impl SockOpts {
    /// What every TCP connection takes, accepted or dialed.
    pub fn apply(&self, s: &SockRef<'_>) -> io::Result<()> {
        s.set_tcp_nodelay(true)?;
        let secs = |n: i32| Duration::from_secs(n.unsigned_abs().into());
        if self.keepalive_idle > 0 || self.keepalive_interval > 0 {
            let mut ka = TcpKeepalive::new();
            if self.keepalive_idle > 0 {
                ka = ka.with_time(secs(self.keepalive_idle));
            }
            if self.keepalive_interval > 0 {
                ka = ka.with_interval(secs(self.keepalive_interval));
            }
            s.set_tcp_keepalive(&ka)?;
        } else if self.keepalive_idle < 0 || self.keepalive_interval < 0 {
            s.set_keepalive(false)?;
        }
        self.apply_tcp_tuning(s)?;
        self.apply_any(s, crate::common::Network::Tcp)
    }

    /// The TCP tuning a listener passes on to what it accepts, and a dialer sets itself.
    fn apply_tcp_tuning(&self, s: &SockRef<'_>) -> io::Result<()> {
        let fd = s.as_raw_fd();
        if let Some(cc) = &self.congestion {
            s.set_tcp_congestion(cc.as_bytes())
                .map_err(named("tcpCongestion"))?;
        }
        if self.user_timeout_ms > 0 {
            s.set_tcp_user_timeout(Some(Duration::from_millis(self.user_timeout_ms.into())))
                .map_err(named("tcpUserTimeout"))?;
        }
        if self.window_clamp > 0 {
            let v = i32::try_from(self.window_clamp).unwrap_or(i32::MAX);
            sys::set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, v)
                .map_err(named("tcpWindowClamp"))?;
        }
        Ok(())
    }

    /// What TCP and UDP sockets alike take: the mark (the config's, else the process's own
    /// while the TUN's `auto_route` needs one), the interface, custom options.
    pub fn apply_any(&self, s: &SockRef<'_>, net: crate::common::Network) -> io::Result<()> {
        if self.mark != 0 {
            s.set_mark(self.mark).map_err(named("mark"))?;
        } else {
            mark_own(s)?;
        }
        if let Some(dev) = &self.interface {
            s.bind_device(Some(dev.as_bytes()))
                .map_err(named("interface"))?;
        }
        for c in &self.custom {
            if c.network.is_some_and(|n| n != net) {
                continue;
            }
            match &c.value {
                CustomValue::Int(v) => sys::set_int_opt(s.as_raw_fd(), c.level, c.opt, *v),
                CustomValue::Str(v) => sys::set_bytes_opt(s.as_raw_fd(), c.level, c.opt, v),
            }
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("sockopt.customSockopt level {} opt {}: {e}", c.level, c.opt),
                )
            })?;
        }
        Ok(())
    }

    /// What a dialing TCP socket sets before it connects.
    pub fn apply_dialer(&self, s: &SockRef<'_>) -> io::Result<()> {
        self.apply(s)?;
        if self.keepalive_idle == 0 && self.keepalive_interval == 0 {
            let ka = TcpKeepalive::new()
                .with_time(DIAL_KEEPALIVE)
                .with_interval(DIAL_KEEPALIVE);
            s.set_tcp_keepalive(&ka)?;
        }
        if self.max_seg > 0 {
            s.set_tcp_mss(self.max_seg).map_err(named("tcpMaxSeg"))?;
        }
        if let Some(n) = self.fast_open.filter(|n| *n != 0) {
            sys::set_int_opt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_FASTOPEN_CONNECT,
                i32::from(n > 0),
            )
            .map_err(named("tcpFastOpen"))?;
        }
        Ok(())
    }

    /// What a TCP or UDP listener sets before it binds `addr`: `IP_TRANSPARENT` in either
    /// tproxy mode and `SO_MARK` (both need CAP_NET_ADMIN; failing to set them fails the
    /// bind, as in Xray), `IPV6_V6ONLY`; a TCP listener also its fast open queue and the
    /// tuning its connections inherit.
    pub fn apply_listener(
        &self,
        s: &SockRef<'_>,
        addr: SocketAddr,
        net: crate::common::Network,
    ) -> io::Result<()> {
        if self.tproxy != TProxy::Off {
            if addr.is_ipv4() {
                s.set_ip_transparent_v4(true)
            } else {
                s.set_ip_transparent_v6(true)
            }
            .map_err(named("tproxy (IP_TRANSPARENT)"))?;
        }
        if self.mark != 0 {
            s.set_mark(self.mark).map_err(named("mark"))?;
        }
        if self.v6only && addr.is_ipv6() {
            s.set_only_v6(true).map_err(named("v6only"))?;
        }
        if net == crate::common::Network::Tcp {
            if let Some(n) = self.fast_open.filter(|n| *n != 0) {
                sys::set_int_opt(
                    s.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_FASTOPEN,
                    n.max(0),
                )
                .map_err(named("tcpFastOpen"))?;
            }
            if self.max_seg > 0 {
                s.set_tcp_mss(self.max_seg).map_err(named("tcpMaxSeg"))?;
            }
            self.apply_tcp_tuning(s)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp;
    use std::os::fd::RawFd;

    fn int(fd: RawFd, level: i32, name: i32) -> i32 {
        sys::int_opt(fd, level, name).unwrap()
    }

    /// `TCP_CONGESTION` without the name's padding.
    fn cc(r: SockRef<'_>) -> Vec<u8> {
        let mut n = r.tcp_congestion().unwrap();
        n.retain(|b| *b != 0);
        n
    }

    #[tokio::test]
    async fn every_option_is_on_the_sockets() {
        let opts = SockOpts {
            mark: 255,
            interface: Some("lo".into()),
            fast_open: Some(256),
            congestion: Some("reno".into()),
            user_timeout_ms: 7000,
            max_seg: 1200,
            window_clamp: 40000,
            custom: vec![CustomOpt {
                level: libc::IPPROTO_TCP,
                opt: libc::TCP_KEEPCNT,
                value: CustomValue::Int(7),
                network: Some(crate::common::Network::Tcp),
            }],
            ..Default::default()
        };
        let l = tcp::listen_with("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let lfd = l.as_raw_fd();
        assert_eq!(int(lfd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN), 256);
        assert_eq!(SockRef::from(&l).mark().unwrap(), 255);
        assert_eq!(cc(SockRef::from(&l)), b"reno");
        let c = tcp::connect_addr(l.local_addr().unwrap(), &opts)
            .await
            .unwrap();
        let (a, _) = l.accept().await.unwrap();
        tcp::accepted(&a, &opts).unwrap();
        let fd = c.as_raw_fd();
        assert_eq!(int(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT), 1);
        assert_eq!(int(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 7000);
        assert!(int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG) <= 1200);
        assert_eq!(int(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP), 40000);
        assert_eq!(int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 7);
        assert_eq!(int(fd, libc::SOL_SOCKET, libc::SO_MARK), 255);
        assert_eq!(cc(SockRef::from(&c)), b"reno");
        assert_eq!(
            SockRef::from(&c).device().unwrap().as_deref(),
            Some(&b"lo"[..])
        );
        // The accepted side has what every connection takes.
        assert_eq!(cc(SockRef::from(&a)), b"reno");
        assert_eq!(
            int(a.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
            7000
        );
        assert_eq!(int(a.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 7);
        // Without options nothing of these is set, but a dialed connection is kept alive as
        // Xray's are (45 s idle, 45 s between probes) and an accepted one is not.
        let plain = tcp::connect_addr(l.local_addr().unwrap(), &SockOpts::default())
            .await
            .unwrap();
        let pfd = plain.as_raw_fd();
        assert_eq!(int(pfd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT), 0);
        assert_eq!(int(pfd, libc::SOL_SOCKET, libc::SO_MARK), 0);
        assert_eq!(int(pfd, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(int(pfd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 45);
        assert_eq!(int(pfd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 45);
        let (pa, _) = l.accept().await.unwrap();
        tcp::accepted(&pa, &SockOpts::default()).unwrap();
        assert_eq!(int(pa.as_raw_fd(), libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        // Given values win; a negative one turns keepalive off.
        let set = SockOpts {
            keepalive_idle: 30,
            keepalive_interval: 10,
            ..Default::default()
        };
        let c = tcp::connect_addr(l.local_addr().unwrap(), &set)
            .await
            .unwrap();
        assert_eq!(
            int(c.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
            30
        );
        assert_eq!(
            int(c.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
            10
        );
        let off = SockOpts {
            keepalive_idle: -1,
            ..Default::default()
        };
        let c = tcp::connect_addr(l.local_addr().unwrap(), &off)
            .await
            .unwrap();
        assert_eq!(int(c.as_raw_fd(), libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        // tcpFastOpen false turns it off on a dialer.
        let off = SockOpts {
            fast_open: Some(-1),
            ..Default::default()
        };
        let c = tcp::connect_addr(l.local_addr().unwrap(), &off)
            .await
            .unwrap();
        assert_eq!(
            int(c.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT),
            0
        );
    }

    #[tokio::test]
    async fn v6only_and_mptcp_listeners() {
        let opts = SockOpts {
            v6only: true,
            mptcp: true,
            ..Default::default()
        };
        // The wildcard address: a socket bound to one IPv6 address is IPv6-only anyway.
        let l = tcp::listen_with("[::]:0".parse().unwrap(), &opts).unwrap();
        assert_eq!(int(l.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY), 1);
        // This kernel has Multipath TCP: the listener and a dialer are MPTCP sockets.
        assert_eq!(
            int(l.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL),
            libc::IPPROTO_MPTCP
        );
        let c = tcp::connect_addr(l.local_addr().unwrap(), &opts)
            .await
            .unwrap();
        assert_eq!(
            int(c.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL),
            libc::IPPROTO_MPTCP
        );
        // IPv6 only: no IPv4 connection reaches it.
        let port = l.local_addr().unwrap().port();
        assert!(
            tcp::connect_addr(([127, 0, 0, 1], port).into(), &SockOpts::default())
                .await
                .is_err()
        );
        let plain = tcp::listen_with("[::]:0".parse().unwrap(), &SockOpts::default()).unwrap();
        assert_eq!(
            int(plain.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY),
            0
        );
        assert_eq!(
            int(plain.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL),
            libc::IPPROTO_TCP
        );
    }

    #[test]
    fn domain_strategy_picks_families() {
        let addrs: Vec<SocketAddr> = vec![
            "[2001:db8::1]:443".parse().unwrap(),
            "192.0.2.1:443".parse().unwrap(),
            "[2001:db8::2]:443".parse().unwrap(),
        ];
        let s = |n: &str| DomainStrategy::parse(n).unwrap();
        assert_eq!(s("AsIs").pick(addrs.clone()).unwrap(), addrs);
        assert_eq!(s("UseIPv4").pick(addrs.clone()).unwrap(), [addrs[1]]);
        assert_eq!(
            s("forceipv6").pick(addrs.clone()).unwrap(),
            [addrs[0], addrs[2]]
        );
        assert_eq!(
            s("UseIPv4v6").pick(addrs.clone()).unwrap(),
            [addrs[1], addrs[0], addrs[2]]
        );
        let v6 = vec![addrs[0]];
        // Use… falls back to every address; Force… fails.
        assert_eq!(s("UseIPv4").pick(v6.clone()).unwrap(), v6);
        assert!(s("ForceIPv4").pick(v6).is_err());
        assert!(DomainStrategy::parse("UseIPv5").is_none());
    }

    #[test]
    fn happy_eyeballs_interleaves_families() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let addrs = vec![
            a("[::1]:1"),
            a("[::2]:1"),
            a("1.0.0.1:1"),
            a("1.0.0.2:1"),
            a("1.0.0.3:1"),
        ];
        let he = HappyEyeballs {
            prioritize_ipv6: true,
            ..Default::default()
        };
        assert_eq!(
            he.order(addrs.clone()),
            [
                a("[::1]:1"),
                a("1.0.0.1:1"),
                a("[::2]:1"),
                a("1.0.0.2:1"),
                a("1.0.0.3:1")
            ]
        );
        let he = HappyEyeballs {
            interleave: 2,
            ..Default::default()
        };
        assert_eq!(
            he.order(addrs),
            [
                a("1.0.0.1:1"),
                a("1.0.0.2:1"),
                a("[::1]:1"),
                a("1.0.0.3:1"),
                a("[::2]:1")
            ]
        );
    }
}
