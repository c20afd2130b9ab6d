//! The `dns` outbound (routing.md §4.8): answers the DNS that routing sends it (a
//! dokodemo-door on port 53, a `"port": 53` rule), one message at a time, over TCP (two-byte
//! length prefix) or UDP (one message per datagram).
//!
//! Each query's first question picks an action: the first `rules` entry whose `qType` and
//! `domain` match it, else A/AAAA are hijacked and the rest answered NOERROR with no records.
//! - `hijack`: A/AAAA answered from Ferry's own resolver (the `dns` object; the system's without
//!   one), other types answered with the rule's `rCode`. A lookup that gets no verdict (every
//!   server timed out) gets no answer, as in Xray.
//! - `direct`: the message goes, unchanged, to the destination (or `address`/`port`/`network`,
//!   alias `rewriteAddress`/`rewritePort`/`rewriteNetwork`) through this outbound's dialer; the
//!   upstream is dialed at the first such message and its replies come back as they are.
//! - `drop`: no answer. `return`: an answer with `rCode` (default 0) and no records.
//!
//! The older `nonIPQuery` (`reject` by default: rcode 5; `drop`; `skip` = direct) and
//! `blockTypes` are read as the rules Xray turns them into; mixing them with `rules` is an error,
//! as in Xray. Messages that carry no question are dropped.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Buf, BytesMut};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, OnceCell};
use tokio::task::JoinSet;

use super::{OutboundBuild, OutboundHandler, PacketConn};
use crate::common::dns_message::{self as message, Answer, Query, A, AAAA};
use crate::common::{Address, Destination, Network};
use crate::config::reader::{self, ConfigError, Obj, Result};
use crate::matchers::{DomainSet, DomainType};
use crate::transport::{BoxStream, Dialer};

/// dns's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    outbound: Some(build),
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["dns"])
};

/// Replies waiting for the client, per session.
const REPLY_QUEUE: usize = 64;
/// Lookups in flight per session; queries past it are dropped (with a log line).
const MAX_LOOKUPS: usize = 256;
/// How long a TCP session waits, after the client's end, for the upstream's last replies.
const DRAIN: Duration = Duration::from_secs(5);
/// The largest DNS message over TCP.
const MAX_MESSAGE: usize = 65535;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Direct,
    Drop,
    Return,
    Hijack,
}

/// One `rules` entry.
#[derive(Debug)]
struct Rule {
    action: Action,
    /// Inclusive ranges of query types; empty matches every type.
    qtypes: Vec<(u16, u16)>,
    domains: Option<DomainSet>,
    rcode: u8,
}

impl Rule {
    fn applies(&self, q: &Query) -> bool {
        (self.qtypes.is_empty()
            || self
                .qtypes
                .iter()
                .any(|(a, b)| (*a..=*b).contains(&q.qtype)))
            && self.domains.as_ref().is_none_or(|d| d.matches(&q.name))
    }
}

pub struct DnsOutbound {
    dns: Arc<dyn Resolve>,
    rules: Vec<Rule>,
    network: Option<Network>,
    address: Option<Address>,
    port: Option<u16>,
    dialer: Arc<dyn Dialer>,
}

fn parse_network(v: &Value, path: &str) -> Result<Option<Network>> {
    let s = reader::as_str(v, path)?;
    match s.to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "tcp" => Ok(Some(Network::Tcp)),
        "udp" => Ok(Some(Network::Udp)),
        other => Err(ConfigError::new(
            path,
            format!("unknown network {other:?} (tcp or udp)"),
        )),
    }
}

fn parse_rcode(o: &Obj<'_>) -> Result<u8> {
    match o.u64("rCode")? {
        None => Ok(0),
        Some(n) if n <= 65535 => Ok((n & 0x0f) as u8),
        Some(n) => Err(ConfigError::new(
            o.key_path("rCode"),
            format!("rCode out of range: {n}"),
        )),
    }
}

fn parse_rule(o: &Obj<'_>) -> Result<Rule> {
    let action = match o.req_str("action")?.to_ascii_lowercase().as_str() {
        "direct" => Action::Direct,
        "drop" => Action::Drop,
        "return" => Action::Return,
        "hijack" => Action::Hijack,
        other => {
            return Err(ConfigError::new(
                o.key_path("action"),
                format!("unknown action {other:?} (direct, drop, return or hijack)"),
            ))
        }
    };
    let qtypes = match o.get("qType") {
        Some((p, v)) => crate::config::parse_ports(v, &p)?,
        None => Vec::new(),
    };
    let domains = match o.get("domain") {
        Some((p, v)) => {
            let list = reader::as_str_list(v, &p)?;
            let assets = crate::app::router::Assets::from_env();
            Some(DomainSet::parse_with(
                &list,
                &p,
                DomainType::Substr,
                &assets,
            )?)
        }
        None => None,
    };
    Ok(Rule {
        action,
        qtypes,
        domains,
        rcode: parse_rcode(o)?,
    })
}

/// The rules Xray builds from `nonIPQuery` and `blockTypes`.
fn legacy_rules(o: &Obj<'_>) -> Result<Vec<Rule>> {
    let mode = o
        .str("nonIPQuery")?
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "reject".into());
    let (other, rcode) = match mode.as_str() {
        "reject" => (Action::Return, 5),
        "drop" => (Action::Drop, 0),
        "skip" => (Action::Direct, 0),
        m => {
            return Err(ConfigError::new(
                o.key_path("nonIPQuery"),
                format!("unknown nonIPQuery {m:?} (reject, drop or skip)"),
            ))
        }
    };
    let mut rules = Vec::new();
    if let Some((p, v)) = o.get("blockTypes") {
        let Value::Array(items) = v else {
            return Err(ConfigError::new(p, "expected an array of query types"));
        };
        let mut qtypes = Vec::new();
        for (i, t) in items.iter().enumerate() {
            let t = t
                .as_u64()
                .and_then(|t| u16::try_from(t).ok())
                .ok_or_else(|| {
                    ConfigError::new(
                        format!("{p}[{i}]"),
                        format!("{} is not a query type (0-65535)", reader::show(t)),
                    )
                })?;
            qtypes.push((t, t));
        }
        if !qtypes.is_empty() {
            let reject = mode == "reject";
            rules.push(Rule {
                action: if reject { Action::Return } else { Action::Drop },
                qtypes,
                domains: None,
                rcode: if reject { 5 } else { 0 },
            });
        }
    }
    rules.push(Rule {
        action: Action::Hijack,
        qtypes: vec![(A, A), (AAAA, AAAA)],
        domains: None,
        rcode: 0,
    });
    rules.push(Rule {
        action: other,
        qtypes: Vec::new(),
        domains: None,
        rcode,
    });
    Ok(rules)
}

pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    Ok(Arc::new(Shared(Arc::new(parse(o, b)?))))
}

fn parse(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<DnsOutbound> {
    // The newer spelling is read first; the older one, when given, wins (as in Xray).
    let mut network = None;
    for k in ["rewriteNetwork", "network"] {
        if let Some((p, v)) = o.get(k) {
            if let Some(n) = parse_network(v, &p)? {
                network = Some(n);
            }
        }
    }
    let mut address = None;
    for k in ["rewriteAddress", "address"] {
        if let Some(a) = o.str(k)?.filter(|a| !a.is_empty()) {
            address = Some(Address::parse(&a));
        }
    }
    let mut port = None;
    for k in ["rewritePort", "port"] {
        if let Some(p) = o.port(k)?.filter(|p| *p != 0) {
            port = Some(p);
        }
    }
    super::socks::user_level(o)?;
    let legacy = o.has("nonIPQuery") || o.has("blockTypes");
    let rules = if legacy {
        if o.has("rules") {
            return Err(ConfigError::new(
                o.key_path("rules"),
                "legacy nonIPQuery and blockTypes cannot be mixed with rules",
            ));
        }
        b.diag.warn(
            o.path(),
            "\"nonIPQuery\" and \"blockTypes\" are deprecated; read as the \"rules\" Xray makes of them",
        );
        legacy_rules(o)?
    } else {
        let mut rules = Vec::new();
        for r in o.objs(&["rules"])? {
            rules.push(parse_rule(&r)?);
            r.finish();
        }
        rules
    };
    Ok(DnsOutbound {
        dns: b.dns.clone(),
        rules,
        network,
        address,
        port,
        dialer: b.dialer.clone(),
    })
}

/// What to do with one message.
enum Step {
    /// Answer at once.
    Reply(Vec<u8>),
    /// Resolve, then answer.
    Lookup(Query),
    /// Send upstream unchanged.
    Forward,
    Drop,
}

impl DnsOutbound {
    fn decide(&self, msg: &[u8]) -> Step {
        let Some(q) = message::parse_query(msg) else {
            tracing::debug!("dns out: a message without a readable question, dropped");
            return Step::Drop;
        };
        let (action, rcode) = self
            .rules
            .iter()
            .find(|r| r.applies(&q))
            .map(|r| (r.action, r.rcode))
            .unwrap_or(if q.qtype == A || q.qtype == AAAA {
                (Action::Hijack, 0)
            } else {
                (Action::Return, 0)
            });
        match action {
            Action::Drop => {
                tracing::info!("dns out: dropped type {} query for {}", q.qtype, q.name);
                Step::Drop
            }
            Action::Return => {
                tracing::info!(
                    "dns out: answered type {} query for {} with rcode {rcode}",
                    q.qtype,
                    q.name
                );
                Step::Reply(message::reply(&q, rcode, &[], 0))
            }
            Action::Hijack if q.qtype == A || q.qtype == AAAA => Step::Lookup(q),
            Action::Hijack => {
                tracing::warn!(
                    "dns out: only A and AAAA can be hijacked; type {} query for {} answered with rcode {rcode}",
                    q.qtype,
                    q.name
                );
                Step::Reply(message::reply(&q, rcode, &[], 0))
            }
            Action::Direct => Step::Forward,
        }
    }

    /// Where direct queries go, and over which network.
    fn upstream_dest(&self, dest: &Destination, source: Network) -> (Destination, Network) {
        let mut d = dest.clone();
        if let Some(a) = &self.address {
            d.addr = a.clone();
        }
        if let Some(p) = self.port {
            d.port = p;
        }
        (d, self.network.unwrap_or(source))
    }
}

/// The instance's resolver (the `dns` object's, FakeDNS included) as this outbound asks it:
/// `app::dns` provides it.
#[async_trait]
pub trait Resolve: Send + Sync {
    /// The addresses of `name` of the families a query asks (`v4`: A, `v6`: AAAA), or `None`
    /// when the lookup got no verdict.
    async fn answer(&self, name: &str, v4: bool, v6: bool) -> Option<Answer>;
}

/// The answer to a hijacked query, or `None` when the lookup got no verdict.
async fn lookup(dns: &dyn Resolve, q: Query) -> Option<Vec<u8>> {
    match dns.answer(&q.name, q.qtype == A, q.qtype == AAAA).await {
        Some(a) => Some(message::reply(&q, a.rcode, &a.ips, a.ttl)),
        None => {
            tracing::info!("dns out: no answer for {} (type {})", q.name, q.qtype);
            None
        }
    }
}

/// Where direct queries go: a stream (messages framed with their length) or packets.
enum Upstream {
    Stream(tokio::sync::Mutex<WriteHalf<BoxStream>>),
    Packets(Arc<dyn PacketConn>, Destination),
}

impl Upstream {
    /// Dials `dest` and starts the task that hands its replies to `replies`.
    async fn dial(
        dialer: &dyn Dialer,
        dest: Destination,
        network: Network,
        replies: mpsc::Sender<Vec<u8>>,
        tasks: &Mutex<JoinSet<()>>,
    ) -> io::Result<Upstream> {
        tracing::info!("dns out: forwarding to {dest} over {network}");
        match network {
            Network::Tcp => {
                let s = dialer.dial_tcp(&dest).await?;
                let (r, w) = tokio::io::split(s);
                spawn(tasks, read_stream_replies(r, replies));
                Ok(Upstream::Stream(tokio::sync::Mutex::new(w)))
            }
            Network::Udp => {
                let pc: Arc<dyn PacketConn> = Arc::from(dialer.dial_udp(&dest).await?);
                let reader = pc.clone();
                spawn(tasks, async move {
                    let mut buf = vec![0u8; MAX_MESSAGE];
                    while let Ok((n, _)) = reader.recv_from(&mut buf).await {
                        if replies.send(buf[..n].to_vec()).await.is_err() {
                            break;
                        }
                    }
                });
                Ok(Upstream::Packets(pc, dest))
            }
        }
    }

    async fn send(&self, msg: &[u8]) -> io::Result<()> {
        match self {
            Upstream::Stream(w) => {
                let mut w = w.lock().await;
                w.write_all(&frame(msg)?).await
            }
            Upstream::Packets(pc, dest) => pc.send_to(msg, dest).await,
        }
    }

    /// Tells a stream upstream that no more queries come.
    async fn finish(&self) {
        if let Upstream::Stream(w) = self {
            let _ = w.lock().await.shutdown().await;
        }
    }
}

fn spawn(tasks: &Mutex<JoinSet<()>>, f: impl std::future::Future<Output = ()> + Send + 'static) {
    let mut t = tasks.lock().unwrap_or_else(|e| e.into_inner());
    // Finished tasks are reaped here, so the set holds only live ones.
    while t.try_join_next().is_some() {}
    t.spawn(f);
}

fn frame(msg: &[u8]) -> io::Result<Vec<u8>> {
    let len = u16::try_from(msg.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "DNS message over 65535 bytes"))?;
    let mut m = Vec::with_capacity(2 + msg.len());
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(msg);
    Ok(m)
}

async fn read_stream_replies(mut r: ReadHalf<BoxStream>, replies: mpsc::Sender<Vec<u8>>) {
    let mut l = [0u8; 2];
    loop {
        if r.read_exact(&mut l).await.is_err() {
            return;
        }
        let mut m = vec![0u8; usize::from(u16::from_be_bytes(l))];
        if r.read_exact(&mut m).await.is_err() || replies.send(m).await.is_err() {
            return;
        }
    }
}

/// One session's state: the replies queue, the lookups and upstream reader in flight (ended
/// with the session), and the upstream once dialed.
struct Session {
    out: Arc<DnsOutbound>,
    replies: mpsc::Sender<Vec<u8>>,
    tasks: Mutex<JoinSet<()>>,
    upstream: OnceCell<Upstream>,
    dest: Destination,
    source: Network,
}

impl Session {
    fn new(
        out: Arc<DnsOutbound>,
        dest: Destination,
        source: Network,
    ) -> (Session, mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel(REPLY_QUEUE);
        (
            Session {
                out,
                replies: tx,
                tasks: Mutex::new(JoinSet::new()),
                upstream: OnceCell::new(),
                dest,
                source,
            },
            rx,
        )
    }

    /// Handles one message from the client; an error ends the session (the upstream could
    /// not be dialed or written).
    async fn handle(&self, msg: &[u8]) -> io::Result<()> {
        match self.out.decide(msg) {
            Step::Drop => {}
            Step::Reply(r) => {
                if self.replies.try_send(r).is_err() {
                    tracing::info!("dns out: reply queue full, an answer is dropped");
                }
            }
            Step::Lookup(q) => {
                let busy = self.tasks.lock().map(|t| t.len()).unwrap_or(0);
                if busy >= MAX_LOOKUPS {
                    tracing::info!(
                        "dns out: {MAX_LOOKUPS} lookups in flight; query for {} dropped",
                        q.name
                    );
                    return Ok(());
                }
                let (dns, tx) = (self.out.dns.clone(), self.replies.clone());
                spawn(&self.tasks, async move {
                    if let Some(r) = lookup(&*dns, q).await {
                        let _ = tx.send(r).await;
                    }
                });
            }
            Step::Forward => {
                let up = self
                    .upstream
                    .get_or_try_init(|| {
                        let (d, n) = self.out.upstream_dest(&self.dest, self.source);
                        Upstream::dial(
                            self.out.dialer.as_ref(),
                            d,
                            n,
                            self.replies.clone(),
                            &self.tasks,
                        )
                    })
                    .await?;
                up.send(msg).await?;
            }
        }
        Ok(())
    }
}

/// Serves one TCP session on the far end of the stream the relay got.
async fn serve_stream(
    session: Session,
    mut replies: mpsc::Receiver<Vec<u8>>,
    s: tokio::io::DuplexStream,
) {
    let (mut r, mut w) = tokio::io::split(s);
    let mut buf = BytesMut::with_capacity(1024);
    let mut client_done = false;
    loop {
        // Complete messages first.
        while buf.len() >= 2 {
            let n = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
            if buf.len() < 2 + n {
                buf.reserve(2 + n - buf.len());
                break;
            }
            buf.advance(2);
            let msg = buf.split_to(n);
            if let Err(e) = session.handle(&msg).await {
                tracing::info!("dns out: {e}");
                return;
            }
        }
        if client_done {
            break;
        }
        tokio::select! {
            n = r.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => client_done = true,
                Ok(_) => {}
            },
            m = replies.recv() => {
                let Some(m) = m else { return };
                let Ok(f) = frame(&m) else { continue };
                if w.write_all(&f).await.is_err() {
                    return;
                }
            }
        }
    }
    // The client has sent everything: the answers still coming (lookups in flight, the
    // upstream's last replies) are written for at most DRAIN, then the end.
    if let Some(up) = session.upstream.get() {
        up.finish().await;
    }
    let _in_flight = std::mem::take(&mut *session.tasks.lock().unwrap_or_else(|e| e.into_inner()));
    drop(session);
    let deadline = tokio::time::sleep(DRAIN);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            m = replies.recv() => {
                let Some(m) = m else { break };
                let Ok(f) = frame(&m) else { continue };
                if w.write_all(&f).await.is_err() {
                    return;
                }
            }
            _ = &mut deadline => break,
        }
    }
    let _ = w.shutdown().await;
}

/// The packet channel of one UDP session: queries go in with `send_to`, answers and the
/// upstream's replies come out of `recv_from` as from the session's destination.
struct DnsPackets {
    session: Session,
    replies: tokio::sync::Mutex<mpsc::Receiver<Vec<u8>>>,
}

#[async_trait]
impl PacketConn for DnsPackets {
    async fn send_to(&self, data: &[u8], _dest: &Destination) -> io::Result<()> {
        self.session.handle(data).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let m = self
            .replies
            .lock()
            .await
            .recv()
            .await
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "dns session ended"))?;
        let n = m.len().min(buf.len());
        buf[..n].copy_from_slice(&m[..n]);
        Ok((n, self.session.dest.clone()))
    }
}

/// The handler is shared by every session; each session keeps it alive.
struct Shared(Arc<DnsOutbound>);

#[async_trait]
impl OutboundHandler for Shared {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let (near, far) = tokio::io::duplex(MAX_MESSAGE + 2);
        let (session, replies) = Session::new(self.0.clone(), dest.clone(), Network::Tcp);
        tokio::spawn(serve_stream(session, replies, far));
        Ok(Box::new(near))
    }

    fn dns_forward(&self, dest: &Destination) -> Option<(Arc<dyn Dialer>, Destination)> {
        let (to, _) = self.0.upstream_dest(dest, Network::Udp);
        Some((self.0.dialer.clone(), to))
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let (session, replies) = Session::new(self.0.clone(), dest.clone(), Network::Udp);
        Ok(Box::new(DnsPackets {
            session,
            replies: tokio::sync::Mutex::new(replies),
        }))
    }
}
