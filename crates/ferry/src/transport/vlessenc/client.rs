//! The client's handshake: relays for each server key, then a 1-RTT key exchange (ML-KEM-768
//! and X25519, padded, in pieces) or, with a live ticket, a 0-RTT flight that leaves with the
//! first record.

use std::io;
use std::sync::Arc;

use aws_lc_rs::kem;

use super::config::{ClientConfig, ClientKey, Mode, MLKEM_CT};
use super::hs::{self, Reader};
use super::kdf::{Aead, Ctr};
use super::stream::{EncStream, Resumed, Setup};
use super::ticket::TicketSlot;
use super::xor::HeaderXor;
use crate::transport::reality::{generate_x25519, keys::x25519};
use crate::transport::BoxStream;

/// An outbound's encryption: its configuration and the one ticket it holds.
pub struct Client {
    cfg: ClientConfig,
    aes: bool,
    ticket: Arc<TicketSlot>,
}

fn err(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Arc<Client> {
        Arc::new(Client {
            cfg,
            aes: crate::transport::tls::aes_hardware(),
            ticket: Arc::default(),
        })
    }

    /// Whether a live ticket is held (the next dial goes 0-RTT).
    pub fn has_ticket(&self) -> bool {
        self.ticket.live().is_some()
    }

    fn live_ticket(&self) -> Option<([u8; 64], [u8; 16])> {
        match self.cfg.zero_rtt {
            true => self.ticket.live(),
            false => None,
        }
    }

    /// `iv | relays` and the last key's shared secret.
    fn relays(&self) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let mut out = vec![0u8; 16];
        crate::common::rand::fill(&mut out);
        let iv = hs::iv16(&out);
        let mut nfs = Vec::new();
        let mut link: Option<Ctr> = None;
        let n = self.cfg.keys.len();
        for (j, k) in self.cfg.keys.iter().enumerate() {
            let at = out.len();
            match k {
                ClientKey::X25519(public) => {
                    let (private, mine) = generate_x25519();
                    out.extend_from_slice(&mine);
                    nfs = x25519(&private, public)
                        .ok_or_else(|| err("X25519 with the server key failed"))?
                        .to_vec();
                }
                ClientKey::MlKem(ek, _) => {
                    let (ct, secret) = ek
                        .encapsulate()
                        .map_err(|_| err("ML-KEM-768 encapsulation failed"))?;
                    out.extend_from_slice(ct.as_ref());
                    nfs = secret.as_ref().to_vec();
                }
            }
            if self.cfg.mode != Mode::Native {
                Ctr::new(k.bytes(), &iv).xor(&mut out[at..]);
            }
            if let Some(l) = &mut link {
                l.xor(&mut out[at..at + 32]);
            }
            if j + 1 < n {
                let mut l = hs::link(&nfs, &iv);
                let h = out.len();
                out.extend_from_slice(&self.cfg.hashes[j + 1]);
                l.xor(&mut out[h..]);
                link = Some(l);
            }
        }
        Ok((out, nfs))
    }

    /// Runs the handshake over `io`; `splice_ok`: `io` is a bare socket.
    pub async fn handshake(&self, mut io: BoxStream, splice_ok: bool) -> io::Result<EncStream> {
        let (mut hello, nfs) = self.relays()?;
        let iv = hs::iv16(&hello);
        let mut nfs_aead = Aead::new(&iv, &nfs, self.aes);
        let random = self.cfg.mode == Mode::Random;

        if let Some((pfs, ticket)) = self.live_ticket() {
            let mut united = pfs.to_vec();
            united.extend_from_slice(&nfs);
            let at = hello.len();
            hello.extend_from_slice(&32u16.to_be_bytes());
            nfs_aead.seal(&[], &mut hello, at);
            let t = hello.len();
            hello.extend_from_slice(&ticket);
            nfs_aead.seal(&[], &mut hello, t);
            let write = Aead::new(&hello[t..], &united, self.aes);
            let xor_out = random.then(|| HeaderXor::new(Ctr::new(&united, &iv), hello.len(), true));
            return Ok(EncStream::new(Setup {
                io,
                held: Vec::new(),
                united,
                aes: self.aes,
                write,
                read: None,
                pre_write: hello,
                peer_padding: 0,
                xor_in: None,
                xor_out,
                random,
                resumed: Some(Resumed {
                    slot: self.ticket.clone(),
                    pfs,
                }),
                splice_ok,
            }));
        }

        // 1-RTT: an ephemeral ML-KEM-768 key and X25519 key, sealed for the server.
        let dk = kem::DecapsulationKey::generate(&kem::ML_KEM_768)
            .map_err(|_| err("ML-KEM-768 key generation failed"))?;
        let ek = dk
            .encapsulation_key()
            .and_then(|k| k.key_bytes().map(|b| b.as_ref().to_vec()))
            .map_err(|_| err("ML-KEM-768 key generation failed"))?;
        let (x_private, x_public) = generate_x25519();
        let mut pfs_public = ek;
        pfs_public.extend_from_slice(&x_public);
        let at = hello.len();
        hello.extend_from_slice(&((pfs_public.len() + 16) as u16).to_be_bytes());
        nfs_aead.seal(&[], &mut hello, at);
        let at = hello.len();
        hello.extend_from_slice(&pfs_public);
        nfs_aead.seal(&[], &mut hello, at);
        let head = hello.len();
        let (total, mut pieces, gaps) = self.cfg.padding.draw();
        let at = hello.len();
        hello.extend_from_slice(&((total - 18) as u16).to_be_bytes());
        nfs_aead.seal(&[], &mut hello, at);
        let at = hello.len();
        hello.resize(at + total - 34, 0);
        nfs_aead.seal(&[], &mut hello, at);
        pieces[0] += head;
        hs::write_pieces(&mut io, &hello, &pieces, &gaps).await?;

        let mut r = Reader::new();
        let mut reply = r.take(&mut io, MLKEM_CT + 32 + 16).await?;
        nfs_aead
            .open_max(&mut reply)
            .map_err(|_| err("the server's key exchange does not open"))?;
        let ct = kem::Ciphertext::from(&reply[..MLKEM_CT]);
        let mlkem = dk
            .decapsulate(ct)
            .map_err(|_| err("ML-KEM-768 decapsulation failed"))?;
        let xkey = x25519(&x_private, &reply[MLKEM_CT..MLKEM_CT + 32])
            .ok_or_else(|| err("X25519 with the server's key failed"))?;
        let mut pfs = [0u8; 64];
        pfs[..32].copy_from_slice(mlkem.as_ref());
        pfs[32..].copy_from_slice(&xkey);
        let mut united = pfs.to_vec();
        united.extend_from_slice(&nfs);
        let write = Aead::new(&pfs_public, &united, self.aes);
        let mut read = Aead::new(&reply[..MLKEM_CT + 32], &united, self.aes);

        let mut ticket = r.take(&mut io, 32).await?;
        read.open(&[], &mut ticket)
            .map_err(|_| err("the server's ticket does not open"))?;
        let mut t16 = [0u8; 16];
        t16.copy_from_slice(&ticket[..16]);
        let seconds = hs::u16_at(&t16);
        if self.cfg.zero_rtt && seconds > 0 {
            self.ticket.set(pfs, t16, seconds as u64);
        }
        let mut len = r.take(&mut io, 18).await?;
        read.open(&[], &mut len)
            .map_err(|_| err("the server's padding length does not open"))?;
        let padding = hs::u16_at(&len);
        let (xor_in, xor_out) = match random {
            true => (
                Some(HeaderXor::new(Ctr::new(&united, &t16), padding, false)),
                Some(HeaderXor::new(Ctr::new(&united, &iv), 0, true)),
            ),
            false => (None, None),
        };
        Ok(EncStream::new(Setup {
            io,
            held: r.rest(),
            united,
            aes: self.aes,
            write,
            read: Some(read),
            pre_write: Vec::new(),
            peer_padding: padding,
            xor_in,
            xor_out,
            random,
            resumed: None,
            splice_ok,
        }))
    }
}
