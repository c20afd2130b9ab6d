//! What one direction of a body is: option bits, security, limits, and errors.

/// Option bits of the instruction section.
pub const OPT_CHUNK_STREAM: u8 = 0x01;
pub const OPT_CHUNK_MASKING: u8 = 0x04;
pub const OPT_GLOBAL_PADDING: u8 = 0x08;
pub const OPT_AUTH_LENGTH: u8 = 0x10;

/// Security byte values on the wire.
pub const SEC_LEGACY: u8 = 1;
pub const SEC_AES128_GCM: u8 = 3;
pub const SEC_CHACHA20: u8 = 4;
pub const SEC_NONE: u8 = 5;

/// Largest chunk a writer emits (size field + sealed payload + padding), as Xray/v2ray.
pub const MAX_CHUNK: usize = 8192;
/// Largest padding per chunk.
pub(super) const MAX_PADDING: usize = 64;
/// Tag length of the AEAD securities.
pub(super) const TAG: usize = 16;

/// The body security of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    Aes128Gcm,
    Chacha20Poly1305,
    /// No encryption (`none`; `zero` is `none` without the chunk-stream option).
    None,
    /// AES-128-CFB with an FNV-1a checksum per chunk (v2ray's legacy, security 1).
    Legacy,
}

impl Security {
    pub fn from_wire(b: u8) -> Option<Security> {
        match b {
            SEC_LEGACY => Some(Security::Legacy),
            SEC_AES128_GCM => Some(Security::Aes128Gcm),
            SEC_CHACHA20 => Some(Security::Chacha20Poly1305),
            SEC_NONE => Some(Security::None),
            _ => None,
        }
    }

    pub fn wire(self) -> u8 {
        match self {
            Security::Legacy => SEC_LEGACY,
            Security::Aes128Gcm => SEC_AES128_GCM,
            Security::Chacha20Poly1305 => SEC_CHACHA20,
            Security::None => SEC_NONE,
        }
    }
}

/// Why a chunk was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("chunk fails authentication")]
    Auth,
    #[error("chunk length fails authentication")]
    LengthAuth,
    #[error("chunk size {0} smaller than its overhead")]
    BadSize(usize),
    #[error("global padding without chunk masking")]
    PaddingWithoutMasking,
}

/// One direction's chunk parameters.
pub struct BodyParams {
    pub security: Security,
    pub opt: u8,
    /// UDP (one datagram per chunk).
    pub packet: bool,
    /// This direction's key and IV.
    pub key: [u8; 16],
    pub iv: [u8; 16],
    /// The request key and IV (authenticated length uses them in both directions).
    pub req_key: [u8; 16],
    pub req_iv: [u8; 16],
}

impl BodyParams {
    /// The two directions of one session: uplink under the request key/IV, downlink under the
    /// response key/IV (`resp`), both with the request's security and options.
    pub fn pair(
        security: Security,
        opt: u8,
        packet: bool,
        req: ([u8; 16], [u8; 16]),
        resp: ([u8; 16], [u8; 16]),
    ) -> (BodyParams, BodyParams) {
        let up = BodyParams {
            security,
            opt,
            packet,
            key: req.0,
            iv: req.1,
            req_key: req.0,
            req_iv: req.1,
        };
        let down = BodyParams {
            key: resp.0,
            iv: resp.1,
            ..up
        };
        (up, down)
    }
}
