//! The client handshake (transports2.md §1.2, §1.5): a browser's ClientHello whose session id
//! is sealed with the key agreed with the server's public key, then TLS 1.3 whose certificate
//! must be the server's HMAC-signed temporary one. A real certificate means the server did not
//! know us (or somebody in between answered): Ferry closes the connection (Xray's "spider"
//! browses the site first; Ferry does not).

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::hello::{self, ServerHello};
use super::keys::{self, Schedule, Suite, TrafficKey, Transcript};
use super::record;
use super::stream::Direction;
use super::{cert, ClientSettings, CLIENT_VERSION};
use crate::common::{Address, Destination};
use crate::transport::tls13::Tls13Stream;
use crate::transport::BoxStream;

/// The client side of a REALITY outbound.
pub struct Client {
    pub settings: ClientSettings,
}

fn fail(msg: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("REALITY: {msg}"))
}

/// Reads records from `io` into `rx` until `f` finds what it needs in it.
async fn read_until<T>(
    io: &mut BoxStream,
    rx: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]) -> io::Result<Option<T>>,
) -> io::Result<T> {
    loop {
        if let Some(t) = f(rx)? {
            return Ok(t);
        }
        if rx.len() > 1 << 20 {
            return Err(fail("server's handshake too long"));
        }
        let at = rx.len();
        rx.resize(at + 16 * 1024, 0);
        let n = io.read(&mut rx[at..]).await?;
        rx.truncate(at + n);
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "REALITY: server closed during the handshake",
            ));
        }
    }
}

/// The server's encrypted handshake messages, as records arrive.
struct Flight {
    key: TrafficKey,
    /// Decrypted handshake bytes not yet taken as messages.
    msgs: Vec<u8>,
    /// Bytes of `rx` consumed.
    used: usize,
}

impl Flight {
    /// The next handshake message, opening records from `rx` as needed.
    fn next(&mut self, rx: &[u8]) -> io::Result<Option<Vec<u8>>> {
        loop {
            if self.msgs.len() >= 4 {
                let len = 4
                    + ((self.msgs[1] as usize) << 16
                        | (self.msgs[2] as usize) << 8
                        | self.msgs[3] as usize);
                if len > 1 << 16 {
                    return Err(fail("handshake message too long"));
                }
                if self.msgs.len() >= len {
                    return Ok(Some(self.msgs.drain(..len).collect()));
                }
            }
            let rest = &rx[self.used..];
            let Some(n) = record::complete(rest) else {
                return Ok(None);
            };
            let ty = rest[0];
            if ty == record::CHANGE_CIPHER_SPEC {
                if rest[..n] != [20, 3, 3, 0, 1, 1] {
                    return Err(fail("bad ChangeCipherSpec"));
                }
                self.used += n;
                continue;
            }
            if ty == record::ALERT {
                return Err(fail(format!("alert from the server: {:?}", &rest[5..n])));
            }
            let mut rec = rest[..n].to_vec();
            let (inner, content) =
                record::open(&mut self.key, &mut rec).map_err(|e| fail(format!("{e:?}")))?;
            self.used += n;
            match inner {
                record::HANDSHAKE => self.msgs.extend_from_slice(&rec[content]),
                record::ALERT => {
                    return Err(fail(format!("alert from the server: {:?}", &rec[content])))
                }
                _ => return Err(fail("application data during the handshake")),
            }
        }
    }
}

/// The content a TLS 1.3 CertificateVerify signs (RFC 8446 §4.4.3).
pub fn verify_content(server: bool, transcript_hash: &[u8]) -> Vec<u8> {
    let mut m = vec![0x20u8; 64];
    m.extend_from_slice(match server {
        true => b"TLS 1.3, server CertificateVerify",
        false => b"TLS 1.3, client CertificateVerify",
    });
    m.push(0);
    m.extend_from_slice(transcript_hash);
    m
}

/// The first certificate of a Certificate message.
fn first_certificate(msg: &[u8]) -> Option<&[u8]> {
    let body = msg.get(4..)?;
    let ctx = *body.first()? as usize;
    let list = body.get(1 + ctx + 3..)?;
    let len =
        (*list.first()? as usize) << 16 | (*list.get(1)? as usize) << 8 | *list.get(2)? as usize;
    list.get(3..3 + len)
}

impl Client {
    pub fn new(settings: ClientSettings) -> Result<Client, String> {
        Ok(Client { settings })
    }

    /// Handshakes over `io` with `server`.
    pub async fn connect(
        &self,
        mut io: BoxStream,
        server: &Destination,
    ) -> io::Result<Tls13Stream> {
        let s = &self.settings;
        let sni = match (&s.server_name, &server.addr) {
            (Some(n), _) if n.parse::<std::net::IpAddr>().is_err() => Some(n.clone()),
            (Some(_), _) => None,
            (None, Address::Domain(d)) => Some(d.clone()),
            (None, Address::Ip(_)) => None,
        };
        let (mut ch, keys) = hello::build(s.fingerprint.template(), sni.as_deref());
        let random: [u8; 32] = crate::common::array(&ch[6..38]);
        let eph = keys
            .auth_private()
            .ok_or_else(|| fail("the fingerprint has no X25519 share"))?;
        let shared =
            keys::x25519(eph, &s.public_key).ok_or_else(|| fail("bad server public key"))?;
        let auth = keys::auth_key(&shared, &random);
        let mut plain = [0u8; 16];
        plain[..3].copy_from_slice(&CLIENT_VERSION);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs() as u32;
        plain[4..8].copy_from_slice(&now.to_be_bytes());
        plain[8..].copy_from_slice(&s.short_id);
        let sid = keys::seal_session_id(&auth, &random, &plain, &ch);
        ch[hello::SESSION_ID_AT..hello::SESSION_ID_AT + 32].copy_from_slice(&sid);

        let h = handshake(
            &mut io,
            &ch,
            &keys,
            s.fingerprint.template().record_version,
            Some(&auth),
            s.mldsa65_verify.as_deref(),
        )
        .await?;
        Ok(Tls13Stream::new(
            io,
            &h.held,
            h.suite,
            Direction::new(h.suite, h.server_secret),
            Direction::new(h.suite, h.client_secret),
        )
        .of_reality())
    }
}

/// A client handshake done: the application secrets and the bytes read past it.
pub struct Handshaken {
    pub suite: Suite,
    pub client_secret: Vec<u8>,
    pub server_secret: Vec<u8>,
    /// Ciphertext read after the server's Finished.
    pub held: Vec<u8>,
}

/// Sends `ch` (its session id final) and completes TLS 1.3 with the server. With `auth`, the
/// server must present REALITY's certificate for it and sign with it; without, nothing of the
/// server is verified (the server measures its own target with this).
pub async fn handshake(
    io: &mut BoxStream,
    ch: &[u8],
    keys: &hello::ClientKeys,
    record_version: u16,
    auth: Option<&[u8; 32]>,
    mldsa65_verify: Option<&[u8]>,
) -> io::Result<Handshaken> {
    let sid = &ch[hello::SESSION_ID_AT..hello::SESSION_ID_AT + 32];
    let mut out = Vec::with_capacity(ch.len() + 5);
    out.push(record::HANDSHAKE);
    out.extend_from_slice(&record_version.to_be_bytes());
    out.extend_from_slice(&(ch.len() as u16).to_be_bytes());
    out.extend_from_slice(ch);
    io.write_all(&out).await?;
    io.flush().await?;

    // ServerHello (plaintext, possibly over several records).
    let mut rx = Vec::new();
    let (sh_msg, used) = read_until(io, &mut rx, |b| {
        if b.first() == Some(&record::ALERT) {
            return Err(fail("the server answered with an alert"));
        }
        hello::message_from_records(b, 1 << 16).map_err(fail)
    })
    .await?;
    let sh = ServerHello::parse(&sh_msg).map_err(fail)?;
    if sh.version != Some(hello::TLS13) {
        return Err(fail("the server did not choose TLS 1.3"));
    }
    if sh.session_id != sid {
        return Err(fail("the server did not echo the session id"));
    }
    let suite = Suite::from_id(sh.suite).ok_or_else(|| fail("unknown cipher suite"))?;
    let ecdhe = keys
        .agree(sh.group, &sh.raw[sh.share.clone()])
        .ok_or_else(|| fail("bad key share from the server"))?;
    let mut transcript = Transcript::new(suite.hash());
    transcript.add(ch);
    transcript.add(&sh_msg);
    let schedule = Schedule::new(suite, &ecdhe, &transcript.current());

    let mut flight = Flight {
        key: TrafficKey::new(suite, &schedule.server_hs),
        msgs: Vec::new(),
        used,
    };
    let mut step = 0;
    let mut cert_pub = None;
    loop {
        let msg = read_until(io, &mut rx, |b| flight.next(b)).await?;
        match (step, msg[0]) {
            (0, hello::ENCRYPTED_EXTENSIONS) => {}
            (1, hello::CERTIFICATE) => {
                if let Some(auth) = auth {
                    let der = first_certificate(&msg).ok_or_else(|| fail("bad Certificate"))?;
                    let real = || {
                        fail("the server sent a real certificate: not a REALITY server for this key, or the connection was forwarded to the target")
                    };
                    cert_pub = Some(cert::verify(der, auth).ok_or_else(real)?);
                    if let Some(key) = mldsa65_verify {
                        if !cert::verify_mldsa65(der, auth, key, ch, &sh_msg) {
                            return Err(fail("the certificate's ML-DSA-65 signature does not verify (mldsa65Verify)"));
                        }
                    }
                }
            }
            (2, hello::CERTIFICATE_VERIFY) => {
                if let Some(public) = cert_pub {
                    let b = &msg[4..];
                    if b.len() != 2 + 2 + 64 || b[..4] != [0x08, 0x07, 0, 64] {
                        return Err(fail("CertificateVerify is not Ed25519"));
                    }
                    let content = verify_content(true, &transcript.current());
                    let key = aws_lc_rs::signature::UnparsedPublicKey::new(
                        &aws_lc_rs::signature::ED25519,
                        public,
                    );
                    key.verify(&content, &b[4..])
                        .map_err(|_| fail("bad CertificateVerify signature"))?;
                }
            }
            (3, hello::FINISHED) => {
                let want = schedule.finished(&schedule.server_hs, &transcript.current());
                if aws_lc_rs::constant_time::verify_slices_are_equal(&msg[4..], &want).is_err() {
                    return Err(fail("bad server Finished"));
                }
                transcript.add(&msg);
                break;
            }
            (_, t) => return Err(fail(format!("unexpected handshake message {t}"))),
        }
        transcript.add(&msg);
        step += 1;
    }
    if !flight.msgs.is_empty() {
        return Err(fail("handshake data after the server Finished"));
    }
    let th = transcript.current();
    let (c_ap, s_ap) = schedule.application(&th);
    let mut fin = Vec::new();
    hello::message(
        hello::FINISHED,
        &schedule.finished(&schedule.client_hs, &th),
        &mut fin,
    );
    let mut out = vec![20, 3, 3, 0, 1, 1];
    let mut ckey = TrafficKey::new(suite, &schedule.client_hs);
    record::seal(&mut ckey, record::HANDSHAKE, &fin, 0, &mut out);
    io.write_all(&out).await?;
    io.flush().await?;
    Ok(Handshaken {
        suite,
        client_secret: c_ap,
        server_secret: s_ap,
        held: rx[flight.used..].to_vec(),
    })
}
