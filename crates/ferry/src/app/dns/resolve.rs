//! Lookups (routing.md §4.4–4.6): hosts first, then the servers in Xray's order, each answer
//! filtered by the server's expected/unexpected IPs, the first non-empty one winning; answers
//! cached per server, name and type until their TTL runs out.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::message::{self, A, AAAA};
use super::{Families, HostRule, HostValue, Server, Transport};
use crate::app::router::{Assets, DomainSet, DomainType};

/// How long an answer without records (NXDOMAIN, NODATA) is kept.
const NEGATIVE_TTL: Duration = Duration::from_secs(300);

/// (server index, name, query type).
type CacheKey = (usize, String, u16);

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
    cache: Mutex<HashMap<CacheKey, (Instant, Vec<IpAddr>)>>,
    next_id: AtomicU16,
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
            next_id: AtomicU16::new({
                let mut b = [0u8; 2];
                crate::common::rand::fill(&mut b);
                u16::from_ne_bytes(b)
            }),
        }
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
        let want = want.and(self.families);
        let mut name = name.trim_end_matches('.').to_ascii_lowercase();
        for _ in 0..5 {
            match self.hosts(&name) {
                Some(HostValue::Ips(v)) => {
                    return v
                        .into_iter()
                        .filter(|ip| if ip.is_ipv4() { want.v4 } else { want.v6 })
                        .collect()
                }
                Some(HostValue::Rcode(_)) => return Vec::new(),
                Some(HostValue::Alias(a)) => name = a,
                None => break,
            }
        }
        if self.servers.is_empty() {
            return system(&name, want).await;
        }
        for i in self.order(&name) {
            let s = &self.servers[i];
            let fam = want.and(s.families);
            let mut ips = Vec::new();
            if fam.v4 {
                ips.extend(self.ask(i, &name, A).await);
            }
            if fam.v6 {
                ips.extend(self.ask(i, &name, AAAA).await);
            }
            let ips = filter(s, ips);
            if !ips.is_empty() {
                return ips;
            }
        }
        Vec::new()
    }

    /// One server, one type: from the cache or the wire (errors give no addresses).
    async fn ask(&self, i: usize, name: &str, qtype: u16) -> Vec<IpAddr> {
        let s = &self.servers[i];
        let key = (i, name.to_string(), qtype);
        let cache = !(self.disable_cache || s.disable_cache);
        if cache {
            if let Some((exp, v)) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
                if exp > Instant::now() {
                    return v;
                }
            }
        }
        let r = tokio::time::timeout(s.timeout, self.query(s, name, qtype)).await;
        let (ips, ttl) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                tracing::debug!("dns: {} for {name} type {qtype}: {e}", s.name);
                return Vec::new();
            }
            Err(_) => {
                tracing::debug!("dns: {} for {name} type {qtype}: timed out", s.name);
                return Vec::new();
            }
        };
        if cache {
            if let Ok(mut c) = self.cache.lock() {
                if c.len() > 4096 {
                    let now = Instant::now();
                    c.retain(|_, (e, _)| *e > now);
                }
                c.insert(key, (Instant::now() + ttl, ips.clone()));
            }
        }
        ips
    }

    async fn query(
        &self,
        s: &Server,
        name: &str,
        qtype: u16,
    ) -> io::Result<(Vec<IpAddr>, Duration)> {
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
                return Ok((system(name, fam).await, Duration::from_secs(60)));
            }
            Transport::Doh(d) => {
                let r = d.query(name, qtype, s.client_ip, s.timeout).await?;
                return Ok(addresses_and_ttl(r));
            }
            Transport::Udp(h, p) => (h, *p, false),
            Transport::Tcp(h, p) => (h, *p, true),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let q = message::query(id, name, qtype, s.client_ip)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad name"))?;
        let addr = server_addr(host, port).await?;
        let reply = if tcp {
            tcp_exchange(addr, &q).await?
        } else {
            udp_exchange(addr, &q, id).await?
        };
        let r = message::parse_reply(&reply, id).map_err(io::Error::other)?;
        Ok(addresses_and_ttl(r))
    }
}

/// The addresses of a reply and how long to keep them.
fn addresses_and_ttl(r: message::Reply) -> (Vec<IpAddr>, Duration) {
    let ttl = match r.ttl {
        Some(t) if !r.ips.is_empty() => Duration::from_secs(u64::from(t.max(1))),
        _ => NEGATIVE_TTL,
    };
    (r.ips, ttl)
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

async fn tcp_exchange(addr: SocketAddr, q: &[u8]) -> io::Result<Vec<u8>> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
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
