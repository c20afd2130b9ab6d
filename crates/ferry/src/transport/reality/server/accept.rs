//! [`Server::accept`] step by step: dial the target, mirror the ClientHello to it, judge the
//! hello, read the target's first flight, answer, wait for the client's Finished, go on as
//! TLS 1.3. A step that hands the client to the target says so ([`Stop::Splice`]).

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::hello::{self, ClientHello};
use super::super::keys::TrafficKey;
use super::super::record;
use super::super::stream::Direction;
use super::answer::pad_to;
use super::post::alpn_class;
use super::replay::replay_ttl;
use super::{
    authenticate, closed, now_ms, respond, Answer, Authenticated, FlightError, Probe, Server,
    TargetFlight, FLIGHT_QUIET, MAX_FLIGHT, MAX_HELLO,
};
use crate::session::ConnInfo;
use crate::transport::tls13::Tls13Stream;
use crate::transport::{BoxStream, Dialer, SocketDialer};

/// How a step ends the accept.
enum Stop {
    /// With this error; both sockets close.
    Fail(io::Error),
    /// Handing the client to the target (what the target sent so far first), then this error.
    Splice(Vec<u8>, io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Fail(e)
    }
}

/// The client's bytes mirrored to the target, and the ClientHello message in them with the
/// length of the records that carried it (None: not a TLS ClientHello).
type Mirrored = (Vec<u8>, Option<(Vec<u8>, usize)>);

impl Server {
    /// Serves one accepted connection.
    pub async fn accept(
        self: Arc<Self>,
        mut client: BoxStream,
        info: &mut ConnInfo,
    ) -> io::Result<Tls13Stream> {
        // Start measuring the target's post-handshake records with the first connection.
        let _ = self.post_lengths("", 0);
        let mut target = self.dial_target(info).await?;
        let (c2s, parsed) = match mirror_client_hello(&mut client, &mut target).await {
            Ok(m) => m,
            Err(stop) => return Err(self.stop(client, target, stop)),
        };
        let (ch, auth, used) = match self.judge(parsed) {
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
        let after_hello = c2s[used..].to_vec();
        drop(c2s);
        info.sni = ch.sni.as_deref().map(Arc::from);

        let flight = match read_target_flight(&mut target).await {
            Ok(f) => f,
            Err(stop) => return Err(self.stop(client, target, stop)),
        };
        let answer = respond(&ch, &auth, &flight, &self.cert)
            .map_err(|e| closed(format!("cannot imitate the target: {e:?}")))?;
        client.write_all(&answer.bytes).await?;
        client.flush().await?;

        let (fin, rx, used) =
            read_client_finished(&mut client, &mut target, after_hello, &answer).await?;
        drop(target);
        let c_ap = verify_client_finished(&answer, &fin)?;
        let mut write = answer.write;
        self.send_post_records(&mut client, &ch, &mut write).await?;
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

    /// Ends the accept as `stop` says: the error, after handing the client to the target.
    fn stop(&self, client: BoxStream, target: BoxStream, stop: Stop) -> io::Error {
        match stop {
            Stop::Fail(e) => e,
            Stop::Splice(s2c, e) => {
                self.splice_to_target(client, target, s2c);
                e
            }
        }
    }

    /// Dials the target and writes the PROXY protocol header it is configured for.
    async fn dial_target(&self, info: &ConnInfo) -> io::Result<BoxStream> {
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
        Ok(target)
    }

    /// Whether a mirrored hello is ours: authenticated and not a replay. Ok: the hello, what
    /// it carries and where the client's bytes after it start; Err: (reason, detail).
    fn judge(
        &self,
        parsed: Option<(Vec<u8>, usize)>,
    ) -> Result<(ClientHello, Authenticated, usize), (&'static str, String)> {
        let s = &self.settings;
        let Some((msg, used)) = parsed else {
            return Err(("not-tls", "not a TLS ClientHello".to_string()));
        };
        let ch = ClientHello::parse(&msg).map_err(|e| ("not-tls", e.to_string()))?;
        let a = authenticate(&ch, s, now_ms()).map_err(|why| (why.reason(), why.to_string()))?;
        let ttl = replay_ttl(s.max_time_diff);
        let fresh = self
            .seen
            .lock()
            .map(|mut seen| seen.insert(ch.random, ttl))
            .unwrap_or(false);
        match fresh {
            true => Ok((ch, a, used)),
            false => Err(("replay", "a replayed ClientHello".to_string())),
        }
    }

    /// What the target sends after its handshake (tickets): empty records of those lengths.
    async fn send_post_records(
        self: &Arc<Self>,
        client: &mut BoxStream,
        ch: &ClientHello,
        write: &mut Direction,
    ) -> io::Result<()> {
        let class = alpn_class(ch);
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
        Ok(())
    }
}

/// Checks the client's Finished against the transcript: its application traffic secret.
fn verify_client_finished(answer: &Answer, fin: &[u8]) -> io::Result<Vec<u8>> {
    let th = answer.transcript.current();
    let want = answer.schedule.finished(&answer.schedule.client_hs, &th);
    let mut expected = Vec::new();
    hello::message(hello::FINISHED, &want, &mut expected);
    if aws_lc_rs::constant_time::verify_slices_are_equal(fin, &expected).is_err() {
        return Err(closed("bad client Finished".into()));
    }
    let (c_ap, _) = answer.schedule.application(&th);
    Ok(c_ap)
}

/// Mirrors the client's first flight to the target until the ClientHello is whole. A target
/// that answers or closes before that (it saw garbage, or waited long enough) has the client
/// from then on, as with Xray.
async fn mirror_client_hello(
    client: &mut BoxStream,
    target: &mut BoxStream,
) -> Result<Mirrored, Stop> {
    let mut c2s = Vec::with_capacity(2048);
    let mut buf = vec![0u8; 4096];
    let mut early = vec![0u8; 4096];
    loop {
        let n = tokio::select! {
            r = client.read(&mut buf) => r?,
            r = target.read(&mut early) => {
                let s2c = match r {
                    Ok(n) => early[..n].to_vec(),
                    Err(_) => Vec::new(),
                };
                let what = if s2c.is_empty() { "closed" } else { "answered" };
                let e = io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    Probe {
                        reason: "incomplete",
                        detail: format!(
                            "the target {what} after {} bytes, before a whole ClientHello",
                            c2s.len()
                        ),
                    },
                );
                return Err(Stop::Splice(s2c, e));
            }
        };
        if n == 0 {
            // Gone before a whole hello: the target sees the same end.
            let _ = target.shutdown().await;
            return Err(Stop::Splice(
                Vec::new(),
                closed("client closed before its ClientHello".into()),
            ));
        }
        target.write_all(&buf[..n]).await?;
        c2s.extend_from_slice(&buf[..n]);
        match hello::message_from_records(&c2s, MAX_HELLO) {
            Ok(Some(m)) => return Ok((c2s, Some(m))),
            Ok(None) if c2s.len() < MAX_HELLO + 1024 => continue,
            Ok(None) | Err(_) => return Ok((c2s, None)),
        }
    }
}

/// Reads the target's first flight; one whose first record is not a usable ServerHello has
/// the client.
async fn read_target_flight(target: &mut BoxStream) -> Result<TargetFlight, Stop> {
    let mut s2c = Vec::with_capacity(MAX_FLIGHT);
    let mut quiet_checked = false;
    loop {
        match TargetFlight::parse(&s2c) {
            Ok(Some(f)) => return Ok(f),
            Ok(None) if s2c.len() < MAX_FLIGHT => {}
            Ok(None) => return Err(closed("target's first flight too long".into()).into()),
            Err(FlightError::NotServerHello(why)) => {
                let e = closed(format!(
                    "target answered without a usable ServerHello ({why}): relayed"
                ));
                return Err(Stop::Splice(s2c, e));
            }
            Err(FlightError::Shape(why)) => {
                return Err(closed(format!("target's flight: {why}")).into())
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
                        return Ok(f);
                    }
                    continue;
                }
            },
        };
        s2c.truncate(at + n);
        if n == 0 {
            return Err(closed("target closed during its handshake".into()).into());
        }
    }
}

/// The client's (optional) ChangeCipherSpec and Finished, for as long as the target keeps its
/// own handshake open (Xray closes the client when the target closes; a target that sends more
/// is no longer watched). `rx`: what the client sent after its hello. Returns the Finished
/// message, the client's bytes and where those after the Finished start.
async fn read_client_finished(
    client: &mut BoxStream,
    target: &mut BoxStream,
    mut rx: Vec<u8>,
    answer: &Answer,
) -> io::Result<(Vec<u8>, Vec<u8>, usize)> {
    let mut early = vec![0u8; 4096];
    let mut watch = true;
    let mut ckey = TrafficKey::new(answer.suite, &answer.schedule.client_hs);
    loop {
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
            return Ok((rec[c].to_vec(), rx, at + n));
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
    }
}
