//! The server's accept path (transports2.md §1.3): dial the target, mirror the client's
//! ClientHello to it, authenticate; a stranger is spliced to the target and sees the real site
//! byte for byte; our client gets a TLS 1.3 handshake built on the target's own ServerHello,
//! each encrypted record padded to the length of the target's, with the HMAC-signed temporary
//! certificate.
//!
//! The decisions are pure functions ([`authenticate`], [`TargetFlight::parse`], [`respond`])
//! that tests drive with bytes; [`Server::accept`] only moves bytes between sockets.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::cert::Temporary;
use super::client::verify_content;
use super::hello::{self, ClientHello, ServerHello};
use super::keys::{self, Schedule, Suite, TrafficKey, Transcript};
use super::record;
use super::stream::Direction;
use super::ServerSettings;
use crate::session::ConnInfo;
use crate::transport::tls13::Tls13Stream;
use crate::transport::{BoxStream, Dialer, SocketDialer};

/// Largest ClientHello the server waits for (Chrome's with ML-KEM is ~1.9 KB).
const MAX_HELLO: usize = 16 * 1024;
/// Largest first flight read from the target (Xray reads it into an 8 KiB buffer).
const MAX_FLIGHT: usize = 8192;
/// An encrypted record of the target longer than this is the whole flight in one record.
const COMBINED: usize = 512;
/// A target quiet this long after sending whole records has sent its first flight.
const FLIGHT_QUIET: Duration = Duration::from_secs(1);
/// The longest an accept may take. There is no handshake timeout: as with Xray, the target
/// ends a stranger's connection when it would end it (a silent or cut ClientHello, a
/// handshake left unfinished), and the prober sees the target's timing; this only bounds a
/// target that never ends anything.
pub const ACCEPT_CAP: Duration = Duration::from_secs(300);

/// The server side of a REALITY inbound.
pub struct Server {
    pub settings: ServerSettings,
    cert: Temporary,
    seen: std::sync::Mutex<Seen>,
    /// The lengths of the records the target sends after its handshake, per server name and
    /// ALPN class (§1.3 step 7): measured once, in the background, from the first connection.
    post: std::sync::Mutex<std::collections::HashMap<(String, u8), Post>>,
}

#[derive(Clone)]
enum Post {
    Measuring,
    Known(Arc<[usize]>),
}

/// The ALPN class of a ClientHello, as Xray groups them: 0 none, 1 http/1.1 first, 2 h2 first.
pub fn alpn_class(ch: &ClientHello) -> u8 {
    match ch.alpn.first().map(Vec::as_slice) {
        Some(b"h2") => 2,
        Some(b"http/1.1") => 1,
        _ => 0,
    }
}

/// Shakes hands with the target as a browser of ALPN `class` would for `sni` and returns the
/// lengths of the application-data records it sends after the handshake (its session tickets),
/// collected until it is quiet for a second (five at most).
pub async fn measure_post_handshake(
    target: &crate::common::Destination,
    xver: u8,
    sni: &str,
    class: u8,
) -> io::Result<Vec<usize>> {
    let dialer = SocketDialer {
        opts: Default::default(),
    };
    let mut io = dialer.dial_tcp(target).await?;
    if xver > 0 {
        let lo = crate::session::Endpoint::Ip(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        io.write_all(&crate::transport::proxy_protocol::encode(xver, &lo, &lo))
            .await?;
    }
    let alpn: &[&str] = match class {
        0 => &[],
        1 => &["http/1.1"],
        _ => &["h2", "http/1.1"],
    };
    let (mut ch, keys) = hello::build_with_alpn(&super::fingerprint::CHROME, Some(sni), alpn);
    crate::common::rand::fill(&mut ch[hello::SESSION_ID_AT..hello::SESSION_ID_AT + 32]);
    let h = super::client::handshake(&mut io, &ch, &keys, 0x0301, None, None).await?;
    let mut buf = h.held;
    let mut lengths = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        while let Some(n) = record::complete(&buf) {
            if buf[0] == record::APPLICATION_DATA {
                lengths.push(n);
            }
            buf.drain(..n);
        }
        let wait = end
            .saturating_duration_since(tokio::time::Instant::now())
            .min(Duration::from_secs(1));
        let at = buf.len();
        buf.resize(at + 4096, 0);
        match tokio::time::timeout(wait, io.read(&mut buf[at..])).await {
            Ok(Ok(n)) if n > 0 => buf.truncate(at + n),
            _ => break,
        }
    }
    Ok(lengths)
}

/// ClientHello randoms already accepted: a replayed hello is a prober's and goes to the target
/// (Xray v26.3 answers a replay with a handshake the replayer cannot finish; Ferry does not
/// answer it at all). Kept for the whole window the time check lets a hello through
/// ([`replay_ttl`]), at most [`SEEN_MAX`] of them (bounded memory: ~20 MB).
#[derive(Default)]
struct Seen {
    order: std::collections::VecDeque<(std::time::Instant, [u8; 32])>,
    set: std::collections::HashSet<[u8; 32]>,
}

const SEEN_MAX: usize = 200_000;

/// How long an accepted ClientHello is remembered. Its timestamp passes the time check from
/// `maxTimeDiff` before it to `maxTimeDiff` after it, so one first seen at the early edge is
/// still accepted 2 x `maxTimeDiff` later: it is kept that long. Without `maxTimeDiff` any
/// time passes and only this cache stands: an hour, bounded by [`SEEN_MAX`].
fn replay_ttl(max_time_diff: Option<Duration>) -> Duration {
    match max_time_diff {
        Some(d) if !d.is_zero() => d.saturating_mul(2),
        _ => Duration::from_secs(3600),
    }
}

impl Seen {
    /// Records `random`; false when it was already there.
    fn insert(&mut self, random: [u8; 32], ttl: Duration) -> bool {
        let now = std::time::Instant::now();
        while let Some((t, r)) = self.order.front() {
            if now.duration_since(*t) < ttl && self.order.len() < SEEN_MAX {
                break;
            }
            self.set.remove(r);
            self.order.pop_front();
        }
        if !self.set.insert(random) {
            return false;
        }
        self.order.push_back((now, random));
        true
    }
}

/// Why a ClientHello is not one of ours (logged; the connection goes to the target).
#[derive(Debug, PartialEq, Eq)]
pub enum Stranger {
    NotTls13,
    Sni(Option<String>),
    NoX25519Share,
    SessionId,
    Version([u8; 3]),
    Time(i64),
    ShortId([u8; 8]),
}

impl std::fmt::Display for Stranger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stranger::NotTls13 => f.write_str("no TLS 1.3 offered"),
            Stranger::Sni(s) => write!(f, "server name {s:?} not in serverNames"),
            Stranger::NoX25519Share => f.write_str("no X25519 key share"),
            Stranger::SessionId => f.write_str("session id not sealed for this key"),
            Stranger::Version(v) => write!(
                f,
                "client version {}.{}.{} outside the window",
                v[0], v[1], v[2]
            ),
            Stranger::Time(d) => write!(f, "client clock {d} ms off"),
            Stranger::ShortId(s) => {
                write!(f, "short id {} not listed", crate::transport::tls::hex(s))
            }
        }
    }
}

impl Stranger {
    /// A short stable name for the rejection counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Stranger::NotTls13 => "not-tls13",
            Stranger::Sni(_) => "server-name",
            Stranger::NoX25519Share => "key-share",
            Stranger::SessionId => "session-id",
            Stranger::Version(_) => "client-version",
            Stranger::Time(_) => "clock",
            Stranger::ShortId(_) => "short-id",
        }
    }
}

/// A connection that was not REALITY's, handed to the target: the error the acceptor chain
/// returns, so the inbound logs and counts it as a rejected handshake.
#[derive(Debug)]
pub struct Probe {
    pub reason: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "REALITY: {}", self.detail)
    }
}

impl std::error::Error for Probe {}

/// What an authenticated ClientHello carries.
#[derive(Debug)]
pub struct Authenticated {
    pub auth: [u8; 32],
    pub version: [u8; 3],
    pub short_id: [u8; 8],
}

/// Checks a ClientHello in Xray's order: TLS 1.3, SNI, key share, session id, version window,
/// time, short id. `now_ms`: our clock.
pub fn authenticate(
    ch: &ClientHello,
    s: &ServerSettings,
    now_ms: i64,
) -> Result<Authenticated, Stranger> {
    if !ch.versions.contains(&hello::TLS13) {
        return Err(Stranger::NotTls13);
    }
    let sni = ch.sni.clone().unwrap_or_default();
    if !s.server_names.contains(&sni) {
        return Err(Stranger::Sni(ch.sni.clone()));
    }
    let peer = match ch.share(hello::X25519).filter(|k| k.len() == 32) {
        Some(k) => k,
        None => match ch.share(hello::X25519MLKEM768) {
            Some(k) if k.len() == hello::MLKEM_CLIENT_SHARE => &k[1184..],
            _ => return Err(Stranger::NoX25519Share),
        },
    };
    let shared = keys::x25519(&s.private_key, peer).ok_or(Stranger::NoX25519Share)?;
    let auth = keys::auth_key(&shared, &ch.random);
    let aad = ch.zeroed_session_id().ok_or(Stranger::SessionId)?;
    let sid: [u8; 32] = ch
        .session_id
        .as_slice()
        .try_into()
        .map_err(|_| Stranger::SessionId)?;
    let plain = keys::open_session_id(&auth, &ch.random, &sid, &aad).ok_or(Stranger::SessionId)?;
    let version = [plain[0], plain[1], plain[2]];
    let v = |x: [u8; 3]| u32::from_be_bytes([0, x[0], x[1], x[2]]);
    if s.min_client_ver.is_some_and(|m| v(version) < v(m))
        || s.max_client_ver.is_some_and(|m| v(version) > v(m))
    {
        return Err(Stranger::Version(version));
    }
    if let Some(max) = s.max_time_diff {
        let t = u32::from_be_bytes([plain[4], plain[5], plain[6], plain[7]]) as i64 * 1000;
        let d = now_ms - t;
        if d.unsigned_abs() > max.as_millis() as u64 {
            return Err(Stranger::Time(d));
        }
    }
    let short_id: [u8; 8] = crate::common::array(&plain[8..]);
    if !s.short_ids.contains(&short_id) {
        return Err(Stranger::ShortId(short_id));
    }
    Ok(Authenticated {
        auth,
        version,
        short_id,
    })
}

/// The target's first flight, as REALITY requires it (§1.3 step 5).
#[derive(Debug)]
pub struct TargetFlight {
    pub server_hello: ServerHello,
    /// The record header of the ServerHello record.
    pub sh_header: [u8; 5],
    /// Total lengths (header included) of the encrypted records: one (combined) or four
    /// (EncryptedExtensions, Certificate, CertificateVerify, Finished), then the ticket's if
    /// it came in the same read.
    pub lengths: Vec<usize>,
    pub combined: bool,
    pub ticket: Option<usize>,
}

/// Why the target's flight cannot be imitated.
#[derive(Debug, PartialEq, Eq)]
pub enum FlightError {
    /// The first record is not a TLS 1.3 ServerHello Ferry can answer on: the client is
    /// spliced to the target like a prober.
    NotServerHello(&'static str),
    /// A later record breaks the shape: close.
    Shape(&'static str),
}

impl TargetFlight {
    /// Parses what the target sent so far: `Ok(None)` while more is needed.
    pub fn parse(b: &[u8]) -> Result<Option<TargetFlight>, FlightError> {
        Self::parse_at(b, false)
    }

    /// As [`TargetFlight::parse`], for a target that went quiet: one encrypted record that ends
    /// what it sent is its whole flight, however short (rustls with a small certificate sends
    /// EncryptedExtensions..Finished in one record of a few hundred bytes, under Xray's 512-byte
    /// rule, and then waits for the client).
    pub fn parse_quiet(b: &[u8]) -> Result<Option<TargetFlight>, FlightError> {
        Self::parse_at(b, true)
    }

    fn parse_at(b: &[u8], quiet: bool) -> Result<Option<TargetFlight>, FlightError> {
        use FlightError::*;
        let Some(n0) = record::complete(b) else {
            if b.len() >= 5
                && (b[0] != record::HANDSHAKE
                    || record::header(b).is_some_and(|(_, l)| l > MAX_FLIGHT))
            {
                return Err(NotServerHello("first record"));
            }
            return Ok(None);
        };
        if b[0] != record::HANDSHAKE || b[1..3] != [3, 3] {
            return Err(NotServerHello("first record"));
        }
        let sh = ServerHello::parse(&b[5..n0]).map_err(|e| NotServerHello(e.0))?;
        if sh.version != Some(hello::TLS13) || Suite::from_id(sh.suite).is_none() {
            return Err(NotServerHello("not TLS 1.3"));
        }
        match (sh.group, sh.share.len()) {
            (hello::X25519, 32) | (hello::X25519MLKEM768, hello::MLKEM_SERVER_SHARE) => {}
            _ => return Err(NotServerHello("key share group")),
        }
        let mut at = n0;
        let Some(n1) = record::complete(&b[at..]) else {
            return Ok(None);
        };
        if b[at..at + n1] != [20, 3, 3, 0, 1, 1] {
            return Err(Shape("no ChangeCipherSpec"));
        }
        at += n1;
        let mut lengths = Vec::new();
        let mut combined = false;
        while lengths.len() < 4 {
            let Some(n) = record::complete(&b[at..]) else {
                if b.len() - at >= 5
                    && record::header(&b[at..]).is_some_and(|(_, l)| l > MAX_FLIGHT)
                {
                    return Err(Shape("record too long"));
                }
                return Ok(None);
            };
            if b[at] != record::APPLICATION_DATA {
                return Err(Shape("not application data"));
            }
            lengths.push(n);
            at += n;
            if lengths.len() == 1 && (n > COMBINED || (quiet && at == b.len())) {
                combined = true;
                break;
            }
        }
        let ticket = record::complete(&b[at..]).filter(|_| b[at] == record::APPLICATION_DATA);
        Ok(Some(TargetFlight {
            sh_header: crate::common::array(&b[..5]),
            server_hello: sh,
            lengths,
            combined,
            ticket,
        }))
    }
}

/// The handshake the server sends an authenticated client, and what it needs to go on.
pub struct Answer {
    pub bytes: Vec<u8>,
    pub suite: Suite,
    pub transcript: Transcript,
    pub schedule: Schedule,
    /// The server's application direction (its sequence number past the fake ticket).
    pub write: Direction,
}

fn pad_to(total: usize, content: usize) -> Result<usize, FlightError> {
    (total)
        .checked_sub(record::HEADER + content + 1 + record::TAG)
        .ok_or(FlightError::Shape(
            "our handshake message is longer than the target's record",
        ))
}

/// Builds the answer to an authenticated ClientHello on top of the target's flight.
#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "checked by the parser before this step"
)]
pub fn respond(
    ch: &ClientHello,
    a: &Authenticated,
    t: &TargetFlight,
    cert: &Temporary,
) -> Result<Answer, FlightError> {
    use FlightError::Shape;
    let suite = Suite::from_id(t.server_hello.suite).expect("checked in parse");
    let mut sh = t.server_hello.raw.clone();
    let share = t.server_hello.share.clone();
    let mut eph = [0u8; 32];
    crate::common::rand::fill(&mut eph);
    let eph_pub = keys::x25519_public(&eph);
    let shared = match t.server_hello.group {
        hello::X25519 => {
            let peer = ch
                .share(hello::X25519)
                .ok_or(Shape("client has no X25519 share"))?;
            sh[share].copy_from_slice(&eph_pub);
            keys::x25519(&eph, peer)
                .ok_or(Shape("bad client share"))?
                .to_vec()
        }
        _ => {
            use aws_lc_rs::kem::{EncapsulationKey, ML_KEM_768};
            let peer = ch
                .share(hello::X25519MLKEM768)
                .filter(|k| k.len() == hello::MLKEM_CLIENT_SHARE)
                .ok_or(Shape("client has no X25519MLKEM768 share"))?;
            let ek = EncapsulationKey::new(&ML_KEM_768, &peer[..1184])
                .map_err(|_| Shape("bad ML-KEM key"))?;
            let (ct, ss) = ek.encapsulate().map_err(|_| Shape("ML-KEM"))?;
            sh[share.start..share.start + 1088].copy_from_slice(ct.as_ref());
            sh[share.start + 1088..share.end].copy_from_slice(&eph_pub);
            let mut s = ss.as_ref().to_vec();
            s.extend_from_slice(
                &keys::x25519(&eph, &peer[1184..]).ok_or(Shape("bad client share"))?,
            );
            s
        }
    };
    let mut transcript = Transcript::new(suite.hash());
    transcript.add(&ch.raw);
    transcript.add(&sh);
    let schedule = Schedule::new(suite, &shared, &transcript.current());

    let mut ee = Vec::new();
    hello::message(hello::ENCRYPTED_EXTENSIONS, &[0, 0], &mut ee);
    transcript.add(&ee);
    let der = cert.der_for(&a.auth, &ch.raw, &sh);
    let mut body = vec![0u8];
    let entry_len = 3 + der.len() + 2;
    body.extend_from_slice(&(entry_len as u32).to_be_bytes()[1..]);
    body.extend_from_slice(&(der.len() as u32).to_be_bytes()[1..]);
    body.extend_from_slice(&der);
    body.extend_from_slice(&[0, 0]);
    let mut certificate = Vec::new();
    hello::message(hello::CERTIFICATE, &body, &mut certificate);
    transcript.add(&certificate);
    let sig = cert.sign(&verify_content(true, &transcript.current()));
    let mut cv_body = vec![0x08, 0x07, 0, 64];
    cv_body.extend_from_slice(&sig);
    let mut cv = Vec::new();
    hello::message(hello::CERTIFICATE_VERIFY, &cv_body, &mut cv);
    transcript.add(&cv);
    let mut fin = Vec::new();
    hello::message(
        hello::FINISHED,
        &schedule.finished(&schedule.server_hs, &transcript.current()),
        &mut fin,
    );
    transcript.add(&fin);

    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(&t.sh_header[..3]);
    out.extend_from_slice(&(sh.len() as u16).to_be_bytes());
    out.extend_from_slice(&sh);
    out.extend_from_slice(&[20, 3, 3, 0, 1, 1]);
    let mut key = TrafficKey::new(suite, &schedule.server_hs);
    if t.combined {
        let all = [ee, certificate, cv, fin].concat();
        record::seal(
            &mut key,
            record::HANDSHAKE,
            &all,
            pad_to(t.lengths[0], all.len())?,
            &mut out,
        );
    } else {
        for (m, len) in [ee, certificate, cv, fin].iter().zip(&t.lengths) {
            record::seal(
                &mut key,
                record::HANDSHAKE,
                m,
                pad_to(*len, m.len())?,
                &mut out,
            );
        }
    }
    let (_, s_ap) = schedule.application(&transcript.current());
    let mut write = Direction::new(suite, s_ap);
    if let Some(len) = t.ticket {
        // Where the target sent a ticket, an empty application-data record of its length.
        record::seal(
            &mut write.key,
            record::APPLICATION_DATA,
            &[],
            pad_to(len, 0)?,
            &mut out,
        );
    }
    Ok(Answer {
        bytes: out,
        suite,
        transcript,
        schedule,
        write,
    })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

fn closed(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, format!("REALITY: {msg}"))
}

impl Server {
    pub fn new(settings: ServerSettings) -> Result<Server, String> {
        let cert = match &settings.mldsa65_seed {
            None => Temporary::generate(),
            Some(seed) => Temporary::generate()
                .with_mldsa65(seed)
                .ok_or("mldsa65Seed is not a valid ML-DSA-65 seed")?,
        };
        Ok(Server {
            settings,
            cert,
            seen: Default::default(),
            post: Default::default(),
        })
    }

    /// The target's post-handshake record lengths for this name and class, if measured; the
    /// first call starts measuring every server name and class in the background.
    fn post_lengths(self: &Arc<Self>, sni: &str, class: u8) -> Option<Arc<[usize]>> {
        let mut map = self.post.lock().ok()?;
        if map.is_empty() {
            for name in self.settings.server_names.iter().filter(|n| !n.is_empty()) {
                for c in 0..3u8 {
                    map.insert((name.clone(), c), Post::Measuring);
                    let me = self.clone();
                    let name = name.clone();
                    tokio::spawn(async move {
                        let s = &me.settings;
                        let got = tokio::time::timeout(
                            Duration::from_secs(15),
                            measure_post_handshake(&s.target, s.xver, &name, c),
                        )
                        .await
                        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
                        let lens: Arc<[usize]> = match got {
                            Ok(l) => {
                                tracing::debug!("REALITY: target {} sends {l:?} after its handshake for {name} (ALPN class {c})", s.target);
                                l.into()
                            }
                            Err(e) => {
                                tracing::warn!(
                                    "REALITY: measuring target {} for {name}: {e}",
                                    s.target
                                );
                                Arc::new([])
                            }
                        };
                        if let Ok(mut m) = me.post.lock() {
                            m.insert((name, c), Post::Known(lens));
                        }
                    });
                }
            }
        }
        match map.get(&(sni.to_string(), class)) {
            Some(Post::Known(l)) => Some(l.clone()),
            _ => None,
        }
    }

    /// Hands the client to the target for good: what the target sent so far (`s2c`) first,
    /// then both ways until either side ends. Runs outside the handshake timeout.
    fn splice_to_target(&self, client: BoxStream, mut target: BoxStream, s2c: Vec<u8>) {
        let up = self.settings.limit_upload;
        let down = self.settings.limit_download;
        tokio::spawn(async move {
            let mut client = client;
            if !s2c.is_empty() && client.write_all(&s2c).await.is_err() {
                return;
            }
            if up.bytes_per_sec > 0 || down.bytes_per_sec > 0 {
                let (cr, cw) = tokio::io::split(client);
                let (tr, tw) = tokio::io::split(target);
                let _ = tokio::join!(limited_copy(cr, tw, up), limited_copy(tr, cw, down));
                return;
            }
            let _ = &mut target;
            let opts = crate::relay::RelayOpts {
                uplink_only: Duration::from_secs(300),
                downlink_only: Duration::from_secs(300),
                ..Default::default()
            };
            let counters = crate::relay::Counters::default();
            let _ = crate::relay::run(client, target, &opts, &counters).await;
        });
    }

    /// Serves one accepted connection.
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "checked by the parser before this step"
    )]
    pub async fn accept(
        self: Arc<Self>,
        mut client: BoxStream,
        info: &mut ConnInfo,
    ) -> io::Result<Tls13Stream> {
        // Start measuring the target's post-handshake records with the first connection.
        let _ = self.post_lengths("", 0);
        let s = &self.settings;
        let dialer = SocketDialer {
            opts: Default::default(),
        };
        let mut target = dialer
            .dial_tcp(&s.target)
            .await
            .map_err(|e| closed(format!("target {} unreachable: {e}", s.target)))?;
        if s.xver > 0 {
            let h = crate::transport::proxy_protocol::encode(s.xver, &info.source, &info.local);
            target.write_all(&h).await?;
        }
        // Mirror the client's first flight to the target until the ClientHello is whole. A
        // target that answers or closes before that (it saw garbage, or waited long enough)
        // has the client from then on, as with Xray.
        let mut c2s = Vec::with_capacity(2048);
        let mut buf = vec![0u8; 4096];
        let mut early = vec![0u8; 4096];
        let parsed = loop {
            let n = tokio::select! {
                r = client.read(&mut buf) => r?,
                r = target.read(&mut early) => {
                    let s2c = match r {
                        Ok(n) => early[..n].to_vec(),
                        Err(_) => Vec::new(),
                    };
                    let what = if s2c.is_empty() { "closed" } else { "answered" };
                    self.splice_to_target(client, target, s2c);
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        Probe {
                            reason: "incomplete",
                            detail: format!(
                                "the target {what} after {} bytes, before a whole ClientHello",
                                c2s.len()
                            ),
                        },
                    ));
                }
            };
            if n == 0 {
                // Gone before a whole hello: the target sees the same end.
                let _ = target.shutdown().await;
                self.splice_to_target(client, target, Vec::new());
                return Err(closed("client closed before its ClientHello".into()));
            }
            target.write_all(&buf[..n]).await?;
            c2s.extend_from_slice(&buf[..n]);
            match hello::message_from_records(&c2s, MAX_HELLO) {
                Ok(Some(m)) => break Some(m),
                Ok(None) if c2s.len() < MAX_HELLO + 1024 => continue,
                Ok(None) | Err(_) => break None,
            }
        };
        drop(buf);
        let outcome = match &parsed {
            None => Err(("not-tls", "not a TLS ClientHello".to_string())),
            Some((msg, _)) => match ClientHello::parse(msg) {
                Err(e) => Err(("not-tls", e.to_string())),
                Ok(ch) => match authenticate(&ch, s, now_ms()) {
                    Ok(a) => {
                        let ttl = replay_ttl(s.max_time_diff);
                        let fresh = self
                            .seen
                            .lock()
                            .map(|mut seen| seen.insert(ch.random, ttl))
                            .unwrap_or(false);
                        match fresh {
                            true => Ok((ch, a)),
                            false => Err(("replay", "a replayed ClientHello".to_string())),
                        }
                    }
                    Err(why) => Err((why.reason(), why.to_string())),
                },
            },
        };
        let (ch, auth) = match outcome {
            Ok(x) => x,
            Err((reason, why)) => {
                self.splice_to_target(client, target, Vec::new());
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    Probe {
                        reason,
                        detail: format!("{why}: relayed to the target"),
                    },
                ));
            }
        };
        let after_hello = c2s[parsed.as_ref().expect("parsed").1..].to_vec();
        drop(c2s);
        info.sni = ch.sni.as_deref().map(Arc::from);

        // The target's first flight.
        let mut s2c = Vec::with_capacity(MAX_FLIGHT);
        let mut quiet_checked = false;
        let flight = loop {
            match TargetFlight::parse(&s2c) {
                Ok(Some(f)) => break f,
                Ok(None) if s2c.len() < MAX_FLIGHT => {}
                Ok(None) => return Err(closed("target's first flight too long".into())),
                Err(FlightError::NotServerHello(why)) => {
                    self.splice_to_target(client, target, s2c);
                    return Err(closed(format!(
                        "target answered without a usable ServerHello ({why}): relayed"
                    )));
                }
                Err(FlightError::Shape(why)) => {
                    return Err(closed(format!("target's flight: {why}")))
                }
            }
            let at = s2c.len();
            s2c.resize(MAX_FLIGHT, 0);
            let read = target.read(&mut s2c[at..]);
            let n = match quiet_checked {
                true => read.await?,
                false => match tokio::time::timeout(FLIGHT_QUIET, read).await {
                    Ok(r) => r?,
                    Err(_) => {
                        // The target went quiet: what it sent may be its whole flight.
                        quiet_checked = true;
                        s2c.truncate(at);
                        if let Ok(Some(f)) = TargetFlight::parse_quiet(&s2c) {
                            break f;
                        }
                        continue;
                    }
                },
            };
            s2c.truncate(at + n);
            if n == 0 {
                return Err(closed("target closed during its handshake".into()));
            }
        };
        let answer = respond(&ch, &auth, &flight, &self.cert)
            .map_err(|e| closed(format!("cannot imitate the target: {e:?}")))?;
        client.write_all(&answer.bytes).await?;
        client.flush().await?;

        // The client's (optional) ChangeCipherSpec and Finished, for as long as the target
        // keeps its own handshake open (Xray closes the client when the target closes; a
        // target that sends more is no longer watched).
        let mut watch = true;
        let mut rx = after_hello;
        let mut ckey = TrafficKey::new(answer.suite, &answer.schedule.client_hs);
        let (fin, used) = loop {
            let mut at = 0;
            if rx.starts_with(&[20, 3, 3, 0, 1, 1]) {
                at = 6;
            }
            if let Some(n) = record::complete(&rx[at..]) {
                let mut rec = rx[at..at + n].to_vec();
                let (ty, c) = record::open(&mut ckey, &mut rec)
                    .map_err(|e| closed(format!("client Finished record: {e:?}")))?;
                if ty != record::HANDSHAKE {
                    return Err(closed("client sent data before its Finished".into()));
                }
                break (rec[c].to_vec(), at + n);
            }
            if rx.len() > 4096 {
                return Err(closed("client Finished too long".into()));
            }
            let at = rx.len();
            rx.resize(at + 1024, 0);
            let n = if watch {
                tokio::select! {
                    r = client.read(&mut rx[at..]) => r?,
                    r = target.read(&mut early) => {
                        rx.truncate(at);
                        match r {
                            Ok(n) if n > 0 => {
                                watch = false;
                                continue;
                            }
                            _ => {
                                return Err(closed(
                                    "the target ended its handshake before the client's Finished"
                                        .into(),
                                ))
                            }
                        }
                    }
                }
            } else {
                client.read(&mut rx[at..]).await?
            };
            rx.truncate(at + n);
            if n == 0 {
                return Err(closed("client closed before its Finished".into()));
            }
        };
        drop(target);
        let th = answer.transcript.current();
        let want = answer.schedule.finished(&answer.schedule.client_hs, &th);
        let mut expected = Vec::new();
        hello::message(hello::FINISHED, &want, &mut expected);
        if aws_lc_rs::constant_time::verify_slices_are_equal(&fin, &expected).is_err() {
            return Err(closed("bad client Finished".into()));
        }
        let (c_ap, _) = answer.schedule.application(&th);
        // What the target sends after its handshake (tickets): empty records of those lengths.
        let mut write = answer.write;
        let class = alpn_class(&ch);
        if let Some(lens) = self.post_lengths(ch.sni.as_deref().unwrap_or(""), class) {
            let mut out = Vec::new();
            for l in lens.iter() {
                if let Ok(pad) = pad_to(*l, 0) {
                    record::seal(&mut write.key, record::APPLICATION_DATA, &[], pad, &mut out);
                }
            }
            if !out.is_empty() {
                client.write_all(&out).await?;
            }
        }
        tracing::debug!(
            "REALITY: client {}.{}.{} short id {} authenticated (group {:#06x}, {} target records)",
            auth.version[0],
            auth.version[1],
            auth.version[2],
            crate::transport::tls::hex(&auth.short_id),
            flight.server_hello.group,
            if flight.combined {
                "combined"
            } else {
                "separate"
            }
        );
        Ok(Tls13Stream::new(
            client,
            &rx[used..],
            answer.suite,
            Direction::new(answer.suite, c_ap),
            write,
        )
        .of_reality())
    }
}

/// Copies with a token bucket (`limitFallback*`): `after_bytes` free, then `bytes_per_sec` with
/// bursts of `burst_bytes_per_sec`.
async fn limited_copy<R, W>(mut r: R, mut w: W, l: super::RateLimit) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    let mut total: u64 = 0;
    let burst = if l.burst_bytes_per_sec > 0 {
        l.burst_bytes_per_sec
    } else {
        l.bytes_per_sec
    } as f64;
    let mut tokens = burst;
    let mut last = tokio::time::Instant::now();
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        total += n as u64;
        if l.bytes_per_sec > 0 && total > l.after_bytes {
            let now = tokio::time::Instant::now();
            tokens = (tokens + now.duration_since(last).as_secs_f64() * l.bytes_per_sec as f64)
                .min(burst);
            last = now;
            tokens -= n as f64;
            if tokens < 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(-tokens / l.bytes_per_sec as f64)).await;
            }
        }
        w.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::{Address, Destination};
    use crate::transport::reality::{fingerprint, RateLimit};

    fn settings() -> ServerSettings {
        ServerSettings {
            target: Destination::new(Address::Domain("t".into()), 443),
            xver: 0,
            server_names: vec!["reality.test".into()],
            private_key: [7u8; 32],
            short_ids: vec![[0u8; 8], [1, 2, 3, 4, 5, 6, 7, 8]],
            min_client_ver: Some([1, 8, 0]),
            max_client_ver: None,
            max_time_diff: Some(Duration::from_secs(60)),
            limit_upload: RateLimit::default(),
            limit_download: RateLimit::default(),
            mldsa65_seed: None,
        }
    }

    /// A hello from our own client side, sealed for `settings()`'s key.
    fn hello(sni: &str, version: [u8; 3], time: u32, short_id: [u8; 8]) -> ClientHello {
        let (mut ch, k) = hello::build(&fingerprint::CHROME, Some(sni));
        let random: [u8; 32] = ch[6..38].try_into().unwrap();
        let shared =
            keys::x25519(k.auth_private().unwrap(), &keys::x25519_public(&[7u8; 32])).unwrap();
        let auth = keys::auth_key(&shared, &random);
        let mut plain = [0u8; 16];
        plain[..3].copy_from_slice(&version);
        plain[4..8].copy_from_slice(&time.to_be_bytes());
        plain[8..].copy_from_slice(&short_id);
        let sid = keys::seal_session_id(&auth, &random, &plain, &ch);
        ch[hello::SESSION_ID_AT..hello::SESSION_ID_AT + 32].copy_from_slice(&sid);
        ClientHello::parse(&ch).unwrap()
    }

    #[test]
    fn a_random_is_accepted_once_until_it_expires() {
        let mut seen = Seen::default();
        assert!(seen.insert([1; 32], Duration::from_secs(60)));
        assert!(!seen.insert([1; 32], Duration::from_secs(60)));
        assert!(seen.insert([2; 32], Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        // With a shorter life the old entries are gone.
        assert!(seen.insert([1; 32], Duration::from_millis(10)));
        assert_eq!(seen.order.len(), 1);
    }

    #[test]
    fn a_replay_inside_both_sides_of_the_clock_window_is_refused() {
        let max = Duration::from_millis(300);
        let ttl = replay_ttl(Some(max));
        assert_eq!(ttl, max * 2);
        assert_eq!(replay_ttl(None), Duration::from_secs(3600));
        assert_eq!(replay_ttl(Some(Duration::ZERO)), Duration::from_secs(3600));
        let mut seen = Seen::default();
        assert!(seen.insert([3; 32], ttl));
        // Past maxTimeDiff, still inside 2 x maxTimeDiff: the time check would pass it.
        std::thread::sleep(max + Duration::from_millis(50));
        assert!(!seen.insert([3; 32], ttl));
        std::thread::sleep(max);
        assert!(seen.insert([3; 32], ttl));
    }

    #[test]
    fn a_flood_keeps_the_cache_bounded() {
        let mut seen = Seen::default();
        for i in 0..SEEN_MAX as u32 + 5000 {
            let mut r = [0u8; 32];
            r[..4].copy_from_slice(&i.to_be_bytes());
            assert!(seen.insert(r, Duration::from_secs(3600)));
        }
        assert!(seen.order.len() <= SEEN_MAX, "{}", seen.order.len());
        assert_eq!(seen.set.len(), seen.order.len());
        // The newest are still refused as replays.
        let mut r = [0u8; 32];
        r[..4].copy_from_slice(&(SEEN_MAX as u32 + 4999).to_be_bytes());
        assert!(!seen.insert(r, Duration::from_secs(3600)));
    }

    #[test]
    fn only_a_sealed_hello_with_listed_name_id_version_and_time_is_ours() {
        let s = settings();
        let now = 1_800_000_000u32;
        let ms = now as i64 * 1000;
        let ok = hello("reality.test", [26, 7, 28], now, [0; 8]);
        assert!(authenticate(&ok, &s, ms).is_ok());
        assert_eq!(
            authenticate(&hello("other.test", [26, 7, 28], now, [0; 8]), &s, ms).unwrap_err(),
            Stranger::Sni(Some("other.test".into()))
        );
        assert_eq!(
            authenticate(&hello("reality.test", [1, 7, 9], now, [0; 8]), &s, ms).unwrap_err(),
            Stranger::Version([1, 7, 9])
        );
        assert!(matches!(
            authenticate(
                &hello("reality.test", [26, 7, 28], now - 120, [0; 8]),
                &s,
                ms
            ),
            Err(Stranger::Time(_))
        ));
        assert_eq!(
            authenticate(&hello("reality.test", [26, 7, 28], now, [9; 8]), &s, ms).unwrap_err(),
            Stranger::ShortId([9; 8])
        );
        // Another server's key: the session id does not open.
        let mut other = settings();
        other.private_key = [8u8; 32];
        assert_eq!(
            authenticate(&ok, &other, ms).unwrap_err(),
            Stranger::SessionId
        );
        // One byte of the hello changed (it is the AAD): not ours.
        let mut raw = ok.raw.clone();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        if let Ok(ch) = ClientHello::parse(&raw) {
            assert!(authenticate(&ch, &s, ms).is_err());
        }
    }

    /// A target's first flight: its ServerHello (X25519, AES-128-GCM), CCS, four encrypted
    /// records of the given lengths, and a ticket record.
    fn target_flight(ch: &ClientHello, lengths: &[usize], ticket: Option<usize>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0x5a; 32]);
        body.push(32);
        body.extend_from_slice(&ch.session_id);
        body.extend_from_slice(&[0x13, 0x01, 0]);
        let mut exts = vec![0, 0x2b, 0, 2, 3, 4, 0, 0x33, 0, 0x24, 0, 0x1d, 0, 32];
        exts.extend_from_slice(&[0x77; 32]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut sh = Vec::new();
        hello::message(hello::SERVER_HELLO, &body, &mut sh);
        let mut out = vec![22, 3, 3];
        out.extend_from_slice(&(sh.len() as u16).to_be_bytes());
        out.extend_from_slice(&sh);
        out.extend_from_slice(&[20, 3, 3, 0, 1, 1]);
        for len in lengths.iter().chain(ticket.iter()) {
            out.extend_from_slice(&[23, 3, 3]);
            out.extend_from_slice(&((len - 5) as u16).to_be_bytes());
            out.resize(out.len() + len - 5, 0xee);
        }
        out
    }

    /// Splits a flight into its records' lengths.
    fn record_lengths(mut b: &[u8]) -> Vec<usize> {
        let mut v = Vec::new();
        while let Some(n) = record::complete(b) {
            v.push(n);
            b = &b[n..];
        }
        assert!(b.is_empty());
        v
    }

    #[test]
    fn a_short_combined_flight_is_whole_once_the_target_is_quiet() {
        let ch = hello("reality.test", [26, 7, 28], 0, [0; 8]);
        // One encrypted record of 480 bytes (rustls with a small certificate).
        let t = target_flight(&ch, &[480], None);
        assert!(matches!(TargetFlight::parse(&t), Ok(None)));
        let f = TargetFlight::parse_quiet(&t).unwrap().unwrap();
        assert!(f.combined);
        assert_eq!(f.lengths.len(), 1);
        // Quiet in the middle of a record is still not a flight.
        assert!(matches!(
            TargetFlight::parse_quiet(&t[..t.len() - 1]),
            Ok(None)
        ));
    }

    #[test]
    fn the_answer_has_the_targets_server_hello_and_record_lengths() {
        let s = settings();
        let ch = hello("reality.test", [26, 7, 28], 0, [0; 8]);
        let mut s2 = s.clone();
        s2.max_time_diff = None;
        let a = authenticate(&ch, &s2, 0).unwrap();
        let cert = Temporary::generate();
        for (lengths, ticket) in [
            (vec![41usize, 1234, 100, 58], Some(250usize)),
            (vec![4321], None),
        ] {
            let t = target_flight(&ch, &lengths, ticket);
            // Every cut of the flight before its end needs more bytes; the whole one parses.
            for cut in [0, 3, 10, 100, t.len() - 1] {
                if ticket.is_none() || cut < t.len() - ticket.unwrap() {
                    assert!(
                        matches!(TargetFlight::parse(&t[..cut]), Ok(None)),
                        "cut {cut}"
                    );
                }
            }
            let f = TargetFlight::parse(&t).unwrap().unwrap();
            assert_eq!(f.combined, lengths.len() == 1);
            let ans = respond(&ch, &a, &f, &cert).unwrap();
            let got = record_lengths(&ans.bytes);
            let want = record_lengths(&t);
            assert_eq!(got, want, "record lengths");
            // The ServerHello is the target's but for the key share.
            let sh_len = want[0];
            let share = f.server_hello.share.clone();
            let (ours, theirs) = (&ans.bytes[5..sh_len], &t[5..sh_len]);
            assert_eq!(ours[..share.start], theirs[..share.start]);
            assert_eq!(ours[share.end..], theirs[share.end..]);
            assert_ne!(ours[share.clone()], theirs[share]);
        }
        // A target record too short for our message is refused, not truncated.
        let t = target_flight(&ch, &[41, 100, 100, 58], None);
        let f = TargetFlight::parse(&t).unwrap().unwrap();
        assert!(matches!(
            respond(&ch, &a, &f, &cert),
            Err(FlightError::Shape(_))
        ));
        // Not a ServerHello: the client goes to the target.
        assert!(matches!(
            TargetFlight::parse(b"HTTP/1.1 400 Bad Request\r\n"),
            Err(FlightError::NotServerHello(_))
        ));
    }
}
