//! Who a ClientHello is from: [`authenticate`] in Xray's order, and why a stranger is not ours.

use super::super::hello::{self, ClientHello};
use super::super::keys;
use super::super::ServerSettings;

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
