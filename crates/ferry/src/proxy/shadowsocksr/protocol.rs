//! Protocol plugins (shadowsocksr.md §4): the innermost layer, which frames and authenticates
//! the plaintext (`ATYP|ADDR|PORT ‖ data`) before the stream cipher. Each is a sans-IO codec:
//! bytes in, bytes out, state kept between calls; the stream in `stream.rs` drives them.

use std::sync::{Arc, Mutex};

use super::util::{
    adler32, aes128_block, b64, crc32, head_size, hmac_md5, hmac_sha1, md5, now_u32, rand_f64,
    rand_range, rand_u16, rand_u32, rand_u8, random_bytes, sha1, time_diff, Error, ReplayWindow,
    Result, XorShift,
};
use crate::common::ct;
use crate::proxy::User;

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

/// One user of a multi-user server (the login a client sends as `uid:password`).
#[derive(Clone)]
pub struct SsrUser {
    pub uid: u32,
    pub password: Vec<u8>,
    pub user: User,
}

impl crate::registry::UserEntry for SsrUser {
    fn user(&self) -> &User {
        &self.user
    }
    fn same_secret(&self, other: &Self) -> bool {
        self.uid == other.uid
    }
}

/// What every server connection of one inbound shares.
pub struct ServerShared {
    pub users: crate::registry::Users<SsrUser>,
    /// First packets seen (per uid, client id, connection id) within the time window.
    pub replay: Mutex<ReplayWindow>,
    /// Accepted clock difference in seconds.
    pub max_time_dif: u32,
    /// The user of a single-user server.
    pub default_user: User,
    /// Whether users log in by uid (users were configured or added): then an unknown uid is
    /// refused even when the last user has been removed.
    pub multi: std::sync::atomic::AtomicBool,
}

impl ServerShared {
    pub fn new(users: Vec<SsrUser>, default_user: User) -> ServerShared {
        ServerShared {
            multi: std::sync::atomic::AtomicBool::new(!users.is_empty()),
            users: crate::registry::Users::new(users),
            replay: Mutex::new(ReplayWindow::new(86400)),
            max_time_dif: 86400,
            default_user,
        }
    }

    /// Checks time and replay of a first packet; `id` names it (uid, client id, connection id).
    fn admit(&self, utc: u32, id: &[u8]) -> Result<()> {
        if time_diff(utc, now_u32()) > self.max_time_dif as i64 {
            return Err(Error::Time);
        }
        let mut g = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        if !g.check_and_insert(id, utc) {
            return Err(Error::Replay);
        }
        Ok(())
    }

    /// The user key for `uid` (§1.4): the user's, this server's key when it has no users, or
    /// `None` for an unknown uid on a multi-user server.
    pub fn user_of(&self, uid: u32) -> Option<Option<SsrUser>> {
        if !self.multi.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(None);
        }
        let users = self.users.load();
        users.iter().find(|u| u.uid == uid).cloned().map(Some)
    }
}

/// What every client connection of one outbound shares: the client id and connection counter
/// (§4.1) and the login.
pub struct ClientShared {
    ids: Mutex<(Option<[u8; 4]>, u32)>,
    /// `protocolParam` `uid:password`.
    pub login: Option<(u32, Vec<u8>)>,
}

impl ClientShared {
    pub fn new(param: &str) -> ClientShared {
        let login = param.split_once(':').and_then(|(u, p)| {
            let uid = u.trim().parse::<u32>().ok()?;
            Some((uid, p.as_bytes().to_vec()))
        });
        ClientShared {
            ids: Mutex::new((None, 0)),
            login,
        }
    }

    /// `LE32 time ‖ client_id ‖ LE32 connection_id` for a new connection.
    fn auth_data(&self) -> [u8; 12] {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if g.1 > 0xFF00_0000 {
            g.0 = None;
        }
        if g.0.is_none() {
            g.0 = Some(rand_u32().to_le_bytes());
            g.1 = rand_u32() & 0xFF_FFFF;
        }
        g.1 += 1;
        let mut a = [0u8; 12];
        a[..4].copy_from_slice(&now_u32().to_le_bytes());
        a[4..8].copy_from_slice(&g.0.unwrap_or_default());
        a[8..].copy_from_slice(&g.1.to_le_bytes());
        a
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
            Kind::AuthSha1V4 => Protocol::Sha1V4(Box::new(AuthSha1V4 {
                info,
                side,
                sent_header: false,
                recv_header: false,
                recv: Vec::new(),
            })),
            Kind::AuthAes128Md5 | Kind::AuthAes128Sha1 => Protocol::Aes128(Box::new(AuthAes128 {
                sha1: kind == Kind::AuthAes128Sha1,
                info,
                side,
                recv_iv: Vec::new(),
                user_key: None,
                user: None,
                sent_header: false,
                recv_header: false,
                pack_id: 1,
                recv_id: 1,
                recv: Vec::new(),
                head: None,
            })),
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

// ---------------------------------------------------------------------------------------------
// verify_deflate (§4.2)

#[derive(Default)]
pub struct Deflate {
    recv: Vec<u8>,
}

const DEFLATE_UNIT: usize = 32700;

impl Deflate {
    fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        use std::io::Write;
        for chunk in data.chunks(DEFLATE_UNIT) {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            let _ = z.write_all(chunk);
            let c = z.finish().unwrap_or_default();
            let body = c.get(2..).unwrap_or_default();
            out.extend_from_slice(&((body.len() + 2) as u16).to_be_bytes());
            out.extend_from_slice(body);
        }
    }

    fn decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        use std::io::Read;
        self.recv.extend_from_slice(data);
        while self.recv.len() > 2 {
            let total = u16::from_be_bytes([self.recv[0], self.recv[1]]) as usize;
            if !(6..32768).contains(&total) {
                return Err(Error::Frame);
            }
            if self.recv.len() < total {
                break;
            }
            let mut z = Vec::with_capacity(total);
            z.extend_from_slice(&[0x78, 0x9c]);
            z.extend_from_slice(&self.recv[2..total]);
            // A packet carries at most one 32,700-byte chunk: more is a deflate bomb.
            let mut d = flate2::read::ZlibDecoder::new(&z[..]).take(DEFLATE_UNIT as u64 + 1);
            let mut plain = Vec::new();
            d.read_to_end(&mut plain).map_err(|_| Error::Frame)?;
            if plain.len() > DEFLATE_UNIT {
                return Err(Error::Frame);
            }
            out.extend_from_slice(&plain);
            self.recv.drain(..total);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// auth_sha1_v4 (§4.3)

pub struct AuthSha1V4 {
    info: Info,
    side: Side,
    sent_header: bool,
    recv_header: bool,
    recv: Vec<u8>,
}

const SHA1V4_SALT: &[u8] = b"auth_sha1_v4";
const AUTH_UNIT: usize = 8100;

impl AuthSha1V4 {
    fn info_recv_iv(&mut self, iv: &[u8]) {
        // The server keys the first packet's HMAC with the client's IV: keep it in `iv`
        // (the server's own send IV is not used by this protocol).
        self.info.iv = iv.to_vec();
    }

    /// `R(n)` for a buffer of `s` bytes.
    fn rnd(s: usize, out: &mut Vec<u8>) {
        let n = if s > 1200 {
            0
        } else if s > 400 {
            rand_u8() as usize
        } else {
            (u16::from_be_bytes(rand_u16().to_le_bytes()) % 512) as usize
        };
        if n < 128 {
            out.push(n as u8 + 1);
        } else {
            out.push(0xff);
            out.extend_from_slice(&((n + 3) as u16).to_be_bytes());
        }
        out.extend_from_slice(&random_bytes(n));
    }

    fn pack_data(chunk: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        Self::rnd(chunk.len(), out);
        out.extend_from_slice(chunk);
        let l = (out.len() - start + 4) as u16;
        out[start..start + 2].copy_from_slice(&l.to_be_bytes());
        let crc = crc32(&[&l.to_be_bytes()]) as u16;
        out[start + 2..start + 4].copy_from_slice(&crc.to_le_bytes());
        let a = adler32(&out[start..]);
        out.extend_from_slice(&a.to_le_bytes());
    }

    /// Data packets of `data`; a server packs an empty one too (its answer to a first packet
    /// or an empty client packet, §4.1), a client never sends empty ones.
    fn pack_all(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        while data.len() > AUTH_UNIT {
            Self::pack_data(&data[..AUTH_UNIT], out);
            data = &data[AUTH_UNIT..];
        }
        if !data.is_empty() || matches!(self.side, Side::Server(_)) {
            Self::pack_data(data, out);
        }
    }

    fn client_encode(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_header {
            let Side::Client(c) = &self.side else { return };
            let n = data.len().min(rand_range(0, 31) + head_size(data, 30));
            let mut body = Vec::with_capacity(n + 12);
            body.extend_from_slice(&c.auth_data());
            body.extend_from_slice(&data[..n]);
            data = &data[n..];
            let start = out.len();
            out.extend_from_slice(&[0; 6]);
            Self::rnd(body.len(), out);
            out.extend_from_slice(&body);
            let l = (out.len() - start + 10) as u16;
            out[start..start + 2].copy_from_slice(&l.to_be_bytes());
            let crc = crc32(&[&l.to_be_bytes(), SHA1V4_SALT, &self.info.key]);
            out[start + 2..start + 6].copy_from_slice(&crc.to_le_bytes());
            let mac = hmac_sha1(
                &[&self.info.iv[..], &self.info.key].concat(),
                &[&out[start..]],
            );
            out.extend_from_slice(&mac[..10]);
            self.sent_header = true;
        }
        self.pack_all(data, out);
    }

    /// Data packets (both directions); `true` when one carried no data.
    fn decode_data(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.recv.extend_from_slice(data);
        let mut empty = false;
        let mut at = 0;
        while self.recv.len() - at > 4 {
            let b = &self.recv[at..];
            let crc = crc32(&[&b[..2]]) as u16;
            if crc.to_le_bytes() != b[2..4] {
                return Err(Error::Frame);
            }
            let l = u16::from_be_bytes([b[0], b[1]]) as usize;
            if !(7..8192).contains(&l) {
                return Err(Error::Frame);
            }
            if l > b.len() {
                break;
            }
            if adler32(&b[..l - 4]).to_le_bytes() != b[l - 4..l] {
                return Err(Error::Frame);
            }
            let pos = if b[4] < 255 {
                4 + b[4] as usize
            } else {
                4 + u16::from_be_bytes([b[5], b[6]]) as usize
            };
            if pos > l - 4 {
                return Err(Error::Frame);
            }
            empty |= pos == l - 4;
            out.extend_from_slice(&b[pos..l - 4]);
            at += l;
        }
        self.recv.drain(..at);
        Ok(empty)
    }

    fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_header {
            return self.decode_data(data, out);
        }
        let Side::Server(shared) = &self.side else {
            return Err(Error::Auth);
        };
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        if b.len() <= 6 {
            return Ok(false);
        }
        let crc = crc32(&[&b[..2], SHA1V4_SALT, &self.info.key]);
        if crc.to_le_bytes() != b[2..6] {
            return Err(Error::Auth);
        }
        let l = u16::from_be_bytes([b[0], b[1]]) as usize;
        if l < 6 + 1 + 12 + 10 {
            return Err(Error::Auth);
        }
        if l > b.len() {
            return Ok(false);
        }
        let mac = hmac_sha1(
            &[&self.info.iv[..], &self.info.key].concat(),
            &[&b[..l - 10]],
        );
        if !ct::eq(&mac[..10], &b[l - 10..l]) {
            return Err(Error::Auth);
        }
        let pos = if b[6] < 255 {
            6 + b[6] as usize
        } else {
            6 + u16::from_be_bytes([b[7], b[8]]) as usize
        };
        if pos + 12 > l - 10 {
            return Err(Error::Auth);
        }
        let auth = &b[pos..pos + 12];
        let utc = u32::from_le_bytes(crate::common::array(&auth[..4]));
        shared.admit(utc, &[b"s1v4", &auth[4..12]].concat())?;
        out.extend_from_slice(&b[pos + 12..l - 10]);
        self.recv.drain(..l);
        self.recv_header = true;
        self.decode_data(&[], out)?;
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// auth_aes128_md5 / auth_aes128_sha1 (§4.4)

pub struct AuthAes128 {
    sha1: bool,
    info: Info,
    side: Side,
    recv_iv: Vec<u8>,
    user_key: Option<Vec<u8>>,
    user: Option<SsrUser>,
    sent_header: bool,
    recv_header: bool,
    pack_id: u32,
    recv_id: u32,
    recv: Vec<u8>,
    /// Server: the first packet's decrypted block, user key and user once its head checked out.
    head: Option<Box<Aes128Head>>,
}

type Aes128Head = ([u8; 16], Vec<u8>, Option<SsrUser>);

impl AuthAes128 {
    fn salt(&self) -> &'static [u8] {
        if self.sha1 {
            b"auth_aes128_sha1"
        } else {
            b"auth_aes128_md5"
        }
    }

    fn hash(&self, d: &[u8]) -> Vec<u8> {
        if self.sha1 {
            sha1(d).to_vec()
        } else {
            md5(&[d]).to_vec()
        }
    }

    fn mac(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        if self.sha1 {
            hmac_sha1(key, parts)
        } else {
            let m = hmac_md5(key, parts);
            let mut o = [0u8; 20];
            o[..16].copy_from_slice(&m);
            o
        }
    }

    fn aes_key(&self, user_key: &[u8]) -> [u8; 16] {
        md5(&[b64(user_key).as_bytes(), self.salt()])
    }

    fn rnd_len(&self, s: usize, full: usize) -> usize {
        let mss = self.info.tcp_mss as i64;
        if full >= BUFFER_SIZE - self.info.overhead {
            return 0;
        }
        let rev = mss - s as i64 - 9;
        if rev == 0 {
            return 0;
        }
        if rev < 0 {
            if rev > -mss {
                return trapezoid((rev + mss) as usize);
            }
            return rand_u8() as usize % 32;
        }
        if s > 900 {
            return (u16::from_be_bytes(rand_u16().to_le_bytes()) as i64 % rev) as usize;
        }
        trapezoid(rev as usize)
    }

    fn pack_data(&mut self, chunk: &[u8], full: usize, out: &mut Vec<u8>) {
        let Some(uk) = self.user_key.clone() else {
            return;
        };
        let n = self.rnd_len(chunk.len(), full);
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        if n < 128 {
            out.push(n as u8 + 1);
            out.extend_from_slice(&random_bytes(n));
        } else {
            out.push(0xff);
            out.extend_from_slice(&((n + 1) as u16).to_le_bytes());
            out.extend_from_slice(&random_bytes(n - 2));
        }
        out.extend_from_slice(chunk);
        let l = (out.len() - start + 4) as u16;
        let k = [&uk[..], &self.pack_id.to_le_bytes()].concat();
        out[start..start + 2].copy_from_slice(&l.to_le_bytes());
        let m = self.mac(&k, &[&l.to_le_bytes()]);
        out[start + 2..start + 4].copy_from_slice(&m[..2]);
        let m = self.mac(&k, &[&out[start..]]);
        out.extend_from_slice(&m[..4]);
        self.pack_id = self.pack_id.wrapping_add(1);
    }

    fn pack_all(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        let full = data.len();
        while data.len() > AUTH_UNIT {
            self.pack_data(&data[..AUTH_UNIT], full, out);
            data = &data[AUTH_UNIT..];
        }
        // A server answers with an empty packet too (§4.1); a client never sends empty ones.
        if !data.is_empty() || matches!(self.side, Side::Server(_)) {
            self.pack_data(data, full, out);
        }
    }

    fn client_encode(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_header {
            let Side::Client(c) = &self.side else { return };
            let c = c.clone();
            let n = data.len().min(rand_range(0, 31) + head_size(data, 30));
            let chunk = &data[..n];
            let rnd_len = (rand_u16() % if n > 400 { 512 } else { 1024 }) as usize;
            let l = 31 + rnd_len + n + 4;
            let (uid, uk) = match &c.login {
                Some((uid, pw)) => (*uid, self.hash(pw)),
                None => (rand_u32(), self.info.key.to_vec()),
            };
            let mut block = [0u8; 16];
            block[..12].copy_from_slice(&c.auth_data());
            block[12..14].copy_from_slice(&(l as u16).to_le_bytes());
            block[14..].copy_from_slice(&(rnd_len as u16).to_le_bytes());
            aes128_block(&self.aes_key(&uk), &mut block, true);
            let mac_key = [&self.info.iv[..], &self.info.key].concat();
            let start = out.len();
            let check = rand_u8();
            out.push(check);
            out.extend_from_slice(&self.mac(&mac_key, &[&[check]])[..6]);
            out.extend_from_slice(&uid.to_le_bytes());
            out.extend_from_slice(&block);
            let m = self.mac(&mac_key, &[&out[start + 7..]]);
            out.extend_from_slice(&m[..4]);
            out.extend_from_slice(&random_bytes(rnd_len));
            out.extend_from_slice(chunk);
            let m = self.mac(&uk, &[&out[start..]]);
            out.extend_from_slice(&m[..4]);
            self.user_key = Some(uk);
            self.sent_header = true;
            data = &data[n..];
        }
        self.pack_all(data, out);
    }

    /// Data packets (both directions); `true` when one carried no data.
    fn decode_data(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.recv.extend_from_slice(data);
        let Some(uk) = self.user_key.clone() else {
            return Err(Error::Frame);
        };
        let mut empty = false;
        let mut at = 0;
        while self.recv.len() - at > 4 {
            let k = [&uk[..], &self.recv_id.to_le_bytes()].concat();
            let b = &self.recv[at..];
            if !ct::eq(&self.mac(&k, &[&b[..2]])[..2], &b[2..4]) {
                return Err(Error::Frame);
            }
            let l = u16::from_le_bytes([b[0], b[1]]) as usize;
            if !(7..8192).contains(&l) {
                return Err(Error::Frame);
            }
            if l > b.len() {
                break;
            }
            if !ct::eq(&self.mac(&k, &[&b[..l - 4]])[..4], &b[l - 4..l]) {
                return Err(Error::Frame);
            }
            self.recv_id = self.recv_id.wrapping_add(1);
            let pos = if b[4] < 255 {
                4 + b[4] as usize
            } else {
                4 + u16::from_le_bytes([b[5], b[6]]) as usize
            };
            if pos > l - 4 {
                return Err(Error::Frame);
            }
            empty |= pos == l - 4;
            out.extend_from_slice(&b[pos..l - 4]);
            at += l;
        }
        self.recv.drain(..at);
        Ok(empty)
    }

    fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_header {
            return self.decode_data(data, out);
        }
        let Side::Server(shared) = &self.side else {
            return Err(Error::Auth);
        };
        let shared = shared.clone();
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        // The head checked once: later pieces only wait for the whole packet.
        if self.head.is_none() {
            let mac_key = [&self.recv_iv[..], &self.info.key].concat();
            if b.len() >= 2 {
                let n = b.len().min(7);
                if !ct::eq(&self.mac(&mac_key, &[&b[..1]])[..n - 1], &b[1..n]) {
                    return Err(Error::Auth);
                }
            }
            if b.len() < 31 {
                return Ok(false);
            }
            if !ct::eq(&self.mac(&mac_key, &[&b[7..27]])[..4], &b[27..31]) {
                return Err(Error::Auth);
            }
            let uid = u32::from_le_bytes(crate::common::array(&b[7..11]));
            let user = shared.user_of(uid).ok_or(Error::UnknownUser)?;
            let uk = match &user {
                Some(u) => self.hash(&u.password),
                None => self.info.key.to_vec(),
            };
            let mut block = [0u8; 16];
            block.copy_from_slice(&b[11..27]);
            aes128_block(&self.aes_key(&uk), &mut block, false);
            let l = u16::from_le_bytes([block[12], block[13]]) as usize;
            let rnd_len = u16::from_le_bytes([block[14], block[15]]) as usize;
            if l < 35 || 31 + rnd_len > l - 4 {
                return Err(Error::Auth);
            }
            self.head = Some(Box::new((block, uk, user)));
        }
        let Some(head) = self.head.as_ref() else {
            return Err(Error::Auth);
        };
        let (block, uk, user) = (head.0, head.1.clone(), head.2.clone());
        let l = u16::from_le_bytes([block[12], block[13]]) as usize;
        let rnd_len = u16::from_le_bytes([block[14], block[15]]) as usize;
        if b.len() < l {
            return Ok(false);
        }
        if !ct::eq(&self.mac(&uk, &[&b[..l - 4]])[..4], &b[l - 4..l]) {
            return Err(Error::Auth);
        }
        let utc = u32::from_le_bytes(crate::common::array(&block[..4]));
        let id = [&b"a128"[..], &b[7..11], &block[4..12]].concat();
        shared.admit(utc, &id)?;
        out.extend_from_slice(&b[31 + rnd_len..l - 4]);
        self.recv.drain(..l);
        self.user_key = Some(uk);
        self.user = user;
        self.recv_header = true;
        self.decode_data(&[], out)?;
        Ok(true)
    }
}

/// `int(m · (sqrt(1.69 − 1.2·u) − 1.3) / −0.6)`: small values more likely.
fn trapezoid(m: usize) -> usize {
    let d = -0.3f64;
    let a = 1.0 - d;
    let v = ((a * a + 4.0 * d * rand_f64()).sqrt() - a) / (2.0 * d);
    ((v * m as f64) as usize).min(m)
}

// ---------------------------------------------------------------------------------------------
// auth_chain_a … _e (§4.5–§4.7)

pub struct AuthChain {
    kind: Kind,
    info: Info,
    side: Side,
    recv_iv: Vec<u8>,
    user_key: Vec<u8>,
    user: Option<SsrUser>,
    sent_header: bool,
    recv_header: bool,
    last_client: [u8; 16],
    last_server: [u8; 16],
    rng_client: XorShift,
    rng_server: XorShift,
    enc: Option<rc4::Rc4>,
    dec: Option<rc4::Rc4>,
    pack_id: u32,
    recv_id: u32,
    recv: Vec<u8>,
    /// auth_chain_b: L1, L2; c–e: L0 (in `list1`).
    list1: Vec<u16>,
    list2: Vec<u16>,
    /// Server: the client's overhead, sets the server's unit size.
    client_overhead: usize,
    unit_len: usize,
}

impl AuthChain {
    fn new(kind: Kind, info: Info, side: Side) -> AuthChain {
        let mut c = AuthChain {
            kind,
            recv_iv: Vec::new(),
            user_key: Vec::new(),
            user: None,
            sent_header: false,
            recv_header: false,
            last_client: [0; 16],
            last_server: [0; 16],
            rng_client: XorShift::default(),
            rng_server: XorShift::default(),
            enc: None,
            dec: None,
            pack_id: 1,
            recv_id: 1,
            recv: Vec::new(),
            list1: Vec::new(),
            list2: Vec::new(),
            client_overhead: 4,
            unit_len: 2800,
            info,
            side,
        };
        c.init_lists();
        c
    }

    fn salt(&self) -> &'static [u8] {
        match self.kind {
            Kind::AuthChainB => b"auth_chain_b",
            Kind::AuthChainC => b"auth_chain_c",
            Kind::AuthChainD => b"auth_chain_d",
            Kind::AuthChainE => b"auth_chain_e",
            _ => b"auth_chain_a",
        }
    }

    fn init_lists(&mut self) {
        let mut r = XorShift::default();
        r.init_from_bin(&self.info.key);
        let size = |r: &mut XorShift| (r.next_u64() % 2340 % 2040 % 1440) as u16;
        match self.kind {
            Kind::AuthChainB => {
                let n = r.next_u64() % 8 + 4;
                self.list1 = (0..n).map(|_| size(&mut r)).collect();
                self.list1.sort_unstable();
                let n = r.next_u64() % 16 + 8;
                self.list2 = (0..n).map(|_| size(&mut r)).collect();
                self.list2.sort_unstable();
            }
            Kind::AuthChainC | Kind::AuthChainD | Kind::AuthChainE => {
                let n = r.next_u64() % 24 + 12;
                self.list1 = (0..n).map(|_| size(&mut r)).collect();
                self.list1.sort_unstable();
                if self.kind != Kind::AuthChainC {
                    let old = self.list1.len();
                    while self.list1.last().is_some_and(|&l| l < 1300) && self.list1.len() < 64 {
                        self.list1.push(size(&mut r));
                    }
                    if old != self.list1.len() {
                        self.list1.sort_unstable();
                    }
                }
            }
            _ => {}
        }
    }

    /// The random length of a packet carrying `n` bytes (the variant's rule).
    fn rnd_len(&self, n: usize, h: &[u8; 16], rng: &mut XorShift) -> usize {
        let ladder = |v: usize, rng: &mut XorShift| -> usize {
            (if v > 1300 {
                rng.next_u64() % 31
            } else if v > 900 {
                rng.next_u64() % 127
            } else if v > 400 {
                rng.next_u64() % 521
            } else {
                rng.next_u64() % 1021
            }) as usize
        };
        let bisect = |l: &[u16], t: usize| l.partition_point(|&x| (x as usize) < t);
        let t = n + self.info.overhead;
        match self.kind {
            Kind::AuthChainA => {
                if n > 1440 {
                    return 0;
                }
                rng.init_from_bin_len(h, n);
                ladder(n, rng)
            }
            Kind::AuthChainB => {
                if n >= 1440 {
                    return 0;
                }
                rng.init_from_bin_len(h, n);
                let (l1, l2) = (&self.list1, &self.list2);
                let pos = bisect(l1, t);
                let f = pos + (rng.next_u64() % l1.len() as u64) as usize;
                if f < l1.len() {
                    return (l1[f] as usize).saturating_sub(t);
                }
                let pos = bisect(l2, t);
                let f = pos + (rng.next_u64() % l2.len() as u64) as usize;
                if f < l2.len() {
                    return (l2[f] as usize).saturating_sub(t);
                }
                if f < pos + l2.len() - 1 {
                    return 0;
                }
                ladder(n, rng)
            }
            Kind::AuthChainC => {
                rng.init_from_bin_len(h, n);
                let l0 = &self.list1;
                let last = *l0.last().unwrap_or(&0) as usize;
                if t >= last {
                    if t >= 1440 {
                        return 0;
                    }
                    return ladder(t, rng);
                }
                let pos = bisect(l0, t);
                let f = pos + (rng.next_u64() % (l0.len() - pos) as u64) as usize;
                l0[f] as usize - t
            }
            Kind::AuthChainD => {
                let l0 = &self.list1;
                let last = *l0.last().unwrap_or(&0) as usize;
                if t >= last {
                    return 0;
                }
                rng.init_from_bin_len(h, n);
                let pos = bisect(l0, t);
                let f = pos + (rng.next_u64() % (l0.len() - pos) as u64) as usize;
                l0[f] as usize - t
            }
            _ => {
                rng.init_from_bin_len(h, n);
                let l0 = &self.list1;
                let last = *l0.last().unwrap_or(&0) as usize;
                if t >= last {
                    return 0;
                }
                l0[bisect(l0, t)] as usize - t
            }
        }
    }

    /// One data packet of `chunk` (client: `LCH`, server: `LSH`).
    fn pack(&mut self, chunk: &[u8], client: bool, out: &mut Vec<u8>) {
        let mut e = chunk.to_vec();
        if let Some(c) = self.enc.as_mut() {
            use aes::cipher::StreamCipher;
            c.apply_keystream(&mut e);
        }
        let (h, mut rng) = if client {
            (self.last_client, std::mem::take(&mut self.rng_client))
        } else {
            (self.last_server, std::mem::take(&mut self.rng_server))
        };
        let r = self.rnd_len(e.len(), &h, &mut rng);
        let start = out.len();
        let len = e.len() as u16 ^ u16::from_le_bytes([h[14], h[15]]);
        out.extend_from_slice(&len.to_le_bytes());
        if e.is_empty() {
            out.extend_from_slice(&random_bytes(r));
        } else if r > 0 {
            let p = (rng.next_u64() % 8589934609 % r as u64) as usize;
            let pad = random_bytes(r);
            out.extend_from_slice(&pad[..p]);
            out.extend_from_slice(&e);
            out.extend_from_slice(&pad[p..]);
        } else {
            out.extend_from_slice(&e);
        }
        let k = [&self.user_key[..], &self.pack_id.to_le_bytes()].concat();
        let mac = hmac_md5(&k, &[&out[start..]]);
        out.extend_from_slice(&mac[..2]);
        self.pack_id = self.pack_id.wrapping_add(1);
        if client {
            self.last_client = mac;
            self.rng_client = rng;
        } else {
            self.last_server = mac;
            self.rng_server = rng;
        }
    }

    fn rc4_for(&self, h: &[u8]) -> Option<rc4::Rc4> {
        super::cipher::rc4_new(&md5(&[b64(&self.user_key).as_bytes(), b64(h).as_bytes()]))
    }

    fn client_encode(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_header {
            let Side::Client(c) = &self.side else { return };
            let c = c.clone();
            let n = data.len().min(rand_range(0, 31) + head_size(data, 30));
            let mut block = [0u8; 16];
            block[..12].copy_from_slice(&c.auth_data());
            block[12..14].copy_from_slice(&(self.info.overhead as u16).to_le_bytes());
            let mac_key = [&self.info.iv[..], &self.info.key].concat();
            let check = random_bytes(4);
            self.last_client = hmac_md5(&mac_key, &[&check]);
            let (uid, uk) = match &c.login {
                Some((uid, pw)) => (*uid, pw.clone()),
                None => (rand_u32(), self.info.key.to_vec()),
            };
            self.user_key = uk;
            aes128_block(
                &md5(&[b64(&self.user_key).as_bytes(), self.salt()]),
                &mut block,
                true,
            );
            let lc = self.last_client;
            let uidx = uid ^ u32::from_le_bytes(crate::common::array(&lc[8..12]));
            let mut d = Vec::with_capacity(20);
            d.extend_from_slice(&uidx.to_le_bytes());
            d.extend_from_slice(&block);
            self.last_server = hmac_md5(&self.user_key, &[&d]);
            out.extend_from_slice(&check);
            out.extend_from_slice(&lc[..8]);
            out.extend_from_slice(&d);
            out.extend_from_slice(&self.last_server[..4]);
            self.enc = self.rc4_for(&lc);
            self.dec = self.rc4_for(&lc);
            self.sent_header = true;
            self.pack(&data[..n], true, out);
            data = &data[n..];
        }
        while data.len() > self.unit_len {
            self.pack(&data[..self.unit_len], true, out);
            data = &data[self.unit_len..];
        }
        if !data.is_empty() {
            self.pack(data, true, out);
        }
    }

    /// Data packets from the other side; `Ok(true)` when one carried no data.
    fn decode_data(&mut self, client: bool, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.recv.extend_from_slice(data);
        let mut empty = false;
        let mut at = 0;
        while self.recv.len() - at > 4 {
            let b = &self.recv[at..];
            // The packets we receive: a client reads the server's, a server the client's.
            let (h, mut rng) = if client {
                (self.last_server, self.rng_server.clone())
            } else {
                (self.last_client, self.rng_client.clone())
            };
            let n =
                (u16::from_le_bytes([b[0], b[1]]) ^ u16::from_le_bytes([h[14], h[15]])) as usize;
            let r = self.rnd_len(n, &h, &mut rng);
            let l = n + r;
            if l >= 4096 {
                return Err(Error::Frame);
            }
            if l + 4 > b.len() {
                break;
            }
            let k = [&self.user_key[..], &self.recv_id.to_le_bytes()].concat();
            let mac = hmac_md5(&k, &[&b[..l + 2]]);
            if !ct::eq(&mac[..2], &b[l + 2..l + 4]) {
                return Err(Error::Frame);
            }
            let pos = if n > 0 && r > 0 {
                2 + (rng.next_u64() % 8589934609 % r as u64) as usize
            } else {
                2
            };
            let mut e = b[pos..pos + n].to_vec();
            if let Some(d) = self.dec.as_mut() {
                use aes::cipher::StreamCipher;
                d.apply_keystream(&mut e);
            }
            if client && self.recv_id == 1 {
                // The server's first packet starts with its TCP MSS.
                e.drain(..e.len().min(2));
            }
            empty |= n == 0;
            out.extend_from_slice(&e);
            self.recv_id = self.recv_id.wrapping_add(1);
            if client {
                self.last_server = mac;
                self.rng_server = rng;
            } else {
                self.last_client = mac;
                self.rng_client = rng;
            }
            at += l + 4;
        }
        self.recv.drain(..at);
        Ok(empty)
    }

    fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.decode_data(true, data, out).map(|_| ())
    }

    fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let mut buf;
        let mut data = data;
        if self.pack_id == 1 {
            let mss = self.info.tcp_mss.min(1500);
            buf = (mss as u16).to_le_bytes().to_vec();
            buf.extend_from_slice(data);
            data = &buf;
            self.unit_len = mss.saturating_sub(self.client_overhead).max(100);
        }
        while data.len() > self.unit_len {
            self.pack(&data[..self.unit_len], false, out);
            data = &data[self.unit_len..];
        }
        self.pack(data, false, out);
    }

    fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_header {
            return self.decode_data(false, data, out);
        }
        let Side::Server(shared) = &self.side else {
            return Err(Error::Auth);
        };
        let shared = shared.clone();
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        let mac_key = [&self.recv_iv[..], &self.info.key].concat();
        if b.len() >= 5 {
            let lc = hmac_md5(&mac_key, &[&b[..4]]);
            let n = b.len().min(12);
            if lc[..n - 4] != b[4..n] {
                return Err(Error::Auth);
            }
        }
        if b.len() < 36 {
            return Ok(false);
        }
        let lc = hmac_md5(&mac_key, &[&b[..4]]);
        let uid = u32::from_le_bytes(crate::common::array(&b[12..16]))
            ^ u32::from_le_bytes(crate::common::array(&lc[8..12]));
        let user = shared.user_of(uid).ok_or(Error::UnknownUser)?;
        let uk = match &user {
            Some(u) => u.password.clone(),
            None => self.info.key.to_vec(),
        };
        let ls = hmac_md5(&uk, &[&b[12..32]]);
        if ls[..4] != b[32..36] {
            return Err(Error::Auth);
        }
        let mut block = [0u8; 16];
        block.copy_from_slice(&b[16..32]);
        aes128_block(&md5(&[b64(&uk).as_bytes(), self.salt()]), &mut block, false);
        let utc = u32::from_le_bytes(crate::common::array(&block[..4]));
        let id = [&b"chain"[..], &uid.to_le_bytes(), &block[4..12]].concat();
        shared.admit(utc, &id)?;
        self.client_overhead = u16::from_le_bytes([block[12], block[13]]) as usize;
        self.last_client = lc;
        self.last_server = ls;
        self.user_key = uk;
        self.user = user;
        self.enc = self.rc4_for(&lc);
        self.dec = self.rc4_for(&lc);
        self.recv.drain(..36);
        self.recv_header = true;
        self.decode_data(false, &[], out)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

    fn info(key: &[u8], overhead: usize) -> Info {
        Info {
            key: key.into(),
            iv: (0..16).collect(),
            overhead,
            tcp_mss: TCP_MSS,
        }
    }

    #[test]
    fn deflate_vector_and_round_trip() {
        let mut d = Deflate::default();
        let mut out = Vec::new();
        d.encode(b"hello", &mut out);
        assert_eq!(out, hex("000dcb48cdc9c90700062c0215"));
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut wire = Vec::new();
        d.encode(&big, &mut wire);
        let mut back = Vec::new();
        for c in wire.chunks(999) {
            d.decode(c, &mut back).unwrap();
        }
        assert_eq!(back, big);
        // A packet inflating past one chunk (a deflate bomb) is refused.
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&[0u8; 40_000]).unwrap();
        let c = z.finish().unwrap();
        let mut bomb = ((c.len()) as u16).to_be_bytes().to_vec();
        bomb.extend_from_slice(&c[2..]);
        assert_eq!(
            Deflate::default().decode(&bomb, &mut Vec::new()),
            Err(Error::Frame)
        );
    }

    #[test]
    fn auth_chain_vectors() {
        // §8 #3 and #4.
        let key = crate::proxy::shadowsocks::cipher::evp_bytes_to_key(b"password", 16);
        let a = AuthChain::new(
            Kind::AuthChainA,
            info(&key, 4),
            Side::Client(Arc::new(ClientShared::new(""))),
        );
        let h: [u8; 16] = hex("900150983cd24fb0d6963f7d28e17f72").try_into().unwrap();
        let mut r = XorShift::default();
        for (n, want) in [
            (0, 191),
            (100, 257),
            (500, 21),
            (1000, 82),
            (1350, 22),
            (1440, 20),
            (1441, 0),
        ] {
            assert_eq!(a.rnd_len(n, &h, &mut r), want, "n={n}");
        }
        let b = AuthChain::new(
            Kind::AuthChainB,
            info(&key, 4),
            Side::Client(Arc::new(ClientShared::new(""))),
        );
        assert_eq!(b.list1, [28, 142, 220, 301]);
        assert_eq!(
            b.list2,
            [
                82, 105, 201, 214, 244, 308, 310, 407, 420, 477, 498, 591, 691, 700, 878, 890, 909,
                1209, 1356
            ]
        );
    }

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
