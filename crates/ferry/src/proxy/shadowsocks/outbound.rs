//! Shadowsocks client: dials the server through the outbound's dialer and wraps the stream;
//! the request header leaves with the first payload (or alone after 100 ms of silence).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::aead::{ChunkOpener, ChunkSealer, Error, AEAD_MAX_CHUNK, SS2022_MAX_CHUNK};
use super::cipher::{aead_subkey, random, session_subkey_2022, AeadAlg, AeadCipher, Kind};
use super::conn::{KeyFromSalt, Opener, Request, Sealer, SsStream};
use super::inbound::{AEAD_RBUF, SS2022_RBUF, STREAM_RBUF};
use super::ota::{self, OtaClient};
use super::stream_cipher::StreamCrypt;
use super::{parse_client, ss2022, udp, ClientConfig};
use crate::common::addr::socks;
use crate::common::Destination;
use crate::config::reader::{Obj, Result};
use crate::proxy::{OutboundBuild, OutboundHandler, PacketConn};
use crate::transport::{BoxStream, Dialer};

pub struct Outbound {
    pub cfg: Arc<ClientConfig>,
    dialer: Arc<dyn Dialer>,
}

pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let (cfg, _email) = parse_client(o)?;
    Ok(Arc::new(Outbound {
        cfg: Arc::new(cfg),
        dialer: b.dialer.clone(),
    }))
}

fn cipher(alg: AeadAlg, key: &[u8]) -> io::Result<AeadCipher> {
    AeadCipher::new(alg, key).ok_or_else(|| io::Error::other("bad key length"))
}

/// Wraps a connected stream as a client of `cfg` asking for `dest` (with one-time auth when
/// `cfg.ota`).
pub fn connect(inner: BoxStream, cfg: &ClientConfig, dest: &Destination) -> io::Result<BoxStream> {
    let s = wrap(inner, cfg, dest)?;
    if cfg.ota && cfg.method.kind() == Kind::Stream {
        let iv = s.client_iv().to_vec();
        return Ok(Box::new(OtaClient::new(s, iv)));
    }
    Ok(Box::new(s))
}

/// Wraps a connected stream as a client of `cfg` asking for `dest` (no chunk framing for OTA:
/// use [`connect`]).
pub fn wrap(inner: BoxStream, cfg: &ClientConfig, dest: &Destination) -> io::Result<SsStream> {
    let m = cfg.method;
    let addr = socks::to_bytes(dest).to_vec();
    let sl = m.salt_len();
    let mut salt = vec![0u8; sl];
    random(&mut salt);
    let key = cfg.key.clone();
    match m.kind() {
        Kind::None => Ok(SsStream::client(
            inner,
            0,
            Box::new(|_| Ok(Opener::Plain)),
            Sealer::Plain,
            Vec::new(),
            Request::Address(addr),
            STREAM_RBUF,
        )),
        Kind::Stream => {
            let sealer = StreamCrypt::new(m, &key, &salt, true)
                .ok_or_else(|| io::Error::other("bad key"))?;
            let req = if cfg.ota {
                ota::request_header(&salt, &key, &addr)
            } else {
                addr
            };
            let f: KeyFromSalt = Box::new(move |iv| {
                StreamCrypt::new(m, &key, iv, false)
                    .map(Opener::Stream)
                    .ok_or(Error::Auth)
            });
            Ok(SsStream::client(
                inner,
                sl,
                f,
                Sealer::Stream(sealer),
                salt,
                Request::Address(req),
                STREAM_RBUF,
            ))
        }
        Kind::Aead => {
            let alg = AeadAlg::of(m).ok_or_else(|| io::Error::other("not AEAD"))?;
            let nl = m.nonce_len();
            let sealer =
                ChunkSealer::new(cipher(alg, &aead_subkey(&key, &salt))?, nl, AEAD_MAX_CHUNK);
            let f: KeyFromSalt = Box::new(move |s| {
                let c = AeadCipher::new(alg, &aead_subkey(&key, s)).ok_or(Error::Auth)?;
                Ok(Opener::Aead(ChunkOpener::new(c, nl, AEAD_MAX_CHUNK)))
            });
            Ok(SsStream::client(
                inner,
                sl,
                f,
                Sealer::Aead(sealer),
                salt,
                Request::Address(addr),
                AEAD_RBUF,
            ))
        }
        Kind::Aead2022 => {
            let alg = AeadAlg::of(m).ok_or_else(|| io::Error::other("not AEAD"))?;
            let sealer = ChunkSealer::new(
                cipher(alg, &session_subkey_2022(&key, &salt))?,
                12,
                SS2022_MAX_CHUNK,
            );
            let mut head = salt.clone();
            ss2022::eih_tcp(&cfg.ipsks, &key, &salt, &mut head);
            let req_salt = salt;
            let f: KeyFromSalt = Box::new(move |s| {
                let c = AeadCipher::new(alg, &session_subkey_2022(&key, s)).ok_or(Error::Auth)?;
                Ok(Opener::Aead(
                    ChunkOpener::new(c, 12, SS2022_MAX_CHUNK).with_first_header(
                        ss2022::response_extra(sl),
                        ss2022::response_check(req_salt),
                    ),
                ))
            });
            Ok(SsStream::client(
                inner,
                sl,
                f,
                Sealer::Aead(sealer),
                head,
                Request::Ss2022(addr),
                SS2022_RBUF,
            ))
        }
    }
}

#[async_trait]
impl OutboundHandler for Outbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let inner = self.dialer.dial_tcp(&self.cfg.server).await?;
        connect(inner, &self.cfg, dest)
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let sock = self.dialer.dial_udp(&self.cfg.server).await?;
        Ok(Box::new(UdpClient {
            sock,
            cfg: self.cfg.clone(),
            session_id: udp::new_session_id(),
            packet_id: AtomicU64::new(0),
            server: Mutex::new(None),
        }))
    }
}

/// A client UDP association with the server.
pub struct UdpClient {
    sock: Box<dyn PacketConn>,
    cfg: Arc<ClientConfig>,
    session_id: u64,
    packet_id: AtomicU64,
    /// 2022: the server's session id and its packet window.
    server: Mutex<Option<(u64, udp::Window)>>,
}

#[async_trait]
impl PacketConn for UdpClient {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        let c = &self.cfg;
        let mut out = Vec::with_capacity(data.len() + 128);
        if c.method.kind() == Kind::Aead2022 {
            let s = udp::Sender2022 {
                method: c.method,
                header_key: c.ipsks.first().unwrap_or(&c.key),
                ipsks: &c.ipsks,
                user_key: &c.key,
                session_id: self.session_id,
                packet_id: self.packet_id.fetch_add(1, Ordering::Relaxed),
                client_session_id: None,
            };
            udp::encode_2022(&s, dest, data, &mut out);
        } else {
            udp::encode_simple_ota(c.method, &c.key, dest, data, c.ota, &mut out);
        }
        self.sock.send_to(&out, &c.server).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let c = &self.cfg;
        loop {
            let (n, _) = self.sock.recv_from(buf).await?;
            let p = &mut buf[..n];
            let res = if c.method.kind() == Kind::Aead2022 {
                let r = udp::Receiver2022 {
                    method: c.method,
                    header_key: &c.key,
                    users: &[],
                    key: &c.key,
                    from_server: true,
                };
                udp::decode_2022(&r, p).and_then(|pk| {
                    if pk.client_session_id != Some(self.session_id) {
                        return Err(Error::Header("reply for another session"));
                    }
                    let mut g = self.server.lock().unwrap_or_else(|e| e.into_inner());
                    let st = g.get_or_insert_with(|| (pk.session_id, udp::Window::default()));
                    if st.0 != pk.session_id {
                        // The server restarted its session: follow the new one.
                        *st = (pk.session_id, udp::Window::default());
                    }
                    if !st.1.check(pk.packet_id) {
                        return Err(Error::Replay);
                    }
                    st.1.record(pk.packet_id);
                    Ok((pk.addr, pk.payload))
                })
            } else {
                udp::decode_simple(c.method, &c.key, p)
            };
            match res {
                Ok((from, r)) => {
                    let k = r.len();
                    buf.copy_within(r, 0);
                    return Ok((k, from));
                }
                Err(e) => tracing::info!("shadowsocks udp: dropped reply from {}: {e}", c.server),
            }
        }
    }
}
