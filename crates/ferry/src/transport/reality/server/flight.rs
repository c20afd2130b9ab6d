//! The target's first flight (ServerHello, CCS, encrypted records), parsed into the shape
//! REALITY answers in.

use super::super::hello::{self, ServerHello};
use super::super::keys::Suite;
use super::super::record;
use super::MAX_FLIGHT;

/// An encrypted record of the target longer than this is the whole flight in one record.
const COMBINED: usize = 512;

/// The target's first flight, as REALITY requires it (§1.3 step 5).
#[derive(Debug)]
pub struct TargetFlight {
    pub server_hello: ServerHello,
    /// The record header of the ServerHello record.
    pub sh_header: [u8; 5],
    /// Total lengths (header included) of the encrypted records: one (combined) or four
    /// (EncryptedExtensions, Certificate, CertificateVerify, Finished), then the ticket's if
    /// it came in the same read.
    pub lengths: Vec<usize>,
    pub combined: bool,
    pub ticket: Option<usize>,
}

/// Why the target's flight cannot be imitated.
#[derive(Debug, PartialEq, Eq)]
pub enum FlightError {
    /// The first record is not a TLS 1.3 ServerHello Ferry can answer on: the client is
    /// spliced to the target like a prober.
    NotServerHello(&'static str),
    /// A later record breaks the shape: close.
    Shape(&'static str),
}

impl TargetFlight {
    /// Parses what the target sent so far: `Ok(None)` while more is needed.
    pub fn parse(b: &[u8]) -> Result<Option<TargetFlight>, FlightError> {
        Self::parse_at(b, false)
    }

    /// As [`TargetFlight::parse`], for a target that went quiet: one encrypted record that ends
    /// what it sent is its whole flight, however short (rustls with a small certificate sends
    /// EncryptedExtensions..Finished in one record of a few hundred bytes, under Xray's 512-byte
    /// rule, and then waits for the client).
    pub fn parse_quiet(b: &[u8]) -> Result<Option<TargetFlight>, FlightError> {
        Self::parse_at(b, true)
    }

    fn parse_at(b: &[u8], quiet: bool) -> Result<Option<TargetFlight>, FlightError> {
        use FlightError::*;
        let Some(n0) = record::complete(b) else {
            if b.len() >= 5
                && (b[0] != record::HANDSHAKE
                    || record::header(b).is_some_and(|(_, l)| l > MAX_FLIGHT))
            {
                return Err(NotServerHello("first record"));
            }
            return Ok(None);
        };
        if b[0] != record::HANDSHAKE || b[1..3] != [3, 3] {
            return Err(NotServerHello("first record"));
        }
        let sh = ServerHello::parse(&b[5..n0]).map_err(|e| NotServerHello(e.0))?;
        if sh.version != Some(hello::TLS13) || Suite::from_id(sh.suite).is_none() {
            return Err(NotServerHello("not TLS 1.3"));
        }
        match (sh.group, sh.share.len()) {
            (hello::X25519, 32) | (hello::X25519MLKEM768, hello::MLKEM_SERVER_SHARE) => {}
            _ => return Err(NotServerHello("key share group")),
        }
        let mut at = n0;
        let Some(n1) = record::complete(&b[at..]) else {
            return Ok(None);
        };
        if b[at..at + n1] != [20, 3, 3, 0, 1, 1] {
            return Err(Shape("no ChangeCipherSpec"));
        }
        at += n1;
        let mut lengths = Vec::new();
        let mut combined = false;
        while lengths.len() < 4 {
            let Some(n) = record::complete(&b[at..]) else {
                if b.len() - at >= 5
                    && record::header(&b[at..]).is_some_and(|(_, l)| l > MAX_FLIGHT)
                {
                    return Err(Shape("record too long"));
                }
                return Ok(None);
            };
            if b[at] != record::APPLICATION_DATA {
                return Err(Shape("not application data"));
            }
            lengths.push(n);
            at += n;
            if lengths.len() == 1 && (n > COMBINED || (quiet && at == b.len())) {
                combined = true;
                break;
            }
        }
        let ticket = record::complete(&b[at..]).filter(|_| b[at] == record::APPLICATION_DATA);
        Ok(Some(TargetFlight {
            sh_header: crate::common::array(&b[..5]),
            server_hello: sh,
            lengths,
            combined,
            ticket,
        }))
    }
}
