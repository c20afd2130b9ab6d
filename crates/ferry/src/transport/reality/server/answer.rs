//! The handshake answer to an authenticated client, built on the target's flight: its
//! ServerHello with our key share, the HMAC-signed certificate, records padded to its lengths.

use super::super::cert::Temporary;
use super::super::client::verify_content;
use super::super::hello::{self, ClientHello};
use super::super::keys::{self, Schedule, Suite, TrafficKey, Transcript};
use super::super::record;
use super::super::stream::Direction;
use super::{Authenticated, FlightError, TargetFlight};

/// The handshake the server sends an authenticated client, and what it needs to go on.
pub struct Answer {
    pub bytes: Vec<u8>,
    pub suite: Suite,
    pub transcript: Transcript,
    pub schedule: Schedule,
    /// The server's application direction (its sequence number past the fake ticket).
    pub write: Direction,
}

pub(super) fn pad_to(total: usize, content: usize) -> Result<usize, FlightError> {
    (total)
        .checked_sub(record::HEADER + content + 1 + record::TAG)
        .ok_or(FlightError::Shape(
            "our handshake message is longer than the target's record",
        ))
}

/// Builds the answer to an authenticated ClientHello on top of the target's flight.
#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "checked by the parser before this step"
)]
pub fn respond(
    ch: &ClientHello,
    a: &Authenticated,
    t: &TargetFlight,
    cert: &Temporary,
) -> Result<Answer, FlightError> {
    let suite = Suite::from_id(t.server_hello.suite).expect("checked in parse");
    let mut sh = t.server_hello.raw.clone();
    let shared = key_exchange(ch, t, &mut sh)?;
    let mut transcript = Transcript::new(suite.hash());
    transcript.add(&ch.raw);
    transcript.add(&sh);
    let schedule = Schedule::new(suite, &shared, &transcript.current());

    let mut ee = Vec::new();
    hello::message(hello::ENCRYPTED_EXTENSIONS, &[0, 0], &mut ee);
    transcript.add(&ee);
    let der = cert.der_for(&a.auth, &ch.raw, &sh);
    let mut body = vec![0u8];
    let entry_len = 3 + der.len() + 2;
    body.extend_from_slice(&(entry_len as u32).to_be_bytes()[1..]);
    body.extend_from_slice(&(der.len() as u32).to_be_bytes()[1..]);
    body.extend_from_slice(&der);
    body.extend_from_slice(&[0, 0]);
    let mut certificate = Vec::new();
    hello::message(hello::CERTIFICATE, &body, &mut certificate);
    transcript.add(&certificate);
    let sig = cert.sign(&verify_content(true, &transcript.current()));
    let mut cv_body = vec![0x08, 0x07, 0, 64];
    cv_body.extend_from_slice(&sig);
    let mut cv = Vec::new();
    hello::message(hello::CERTIFICATE_VERIFY, &cv_body, &mut cv);
    transcript.add(&cv);
    let mut fin = Vec::new();
    hello::message(
        hello::FINISHED,
        &schedule.finished(&schedule.server_hs, &transcript.current()),
        &mut fin,
    );
    transcript.add(&fin);

    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(&t.sh_header[..3]);
    out.extend_from_slice(&(sh.len() as u16).to_be_bytes());
    out.extend_from_slice(&sh);
    out.extend_from_slice(&[20, 3, 3, 0, 1, 1]);
    let mut key = TrafficKey::new(suite, &schedule.server_hs);
    if t.combined {
        let all = [ee, certificate, cv, fin].concat();
        record::seal(
            &mut key,
            record::HANDSHAKE,
            &all,
            pad_to(t.lengths[0], all.len())?,
            &mut out,
        );
    } else {
        for (m, len) in [ee, certificate, cv, fin].iter().zip(&t.lengths) {
            record::seal(
                &mut key,
                record::HANDSHAKE,
                m,
                pad_to(*len, m.len())?,
                &mut out,
            );
        }
    }
    let (_, s_ap) = schedule.application(&transcript.current());
    let mut write = Direction::new(suite, s_ap);
    if let Some(len) = t.ticket {
        // Where the target sent a ticket, an empty application-data record of its length.
        record::seal(
            &mut write.key,
            record::APPLICATION_DATA,
            &[],
            pad_to(len, 0)?,
            &mut out,
        );
    }
    Ok(Answer {
        bytes: out,
        suite,
        transcript,
        schedule,
        write,
    })
}

/// Our key share, written into the target's ServerHello `sh` over its own: the shared secret
/// with the client's share of the target's group (X25519, or X25519MLKEM768).
fn key_exchange(ch: &ClientHello, t: &TargetFlight, sh: &mut [u8]) -> Result<Vec<u8>, FlightError> {
    use FlightError::Shape;
    let share = t.server_hello.share.clone();
    let mut eph = [0u8; 32];
    crate::common::rand::fill(&mut eph);
    let eph_pub = keys::x25519_public(&eph);
    let shared = match t.server_hello.group {
        hello::X25519 => {
            let peer = ch
                .share(hello::X25519)
                .ok_or(Shape("client has no X25519 share"))?;
            sh[share].copy_from_slice(&eph_pub);
            keys::x25519(&eph, peer)
                .ok_or(Shape("bad client share"))?
                .to_vec()
        }
        _ => {
            use aws_lc_rs::kem::{EncapsulationKey, ML_KEM_768};
            let peer = ch
                .share(hello::X25519MLKEM768)
                .filter(|k| k.len() == hello::MLKEM_CLIENT_SHARE)
                .ok_or(Shape("client has no X25519MLKEM768 share"))?;
            let ek = EncapsulationKey::new(&ML_KEM_768, &peer[..1184])
                .map_err(|_| Shape("bad ML-KEM key"))?;
            let (ct, ss) = ek.encapsulate().map_err(|_| Shape("ML-KEM"))?;
            sh[share.start..share.start + 1088].copy_from_slice(ct.as_ref());
            sh[share.start + 1088..share.end].copy_from_slice(&eph_pub);
            let mut s = ss.as_ref().to_vec();
            s.extend_from_slice(
                &keys::x25519(&eph, &peer[1184..]).ok_or(Shape("bad client share"))?,
            );
            s
        }
    };
    Ok(shared)
}
