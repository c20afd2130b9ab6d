//! Lookups (routing.md §4.4–4.6): hosts first, then the servers in Xray's order, each answer
//! filtered by the server's expected/unexpected IPs, the first non-empty one winning; answers
//! cached per server, name and type until their TTL runs out.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fake::FakeDns;
use super::message::{self, A, AAAA};
use super::{Answer, Families, HostRule, HostValue, Route, Server, Transport};
use crate::app::router::{Assets, DomainSet, DomainType};
use crate::common::{Address, Destination};
use crate::transport::BoxStream;

/// The TTL given to the system resolver's answers.
const SYSTEM_TTL: u32 = 60;

/// How long an answer without records (NXDOMAIN, NODATA) is kept.
const NEGATIVE_TTL: Duration = Duration::from_secs(300);

/// The TTL of fake answers.
const FAKE_TTL: u32 = 1;

/// The TTL of answers from `hosts`.
const HOSTS_TTL: u32 = 10;

/// (server index, name, query type).
type CacheKey = (usize, String, u16);

/// A cached answer: when it expires, its addresses and its rcode.
type Cached = (Instant, Vec<IpAddr>, u8);

impl Answer {
    pub(crate) fn empty(rcode: u8) -> Answer {
        Answer {
            ips: Vec::new(),
            ttl: 0,
            rcode,
        }
    }
}

/// One server's (or the cache's) answer for one type, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    Answer(Answer),
    /// No answer came (timeout, network or format error).
    Failed,
}

/// The configured resolver.
#[derive(Debug)]
pub struct Dns {
    servers: Vec<Server>,
    hosts: Vec<HostRule>,
    families: Families,
    disable_cache: bool,
    disable_fallback: bool,
    disable_fallback_if_match: bool,
    /// The implicit rules of a `localhost` server (local TLDs and dotless names).
    local_names: DomainSet,
    cache: Mutex<HashMap<CacheKey, Cached>>,
    next_id: AtomicU16,
    /// The fake pools, when a config has them (a `fakedns` object or server).
    fake: Option<std::sync::Arc<FakeDns>>,
    /// Where routed servers are dialed (the instance's dispatcher, which owns this resolver
    /// through its router: hence weak).
    route: OnceLock<Weak<dyn Route>>,
}

impl Dns {
    pub(super) fn new(
        servers: Vec<Server>,
        hosts: Vec<HostRule>,
        families: Families,
        disable_cache: bool,
        disable_fallback: bool,
        disable_fallback_if_match: bool,
    ) -> Dns {
        let local: Vec<String> = [
            "regexp:^[^.]+$",
            "domain:local",
            "domain:localdomain",
            "domain:localhost",
            "domain:lan",
            "domain:home.arpa",
            "domain:example",
            "domain:invalid",
            "domain:test",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let local_names =
            DomainSet::parse_with(&local, "dns", DomainType::Substr, &Assets::only("."))
                .unwrap_or_default();
        Dns {
            servers,
            hosts,
            families,
            disable_cache,
            disable_fallback,
            disable_fallback_if_match,
            local_names,
            cache: Mutex::new(HashMap::new()),
            fake: None,
            route: OnceLock::new(),
            // A random first id from the standard library's OS-seeded hasher keys: taking it
            // from aws-lc would start aws-lc's generator (its jitter-entropy seeding costs
            // ~30 ms and ~2 MiB) in every process, most of which never use it.
            next_id: AtomicU16::new({
                use std::hash::BuildHasher;
                std::collections::hash_map::RandomState::new().hash_one(0u8) as u16
            }),
        }
    }

    /// A resolver with no servers and no hosts: the system's (what Xray uses without a `dns`
    /// object).
    pub fn system() -> Dns {
        Dns::new(Vec::new(), Vec::new(), Families::BOTH, false, false, false)
    }

    /// Gives the resolver its fake pools: `pools` (the `fakedns` object), or Xray's defaults
    /// for the query strategy when a server is `fakedns` and there is no object.
    pub fn with_fake(mut self, pools: Option<FakeDns>) -> Dns {
        let wants = self.servers.iter().any(|s| s.transport == Transport::Fake);
        self.fake = match pools {
            Some(p) => Some(std::sync::Arc::new(p)),
            None if wants => Some(std::sync::Arc::new(FakeDns::default_for(self.families))),
            None => None,
        };
        self
    }

    /// Gives the resolver the dispatcher its routed servers are dialed through (once; later
    /// calls are ignored).
    pub fn set_route(&self, route: Weak<dyn Route>) {
        let _ = self.route.set(route);
    }

    /// The route for server `s`, when it is routed and an instance gave one.
    fn route_for(&self, s: &Server) -> Option<(Arc<dyn Route>, Arc<str>)> {
        let tag = s.route_tag.clone()?;
        Some((self.route.get()?.upgrade()?, tag))
    }

    /// The fake pools (sniffing gives a fake address its name back).
    pub fn fake(&self) -> Option<&FakeDns> {
        self.fake.as_deref()
    }

    #[cfg(test)]
    pub(super) fn servers_for_test(&self) -> &[Server] {
        &self.servers
    }

    /// What `hosts` says about `name` (all matching keys, ordered full, domain deepest first,
    /// keyword, regexp).
    pub fn hosts(&self, name: &str) -> Option<HostValue> {
        let mut hits: Vec<(&HostRule, usize)> = self
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.matcher.matches(name))
            .map(|(i, h)| (h, i))
            .collect();
        if hits.is_empty() {
            return None;
        }
        hits.sort_by_key(|(h, i)| (h.rank, *i));
        if let HostValue::Ips(_) = hits[0].0.value {
            let mut ips = Vec::new();
            for (h, _) in &hits {
                if let HostValue::Ips(v) = &h.value {
                    for ip in v {
                        if !ips.contains(ip) {
                            ips.push(*ip);
                        }
                    }
                }
            }
            return Some(HostValue::Ips(ips));
        }
        Some(hits[0].0.value.clone())
    }

    /// The servers to ask for `name`, in order (routing.md §4.5 step 3).
    pub fn order(&self, name: &str) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stopped = false;
        for (i, s) in self.servers.iter().enumerate() {
            let local = s.transport == Transport::Localhost && self.local_names.matches(name);
            if local || s.domains.as_ref().is_some_and(|d| d.matches(name)) {
                out.push(i);
                if s.final_query {
                    stopped = true;
                    break;
                }
            }
        }
        let matched = !out.is_empty();
        let no_fallback =
            stopped || self.disable_fallback || (self.disable_fallback_if_match && matched);
        if !no_fallback {
            for (i, s) in self.servers.iter().enumerate() {
                if out.contains(&i) || s.skip_fallback {
                    continue;
                }
                out.push(i);
                if s.final_query {
                    break;
                }
            }
        }
        if out.is_empty() && !self.servers.is_empty() {
            out.push(0);
        }
        out
    }

    /// The addresses of `name` (A then AAAA, as the strategy allows); empty when nothing
    /// answered.
    pub async fn lookup(&self, name: &str) -> Vec<IpAddr> {
        self.lookup_families(name, Families::BOTH).await
    }

    /// [`Dns::lookup`] for some families only.
    pub async fn lookup_families(&self, name: &str, want: Families) -> Vec<IpAddr> {
        self.resolve(name, want)
            .await
            .map(|a| a.ips)
            .unwrap_or_default()
    }

    /// Resolves `name` as Xray's `LookupIP` does (routing.md §4.5): hosts, then the servers in
    /// order, the first non-empty filtered answer winning. When none has addresses, the
    /// servers' common verdict: all empty gives an empty NOERROR answer, all the same rcode
    /// gives that rcode, anything else (a timeout among them, or disagreeing servers) `None`.
    pub async fn resolve(&self, name: &str, want: Families) -> Option<Answer> {
        self.resolve_with(name, want, false).await
    }

    /// [`Dns::resolve`] where `fakedns` servers answer too (the `dns` outbound's lookups).
    pub async fn resolve_allowing_fake(&self, name: &str, want: Families) -> Option<Answer> {
        self.resolve_with(name, want, true).await
    }

    async fn resolve_with(&self, name: &str, want: Families, fake: bool) -> Option<Answer> {
        let want = want.and(self.families);
        if !want.v4 && !want.v6 {
            return Some(Answer::empty(0));
        }
        let mut name = name.trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty() {
            return None;
        }
        for _ in 0..5 {
            match self.hosts(&name) {
                Some(HostValue::Ips(v)) => {
                    let ips: Vec<IpAddr> = v
                        .into_iter()
                        .filter(|ip| if ip.is_ipv4() { want.v4 } else { want.v6 })
                        .collect();
                    let ttl = if ips.is_empty() { 0 } else { HOSTS_TTL };
                    return Some(Answer { ips, ttl, rcode: 0 });
                }
                Some(HostValue::Rcode(r)) => return Some(Answer::empty(r)),
                Some(HostValue::Alias(a)) => name = a,
                None => break,
            }
        }
        if self.servers.is_empty() {
            let ips = system(&name, want).await;
            let ttl = if ips.is_empty() { 0 } else { SYSTEM_TTL };
            return Some(Answer { ips, ttl, rcode: 0 });
        }
        let mut verdict: Option<Asked> = None;
        let mut agree = true;
        for i in self.order(&name) {
            let s = &self.servers[i];
            let fam = want.and(s.families);
            if s.transport == Transport::Fake {
                let Some(pools) = self.fake.as_ref().filter(|_| fake) else {
                    continue;
                };
                let ips = pools.ips_for(&name, fam);
                if !ips.is_empty() {
                    tracing::info!("dns: fake addresses for {name}: {ips:?}");
                    return Some(Answer {
                        ips,
                        ttl: FAKE_TTL,
                        rcode: 0,
                    });
                }
                continue;
            }
            let (mut ips, mut ttl, mut rcode, mut failed) = (Vec::new(), u32::MAX, 0u8, false);
            for (on, qtype) in [(fam.v4, A), (fam.v6, AAAA)] {
                if !on {
                    continue;
                }
                match self.ask(i, &name, qtype).await {
                    Asked::Answer(a) => {
                        if !a.ips.is_empty() {
                            ttl = ttl.min(a.ttl);
                        }
                        ips.extend(a.ips);
                        if rcode == 0 {
                            rcode = a.rcode;
                        }
                    }
                    Asked::Failed => failed = true,
                }
            }
            let ips = filter(s, ips);
            if !ips.is_empty() {
                return Some(Answer { ips, ttl, rcode: 0 });
            }
            let this = if failed && rcode == 0 {
                Asked::Failed
            } else {
                Asked::Answer(Answer::empty(rcode))
            };
            match &verdict {
                None => verdict = Some(this),
                Some(v) if *v != this => agree = false,
                Some(_) => {}
            }
        }
        match verdict {
            Some(Asked::Answer(a)) if agree => Some(a),
            None => Some(Answer::empty(0)),
            _ => None,
        }
    }

    /// One server, one type: from the cache or the wire.
    async fn ask(&self, i: usize, name: &str, qtype: u16) -> Asked {
        let s = &self.servers[i];
        let key = (i, name.to_string(), qtype);
        let cache = !(self.disable_cache || s.disable_cache);
        if cache {
            if let Some((exp, ips, rcode)) =
                self.cache.lock().ok().and_then(|c| c.get(&key).cloned())
            {
                let now = Instant::now();
                if exp > now {
                    // The TTL left, rounded up.
                    let left = (exp - now).as_millis().div_ceil(1000);
                    let ttl = u32::try_from(left).unwrap_or(u32::MAX).max(1);
                    return Asked::Answer(Answer { ips, ttl, rcode });
                }
            }
        }
        let r = tokio::time::timeout(s.timeout, self.query(s, name, qtype)).await;
        let (ips, ttl, rcode) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                tracing::debug!("dns: {} for {name} type {qtype}: {e}", s.name);
                return Asked::Failed;
            }
            Err(_) => {
                tracing::debug!("dns: {} for {name} type {qtype}: timed out", s.name);
                return Asked::Failed;
            }
        };
        if cache {
            if let Ok(mut c) = self.cache.lock() {
                if c.len() > 4096 {
                    let now = Instant::now();
                    c.retain(|_, (e, _, _)| *e > now);
                }
                c.insert(key, (Instant::now() + ttl, ips.clone(), rcode));
            }
        }
        let ttl = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
        Asked::Answer(Answer { ips, ttl, rcode })
    }

    async fn query(
        &self,
        s: &Server,
        name: &str,
        qtype: u16,
    ) -> io::Result<(Vec<IpAddr>, Duration, u8)> {
        let fam = if qtype == A {
            Families {
                v4: true,
                v6: false,
            }
        } else {
            Families {
                v4: false,
                v6: true,
            }
        };
        let (host, port, tcp) = match &s.transport {
            Transport::Localhost => {
                let ips = system(name, fam).await;
                return Ok((ips, Duration::from_secs(u64::from(SYSTEM_TTL)), 0));
            }
            Transport::Fake => {
                return Err(io::Error::other("fakedns is not asked on the wire"));
            }
            Transport::Doh(d) => {
                let via = self.route_for(s);
                let r = d.query(name, qtype, s.client_ip, s.timeout, via).await?;
                return Ok(addresses_and_ttl(r));
            }
            Transport::Udp(h, p) => (h, *p, false),
            Transport::Tcp(h, p) => (h, *p, true),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let q = message::query(id, name, qtype, s.client_ip)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad name"))?;
        let reply = match self.route_for(s) {
            Some((route, tag)) => {
                let dest = Destination::new(Address::parse(host), port);
                if tcp {
                    stream_exchange(route.dial_tcp(&tag, &dest).await?, &q).await?
                } else {
                    let pc = route.dial_udp(&tag, &dest).await?;
                    pc.send_to(&q, &dest).await?;
                    let mut buf = vec![0u8; 4096];
                    loop {
                        let (n, _) = pc.recv_from(&mut buf).await?;
                        if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
                            buf.truncate(n);
                            break buf;
                        }
                    }
                }
            }
            None => {
                let addr = server_addr(host, port).await?;
                if tcp {
                    let s = tokio::net::TcpStream::connect(addr).await?;
                    stream_exchange(Box::new(s), &q).await?
                } else {
                    udp_exchange(addr, &q, id).await?
                }
            }
        };
        let r = message::parse_reply(&reply, id).map_err(io::Error::other)?;
        Ok(addresses_and_ttl(r))
    }
}

/// The addresses of a reply and how long to keep them.
fn addresses_and_ttl(r: message::Reply) -> (Vec<IpAddr>, Duration, u8) {
    let ttl = match r.ttl {
        Some(t) if !r.ips.is_empty() => Duration::from_secs(u64::from(t.max(1))),
        _ => NEGATIVE_TTL,
    };
    (r.ips, ttl, r.rcode)
}

/// Keeps what the server's `expectedIPs` allow and drops what `unexpectedIPs` name; in prefer
/// mode (`"*"`), a filter that would leave nothing is not applied.
fn filter(s: &Server, ips: Vec<IpAddr>) -> Vec<IpAddr> {
    let mut ips = ips;
    if let Some((set, prefer)) = &s.expect {
        let kept: Vec<IpAddr> = ips.iter().copied().filter(|ip| set.contains(*ip)).collect();
        if !kept.is_empty() || !prefer {
            ips = kept;
        }
    }
    if let Some((set, prefer)) = &s.unexpect {
        let kept: Vec<IpAddr> = ips
            .iter()
            .copied()
            .filter(|ip| !set.contains(*ip))
            .collect();
        if !kept.is_empty() || !prefer {
            ips = kept;
        }
    }
    ips
}

async fn server_addr(host: &str, port: u16) -> io::Result<SocketAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| io::Error::other(format!("{host}: no address")))
}

async fn udp_exchange(addr: SocketAddr, q: &[u8], id: u16) -> io::Result<Vec<u8>> {
    let local: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = tokio::net::UdpSocket::bind(local).await?;
    crate::transport::sockopt::mark_own(&socket2::SockRef::from(&sock))?;
    sock.connect(addr).await?;
    sock.send(q).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await?;
        // Replies to other ids (late answers) are skipped.
        if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

/// One query on a stream, framed with its length.
async fn stream_exchange(mut s: BoxStream, q: &[u8]) -> io::Result<Vec<u8>> {
    let mut m = (q.len() as u16).to_be_bytes().to_vec();
    m.extend_from_slice(q);
    s.write_all(&m).await?;
    let mut l = [0u8; 2];
    s.read_exact(&mut l).await?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(l))];
    s.read_exact(&mut buf).await?;
    Ok(buf)
}

/// The system resolver, filtered by family.
async fn system(name: &str, want: Families) -> Vec<IpAddr> {
    match tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((name, 0))).await {
        Ok(Ok(it)) => {
            let mut v: Vec<IpAddr> = it
                .map(|a| a.ip())
                .filter(|ip| if ip.is_ipv4() { want.v4 } else { want.v6 })
                .collect();
            v.dedup();
            v
        }
        _ => Vec::new(),
    }
}

#[async_trait::async_trait]
impl crate::proxy::dns::Resolve for Dns {
    async fn answer(&self, name: &str, v4: bool, v6: bool) -> Option<Answer> {
        self.resolve_allowing_fake(name, Families { v4, v6 }).await
    }

    async fn lookup(&self, name: &str, v4: bool, v6: bool) -> Option<Answer> {
        self.resolve(name, Families { v4, v6 }).await
    }
}
