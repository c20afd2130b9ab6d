//! Protocol plugins (shadowsocksr.md §4): the innermost layer, which frames and authenticates
//! the plaintext (`ATYP|ADDR|PORT ‖ data`) before the stream cipher. Each is a sans-IO codec:
//! bytes in, bytes out, state kept between calls; the stream in `stream.rs` drives them.
//!
//! * `deflate.rs`: verify_deflate; `auth_sha1_v4.rs`; `auth_aes128.rs`: auth_aes128_md5/sha1;
//!   `auth_chain.rs`: auth_chain_a–e; `shared.rs`: what the connections of one side share.

mod auth_aes128;
mod auth_chain;
mod auth_sha1_v4;
mod deflate;
mod shared;

use std::sync::Arc;

use super::util::Result;

pub use auth_aes128::AuthAes128;
pub use auth_chain::AuthChain;
pub use auth_sha1_v4::AuthSha1V4;
pub use deflate::Deflate;
pub use shared::{ClientShared, ServerShared, SsrUser};

/// The protocol plugins Ferry speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Origin,
    VerifyDeflate,
    AuthSha1V4,
    AuthAes128Md5,
    AuthAes128Sha1,
    AuthChainA,
    AuthChainB,
    AuthChainC,
    AuthChainD,
    AuthChainE,
}

impl Kind {
    pub const ALL: &'static [Kind] = &[
        Kind::Origin,
        Kind::VerifyDeflate,
        Kind::AuthSha1V4,
        Kind::AuthAes128Md5,
        Kind::AuthAes128Sha1,
        Kind::AuthChainA,
        Kind::AuthChainB,
        Kind::AuthChainC,
        Kind::AuthChainD,
        Kind::AuthChainE,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Origin => "origin",
            Kind::VerifyDeflate => "verify_deflate",
            Kind::AuthSha1V4 => "auth_sha1_v4",
            Kind::AuthAes128Md5 => "auth_aes128_md5",
            Kind::AuthAes128Sha1 => "auth_aes128_sha1",
            Kind::AuthChainA => "auth_chain_a",
            Kind::AuthChainB => "auth_chain_b",
            Kind::AuthChainC => "auth_chain_c",
            Kind::AuthChainD => "auth_chain_d",
            Kind::AuthChainE => "auth_chain_e",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        let n = name.to_ascii_lowercase();
        let n = if n.is_empty() { "origin" } else { n.as_str() };
        Kind::ALL.iter().copied().find(|k| k.name() == n)
    }

    /// Bytes this protocol adds per packet (§1.3), part of `overhead`.
    pub fn overhead(self) -> usize {
        match self {
            Kind::Origin | Kind::VerifyDeflate => 0,
            Kind::AuthSha1V4 => 7,
            Kind::AuthAes128Md5 | Kind::AuthAes128Sha1 => 9,
            _ => 4,
        }
    }

    /// Whether the protocol carries a user id (multi-user servers).
    pub fn multi_user(self) -> bool {
        matches!(
            self,
            Kind::AuthAes128Md5
                | Kind::AuthAes128Sha1
                | Kind::AuthChainA
                | Kind::AuthChainB
                | Kind::AuthChainC
                | Kind::AuthChainD
                | Kind::AuthChainE
        )
    }

    /// Whether UDP packets carry this protocol's auth (§4.8).
    pub fn udp_auth(self) -> bool {
        self.multi_user()
    }
}

/// Per-connection facts the plugins need (`server_info`, §1.2).
#[derive(Clone)]
pub struct Info {
    /// Cipher key.
    pub key: Arc<[u8]>,
    /// This side's send IV.
    pub iv: Vec<u8>,
    /// obfs + protocol overhead of this side.
    pub overhead: usize,
    pub tcp_mss: usize,
}

pub const TCP_MSS: usize = 1460;
const BUFFER_SIZE: usize = 32768;
/// Data bytes per packet of auth_sha1_v4 and auth_aes128_*.
const AUTH_UNIT: usize = 8100;

/// One connection's protocol codec.
pub enum Protocol {
    Origin,
    Deflate(Box<Deflate>),
    Sha1V4(Box<AuthSha1V4>),
    Aes128(Box<AuthAes128>),
    Chain(Box<AuthChain>),
}

pub enum Side {
    Client(Arc<ClientShared>),
    Server(Arc<ServerShared>),
}

impl Protocol {
    pub fn new(kind: Kind, info: Info, side: Side) -> Protocol {
        match kind {
            Kind::Origin => Protocol::Origin,
            Kind::VerifyDeflate => Protocol::Deflate(Box::default()),
            Kind::AuthSha1V4 => Protocol::Sha1V4(Box::new(AuthSha1V4::new(info, side))),
            Kind::AuthAes128Md5 | Kind::AuthAes128Sha1 => Protocol::Aes128(Box::new(
                AuthAes128::new(kind == Kind::AuthAes128Sha1, info, side),
            )),
            _ => Protocol::Chain(Box::new(AuthChain::new(kind, info, side))),
        }
    }

    /// Server: the client's IV, once the cipher has it (MAC keys of the first packet).
    pub fn set_recv_iv(&mut self, iv: &[u8]) {
        match self {
            Protocol::Sha1V4(p) => p.info_recv_iv(iv),
            Protocol::Aes128(p) => p.recv_iv = iv.to_vec(),
            Protocol::Chain(p) => p.recv_iv = iv.to_vec(),
            _ => {}
        }
    }

    /// Server: the user the first packet named (multi-user auth_* servers).
    pub fn user(&self) -> Option<&SsrUser> {
        match self {
            Protocol::Aes128(p) => p.user.as_ref(),
            Protocol::Chain(p) => p.user.as_ref(),
            _ => None,
        }
    }

    pub fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        match self {
            Protocol::Origin => out.extend_from_slice(data),
            Protocol::Deflate(p) => p.encode(data, out),
            Protocol::Sha1V4(p) => p.client_encode(data, out),
            Protocol::Aes128(p) => p.client_encode(data, out),
            Protocol::Chain(p) => p.client_encode(data, out),
        }
    }

    pub fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        match self {
            Protocol::Origin => {
                out.extend_from_slice(data);
                Ok(())
            }
            Protocol::Deflate(p) => p.decode(data, out),
            Protocol::Sha1V4(p) => p.decode_data(data, out).map(|_| ()),
            Protocol::Aes128(p) => p.decode_data(data, out).map(|_| ()),
            Protocol::Chain(p) => p.client_decode(data, out),
        }
    }

    pub fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        match self {
            Protocol::Origin => out.extend_from_slice(data),
            Protocol::Deflate(p) => p.encode(data, out),
            Protocol::Sha1V4(p) => p.pack_all(data, out),
            Protocol::Aes128(p) => p.pack_all(data, out),
            Protocol::Chain(p) => p.server_encode(data, out),
        }
    }

    /// Decodes what the client sent; `true` asks the server to answer with an empty packet now.
    pub fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self {
            Protocol::Origin => {
                out.extend_from_slice(data);
                Ok(false)
            }
            Protocol::Deflate(p) => p.decode(data, out).map(|_| false),
            Protocol::Sha1V4(p) => p.server_decode(data, out),
            Protocol::Aes128(p) => p.server_decode(data, out),
            Protocol::Chain(p) => p.server_decode(data, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::User;

    /// Client and server codecs of `kind` talk to each other through every piece size.
    fn pair(kind: Kind, users: Vec<SsrUser>, param: &str) {
        let key: Arc<[u8]> = crate::proxy::shadowsocks::cipher::evp_bytes_to_key(b"pw", 32).into();
        let cs = Arc::new(ClientShared::new(param));
        let ss = Arc::new(ServerShared::new(users, User::new("", 0)));
        let ci = Info {
            key: key.clone(),
            iv: vec![9; 16],
            overhead: kind.overhead(),
            tcp_mss: TCP_MSS,
        };
        let si = Info {
            iv: vec![8; 16],
            ..ci.clone()
        };
        let mut c = Protocol::new(kind, ci, Side::Client(cs));
        let mut s = Protocol::new(kind, si, Side::Server(ss));
        s.set_recv_iv(&[9; 16]);
        let mut req = vec![3, 11];
        req.extend_from_slice(b"example.com\x01\xbb");
        let payload: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
        req.extend_from_slice(&payload);
        let mut wire = Vec::new();
        for w in req.chunks(20_000) {
            c.client_encode(w, &mut wire);
        }
        let mut got = Vec::new();
        let mut sendback = false;
        for piece in wire.chunks(333) {
            sendback |= s.server_decode(piece, &mut got).unwrap();
        }
        assert_eq!(got, req, "{kind:?}");
        assert_eq!(
            sendback,
            kind != Kind::Origin && kind != Kind::VerifyDeflate,
            "{kind:?}"
        );
        let mut back = Vec::new();
        s.server_encode(&[], &mut back);
        s.server_encode(&payload, &mut back);
        let mut got = Vec::new();
        for piece in back.chunks(77) {
            c.client_decode(piece, &mut got).unwrap();
        }
        assert_eq!(got, payload, "{kind:?}");
    }

    #[test]
    fn every_protocol_round_trips() {
        for &k in Kind::ALL {
            pair(k, Vec::new(), "");
        }
        let u = |uid, pw: &str| SsrUser {
            uid,
            password: pw.as_bytes().to_vec(),
            user: User::new("x", 0),
        };
        for &k in Kind::ALL.iter().filter(|k| k.multi_user()) {
            pair(k, vec![u(1024, "userpass"), u(7, "other")], "1024:userpass");
        }
    }
}
