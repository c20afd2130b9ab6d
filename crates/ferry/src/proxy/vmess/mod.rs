//! VMess (Xray/v2ray): config and builders. Headers in `header/`, chunk codec in `body/`, the
//! legacy CFB stream and FNV-1a checksum both of them use in `legacy.rs`, the body stream in
//! `stream/`, the protocol sides in `inbound.rs` / `outbound.rs`.

pub mod api;
pub mod body;
pub mod drain;
/// Fuzz entry points: built for this crate's tests and with the `fuzzing` feature (the cargo-fuzz
/// targets in `fuzz/`), never in the shipped library.
#[cfg(any(test, feature = "fuzzing"))]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "fuzz harnesses: a broken invariant must panic for the fuzzer to see it"
)]
pub mod fuzz;
pub mod header;
pub mod inbound;
pub mod kdf;
pub mod legacy;
pub mod link;
pub mod outbound;
pub mod replay;
pub mod stream;
pub mod udp;

use std::sync::Arc;

use body::Security;

use crate::common::uuid::parse_id;
use crate::config::reader::{ConfigError, Obj, Result};

/// One configured user id with its derived keys.
#[derive(Clone)]
pub struct Account {
    pub uuid: [u8; 16],
    pub cmd_key: [u8; 16],
    pub auth: header::AuthIdCipher,
    pub alter_id: u16,
    pub email: Arc<str>,
    pub level: u32,
    /// The user's counters (resolved when the user is added; empty when stats are off).
    pub traffic: Arc<crate::session::Traffic>,
}

impl Account {
    pub fn new(uuid: [u8; 16], alter_id: u16, email: &str, level: u32) -> Account {
        let cmd_key = header::cmd_key(&uuid);
        Account {
            uuid,
            cmd_key,
            auth: header::AuthIdCipher::new(&cmd_key),
            alter_id,
            email: email.into(),
            level,
            traffic: Arc::default(),
        }
    }

    /// The session user this account authenticates as.
    pub fn user(&self) -> crate::session::User {
        crate::session::User {
            email: self.email.clone(),
            level: self.level,
            traffic: self.traffic.clone(),
        }
    }
}

impl crate::registry::UserEntry for Account {
    fn email(&self) -> &str {
        &self.email
    }
    fn user(&self) -> crate::session::User {
        Account::user(self)
    }
    fn same_secret(&self, other: &Self) -> bool {
        self.uuid == other.uuid
    }
}

/// `security` of an outbound user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityChoice {
    Body(Security),
    /// `zero`: `none` without chunk stream or masking.
    Zero,
}

/// Resolves `auto` by the CPU: AES-GCM where the CPU accelerates it, else ChaCha20-Poly1305.
pub fn auto_security() -> Security {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
        {
            return Security::Aes128Gcm;
        }
        Security::Chacha20Poly1305
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("aes") {
            return Security::Aes128Gcm;
        }
        Security::Chacha20Poly1305
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    Security::Chacha20Poly1305
}

/// Parses a `security` name (case-insensitive, as Xray).
pub fn parse_security(s: &str) -> Option<SecurityChoice> {
    Some(match s.to_ascii_lowercase().as_str() {
        "" | "auto" => SecurityChoice::Body(auto_security()),
        "aes-128-gcm" => SecurityChoice::Body(Security::Aes128Gcm),
        "chacha20-poly1305" => SecurityChoice::Body(Security::Chacha20Poly1305),
        "none" => SecurityChoice::Body(Security::None),
        "zero" => SecurityChoice::Zero,
        "aes-128-cfb" | "legacy" => SecurityChoice::Body(Security::Legacy),
        _ => return None,
    })
}

fn parse_uuid(o: &Obj<'_>) -> Result<[u8; 16]> {
    let id = o.req_str("id")?;
    parse_id(&id).map_err(|e| ConfigError::new(o.key_path("id"), e))
}

fn parse_alter_id(o: &Obj<'_>, default: u16) -> Result<u16> {
    match o.u64("alterId")? {
        None => Ok(default),
        Some(n) if n <= u16::MAX as u64 => Ok(n as u16),
        Some(n) => Err(ConfigError::new(
            o.key_path("alterId"),
            format!("must be at most 65535, found {n}"),
        )),
    }
}

pub use inbound::build as build_inbound;
pub use outbound::build as build_outbound;

/// vmess's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    guarded: true,
    muxable: true,
    api: api::API,
    links: link::LINKS,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["vmess"])
};
