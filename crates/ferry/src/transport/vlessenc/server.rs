//! The server's handshake: undo the relays with every key of the chain, then answer a 1-RTT
//! key exchange (with a ticket) or resume a 0-RTT one from the ticket store. The store is
//! bounded: it holds at most [`MAX_TICKETS`] sessions and each remembers at most
//! [`MAX_RESUMES`] resumptions (the replay check); past that, a ticket counts as expired and
//! the client does a new handshake.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_lc_rs::kem;
use tokio::io::AsyncWriteExt;

use super::config::{self, between, Mode, ServerConfig, ServerKey, MLKEM_EK};
use super::hs::{self, Reader};
use super::kdf::{Aead, Ctr};
use super::stream::{record_len, EncStream, Setup};
use super::xor::HeaderXor;
use crate::transport::reality::{generate_x25519, keys::x25519};
use crate::transport::BoxStream;

pub const MAX_TICKETS: usize = 32 * 1024;
pub const MAX_RESUMES: usize = 4096;

struct Session {
    pfs: [u8; 64],
    seen: HashSet<[u8; 32]>,
}

#[derive(Default)]
struct Tickets {
    sessions: HashMap<[u8; 16], Session>,
    /// Tickets in the order they were issued, with when they go.
    order: VecDeque<(Instant, [u8; 16])>,
}

impl Tickets {
    fn sweep(&mut self, now: Instant) {
        while let Some(&(at, t)) = self.order.front() {
            if at > now && self.order.len() < MAX_TICKETS {
                break;
            }
            self.order.pop_front();
            self.sessions.remove(&t);
        }
    }
}

/// Why a handshake failed: Xray's words, and the tag of Ferry's rejection counter.
#[derive(Debug)]
pub struct Refused {
    pub kind: &'static str,
    pub why: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

fn refuse(kind: &'static str, why: impl Into<String>) -> Refused {
    Refused {
        kind,
        why: why.into(),
    }
}

fn io_refused(e: io::Error) -> Refused {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => refuse("truncated", e.to_string()),
        _ => refuse("io", e.to_string()),
    }
}

/// An inbound's decryption: its keys and the tickets it issued.
pub struct Server {
    cfg: ServerConfig,
    tickets: Mutex<Tickets>,
}

impl Server {
    pub fn new(cfg: ServerConfig) -> Server {
        Server {
            cfg,
            tickets: Mutex::new(Tickets::default()),
        }
    }

    /// Sessions held now (a bound the tests check).
    pub fn sessions(&self) -> usize {
        self.tickets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sessions
            .len()
    }

    /// Undoes the relays in `ivr` (`iv | relays`); returns the last key's shared secret.
    fn unrelay(&self, ivr: &mut [u8]) -> Result<Vec<u8>, Refused> {
        let iv = hs::iv16(ivr);
        let mut rest = &mut ivr[16..];
        let mut nfs = Vec::new();
        let mut link: Option<Ctr> = None;
        let n = self.cfg.keys.len();
        for (j, k) in self.cfg.keys.iter().enumerate() {
            if let Some(l) = &mut link {
                l.xor(&mut rest[..32]);
            }
            let idx = k.relay_len();
            if self.cfg.mode != Mode::Native {
                Ctr::new(k.public(), &iv).xor(&mut rest[..idx]);
            }
            match k {
                ServerKey::X25519 { private, .. } => {
                    if rest[31] > 127 {
                        return Err(refuse(
                            "bad_key",
                            "the highest bit of the last byte of the peer-sent X25519 public \
                             key is not 0",
                        ));
                    }
                    nfs = x25519(private, &rest[..32])
                        .ok_or_else(|| refuse("bad_key", "bad X25519 public key"))?
                        .to_vec();
                }
                ServerKey::MlKem { key, .. } => {
                    nfs = config::mlkem_decapsulate(key, &rest[..idx])
                        .ok_or_else(|| refuse("bad_key", "bad ML-KEM-768 ciphertext"))?
                        .to_vec();
                }
            }
            if j + 1 == n {
                break;
            }
            rest = &mut rest[idx..];
            let mut l = hs::link(&nfs, &iv);
            l.xor(&mut rest[..32]);
            if rest[..32] != self.cfg.hashes[j + 1] {
                return Err(refuse(
                    "bad_key",
                    format!("unexpected hash32: {:?}", &rest[..32]),
                ));
            }
            rest = &mut rest[32..];
            link = Some(l);
        }
        Ok(nfs)
    }

    /// Runs the handshake over `io`; `splice_ok`: `io` is a bare socket.
    pub async fn handshake(
        &self,
        mut io: BoxStream,
        splice_ok: bool,
    ) -> Result<EncStream, Refused> {
        let mut r = Reader::new();
        let mut ivr = r
            .take(&mut io, 16 + self.cfg.relays_len())
            .await
            .map_err(io_refused)?;
        let nfs = self.unrelay(&mut ivr)?;
        let iv = hs::iv16(&ivr);
        let first = r.take(&mut io, 18).await.map_err(io_refused)?;
        let mut aes = true;
        let mut nfs_aead = Aead::new(&iv, &nfs, aes);
        let mut len = first.clone();
        if nfs_aead.open(&[], &mut len).is_err() {
            aes = false;
            nfs_aead = Aead::new(&iv, &nfs, aes);
            len = first;
            nfs_aead
                .open(&[], &mut len)
                .map_err(|_| refuse("auth", "the first length does not open"))?;
        }
        let length = hs::u16_at(&len);
        let random = self.cfg.mode == Mode::Random;

        if length == 32 {
            if self.cfg.seconds == (0, 0) {
                return Err(refuse("zero_rtt", "0-RTT is not allowed"));
            }
            let sealed = r.take(&mut io, 32).await.map_err(io_refused)?;
            let mut ticket = sealed.clone();
            nfs_aead
                .open(&[], &mut ticket)
                .map_err(|_| refuse("auth", "the ticket does not open"))?;
            let mut t16 = [0u8; 16];
            t16.copy_from_slice(&ticket[..16]);
            let pfs = {
                let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
                t.sweep(Instant::now());
                match t.sessions.get_mut(&t16) {
                    None => None,
                    Some(s) if s.seen.len() >= MAX_RESUMES => None,
                    Some(s) => {
                        let mut k = [0u8; 32];
                        k.copy_from_slice(&nfs);
                        if !s.seen.insert(k) {
                            return Err(refuse("replay", "replay detected"));
                        }
                        Some(s.pfs)
                    }
                }
            };
            let Some(pfs) = pfs else {
                // Bytes that are no record header: the client starts over with 1-RTT.
                let mut noise = vec![0u8; between(1279, 2279) as usize];
                loop {
                    crate::common::rand::fill(&mut noise);
                    if record_len(&noise[..5]).is_none() {
                        break;
                    }
                }
                let _ = io.write_all(&noise).await;
                return Err(refuse("expired", "expired ticket"));
            };
            tracing::debug!("vless encryption: 0-RTT, resumed a ticket");
            let mut united = pfs.to_vec();
            united.extend_from_slice(&nfs);
            let mut server_random = [0u8; 16];
            crate::common::rand::fill(&mut server_random);
            let (xor_in, xor_out) = match random {
                true => (
                    Some(HeaderXor::new(Ctr::new(&united, &iv), 0, false)),
                    Some(HeaderXor::new(Ctr::new(&united, &server_random), 16, true)),
                ),
                false => (None, None),
            };
            return Ok(EncStream::new(Setup {
                io,
                held: r.rest(),
                write: Aead::new(&server_random, &united, aes),
                read: Some(Aead::new(&sealed, &united, aes)),
                united,
                aes,
                pre_write: server_random.to_vec(),
                peer_padding: 0,
                xor_in,
                xor_out,
                random,
                resumed: None,
                splice_ok,
            }));
        }

        if length < MLKEM_EK + 32 + 16 {
            return Err(refuse("short", "too short length"));
        }
        let mut client_pfs = r.take(&mut io, length).await.map_err(io_refused)?;
        nfs_aead
            .open(&[], &mut client_pfs)
            .map_err(|_| refuse("auth", "the key exchange does not open"))?;
        let ek = kem::EncapsulationKey::new(&kem::ML_KEM_768, &client_pfs[..MLKEM_EK])
            .map_err(|_| refuse("bad_key", "bad ML-KEM-768 encapsulation key"))?;
        let (ct, mlkem) = ek
            .encapsulate()
            .map_err(|_| refuse("bad_key", "ML-KEM-768 encapsulation failed"))?;
        let (x_private, x_public) = generate_x25519();
        let xkey = x25519(&x_private, &client_pfs[MLKEM_EK..MLKEM_EK + 32])
            .ok_or_else(|| refuse("bad_key", "bad X25519 public key"))?;
        let mut pfs = [0u8; 64];
        pfs[..32].copy_from_slice(mlkem.as_ref());
        pfs[32..].copy_from_slice(&xkey);
        let mut server_pfs = ct.as_ref().to_vec();
        server_pfs.extend_from_slice(&x_public);
        let mut united = pfs.to_vec();
        united.extend_from_slice(&nfs);
        let mut write = Aead::new(&server_pfs, &united, aes);
        let read = Aead::new(&client_pfs[..MLKEM_EK + 32], &united, aes);

        let mut ticket = [0u8; 16];
        crate::common::rand::fill(&mut ticket);
        let (from, to) = self.cfg.seconds;
        let seconds = match to {
            0 => from * between(50, 100) / 100,
            _ => between(from, to),
        };
        ticket[..2].copy_from_slice(&(seconds as u16).to_be_bytes());
        if seconds > 0 {
            let now = Instant::now();
            let keep = Duration::from_secs(from.max(to).max(0) as u64 + 150);
            let mut t = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
            t.sweep(now);
            t.order.push_back((now + keep, ticket));
            t.sessions.insert(
                ticket,
                Session {
                    pfs,
                    seen: HashSet::new(),
                },
            );
        }

        tracing::debug!("vless encryption: 1-RTT, a ticket for {seconds}s");
        let (total, mut pieces, gaps) = self.cfg.padding.draw();
        let mut hello = server_pfs;
        nfs_aead.seal_max(&mut hello, 0);
        let at = hello.len();
        hello.extend_from_slice(&ticket);
        write.seal(&[], &mut hello, at);
        let head = hello.len();
        let at = hello.len();
        hello.extend_from_slice(&((total - 18) as u16).to_be_bytes());
        write.seal(&[], &mut hello, at);
        let at = hello.len();
        hello.resize(at + total - 34, 0);
        write.seal(&[], &mut hello, at);
        pieces[0] += head;
        hs::write_pieces(&mut io, &hello, &pieces, &gaps)
            .await
            .map_err(io_refused)?;

        // The client's padding, which it may send slowly.
        let mut plen = r.take(&mut io, 18).await.map_err(io_refused)?;
        nfs_aead
            .open(&[], &mut plen)
            .map_err(|_| refuse("auth", "the padding length does not open"))?;
        let mut pad = r
            .take(&mut io, hs::u16_at(&plen))
            .await
            .map_err(io_refused)?;
        nfs_aead
            .open(&[], &mut pad)
            .map_err(|_| refuse("auth", "the padding does not open"))?;
        let (xor_in, xor_out) = match random {
            true => (
                Some(HeaderXor::new(Ctr::new(&united, &iv), 0, false)),
                Some(HeaderXor::new(Ctr::new(&united, &ticket), 0, true)),
            ),
            false => (None, None),
        };
        Ok(EncStream::new(Setup {
            io,
            held: r.rest(),
            united,
            aes,
            write,
            read: Some(read),
            pre_write: Vec::new(),
            peer_padding: 0,
            xor_in,
            xor_out,
            random,
            resumed: None,
            splice_ok,
        }))
    }
}
