//! Sniffing (routing.md §3): the domain a client asks for, read from the first bytes it sends
//! (TLS SNI, HTTP Host, QUIC Initial SNI), for routing and for `destOverride`. The bytes read
//! are kept and go to the outbound first, untouched.

pub mod http;
pub mod io;
pub mod quic;
pub mod tls;

/// The settings (below the layers that sniff: inbounds carry them).
pub use crate::sniffing::Sniffing;

use std::net::IpAddr;
use std::time::Duration;

use crate::app::dns::fake::FakeDns;
use crate::common::{Address, Destination};

pub use crate::session::Sniffed;

/// A sniffer's answer to the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Found(Sniffed),
    /// Too short to tell: read more (counts as an attempt).
    NoClue,
    /// This protocol, incomplete (QUIC crypto data with gaps): read more, no attempt counted.
    NeedMore,
    /// Not this protocol.
    Not,
}

impl Outcome {
    fn found(protocol: &'static str, domain: String) -> Outcome {
        Outcome::Found(Sniffed {
            protocol,
            domain,
            ..Default::default()
        })
    }
}

/// The BitTorrent handshake (no domain).
pub fn bittorrent(b: &[u8]) -> Outcome {
    if b.len() < 20 {
        return Outcome::NoClue;
    }
    if b[0] == 19 && &b[1..20] == b"BitTorrent protocol" {
        Outcome::found("bittorrent", String::new())
    } else {
        Outcome::Not
    }
}

/// The payload read while sniffing: at most this many bytes (Xray's 32767).
pub const MAX_SNIFF: usize = 32767;
/// The total time sniffing may wait for client bytes.
pub const SNIFF_WINDOW: Duration = Duration::from_millis(200);

type SnifferFn = fn(&[u8]) -> Outcome;

/// The sniffers still in the running for one connection (Xray drops those that said "no",
/// and keeps only a sniffer that asked for more data).
pub struct Sniffers {
    live: Vec<SnifferFn>,
}

impl Sniffers {
    /// HTTP, TLS and BitTorrent, for a stream.
    pub fn tcp() -> Self {
        Sniffers {
            live: vec![http::sniff, tls::sniff, bittorrent],
        }
    }

    /// QUIC, for datagrams.
    pub fn udp() -> Self {
        Sniffers {
            live: vec![quic::sniff],
        }
    }

    /// Runs the live sniffers on everything read so far.
    pub fn run(&mut self, payload: &[u8]) -> Outcome {
        let mut pending = Vec::new();
        for f in std::mem::take(&mut self.live) {
            match f(payload) {
                Outcome::Found(s) => return Outcome::Found(s),
                Outcome::NoClue => pending.push(f),
                Outcome::NeedMore => {
                    self.live = vec![f];
                    return Outcome::NeedMore;
                }
                Outcome::Not => {}
            }
        }
        if pending.is_empty() {
            Outcome::Not
        } else {
            self.live = pending;
            Outcome::NoClue
        }
    }
}

/// A round of the sniffing loop: what the next read produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Done: the result (or none), stop reading.
    Done(Option<Sniffed>),
    /// Read again.
    More,
}

/// The dispatcher's sniffing loop (routing.md §3.2) without the I/O: feed it each read.
pub struct Loop {
    sniffers: Sniffers,
    attempts: u32,
}

impl Loop {
    pub fn new(sniffers: Sniffers) -> Self {
        Loop {
            sniffers,
            attempts: 0,
        }
    }

    /// After a read: `payload` is everything so far, `got` whether this read brought bytes,
    /// `time_left` whether the window is still open.
    pub fn step(&mut self, payload: &[u8], got: bool, time_left: bool) -> Step {
        if got && !payload.is_empty() {
            match self.sniffers.run(payload) {
                Outcome::Found(s) => return Step::Done(Some(s)),
                Outcome::NoClue => self.attempts += 1,
                Outcome::NeedMore => {}
                Outcome::Not => return Step::Done(None),
            }
        } else {
            self.attempts += 1;
        }
        if self.attempts >= 2 || !time_left || payload.len() >= MAX_SNIFF {
            Step::Done(None)
        } else {
            Step::More
        }
    }
}

impl Sniffing {
    /// Whether `found` replaces the destination `dest` (routing.md §3.2 step 5); `in_pool`:
    /// `dest` is a FakeDNS address.
    pub fn overrides(&self, found: &Sniffed, dest: &Destination, in_pool: bool) -> bool {
        if found.domain.is_empty() {
            return false;
        }
        if self
            .domains_excluded
            .as_ref()
            .is_some_and(|d| d.matches(&found.domain))
        {
            return false;
        }
        if let (Some(ex), Address::Ip(ip)) = (&self.ips_excluded, &dest.addr) {
            if ex.contains(*ip) {
                return false;
            }
        }
        // The protocol that gave the domain.
        let p = if found.fake_domain {
            "fakedns"
        } else {
            found.protocol
        };
        self.dest_override.iter().any(|o| {
            p.starts_with(o)
                || o.starts_with(p)
                // "The fake DNS missed": a pool address whose name is gone takes the content's.
                || (*o == "fakedns" && in_pool && p != "bittorrent")
        })
    }

    /// The metadata sniffer (routing.md §3.7): the name FakeDNS gave `dest`, if any, and
    /// whether `dest` is a pool address at all.
    pub fn fake_name(fake: Option<&FakeDns>, dest: &Destination) -> (Option<String>, bool) {
        match (fake, dest.addr.ip()) {
            (Some(f), Some(ip)) if f.contains(ip) => (f.name_of(ip), true),
            _ => (None, false),
        }
    }

    /// Joins the content sniffers' result and FakeDNS's name (§3.2 step 3): the name from
    /// FakeDNS, the protocol from the content when it found one.
    pub fn join(content: Option<Sniffed>, fake: Option<String>) -> Option<Sniffed> {
        match (content, fake) {
            (c, None) => c,
            (Some(mut c), Some(name)) => {
                c.domain = name;
                c.fake_domain = true;
                Some(c)
            }
            (None, Some(name)) => Some(Sniffed {
                protocol: "fakedns",
                domain: name,
                fake_domain: true,
                ..Default::default()
            }),
        }
    }

    /// The destination the domain gives (an IP-literal name becomes an IP; the port stays).
    pub fn new_dest(found: &Sniffed, dest: &Destination) -> Destination {
        let addr = match found.domain.parse::<IpAddr>() {
            Ok(ip) => Address::Ip(ip),
            Err(_) => Address::Domain(found.domain.clone()),
        };
        Destination {
            addr,
            port: dest.port,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_counts_attempts_as_xray() {
        let ch = tls::tests::client_hello("a.example");
        // Two short reads give up.
        let mut l = Loop::new(Sniffers::tcp());
        assert_eq!(l.step(&ch[..3], true, true), Step::More);
        assert_eq!(l.step(&ch[..4], true, true), Step::Done(None));
        // A record arriving in two reads is found.
        let mut l = Loop::new(Sniffers::tcp());
        assert_eq!(l.step(&ch[..10], true, true), Step::More);
        assert!(matches!(l.step(&ch, true, true), Step::Done(Some(_))));
        // Server-first protocols: an empty read and the window closes.
        let mut l = Loop::new(Sniffers::tcp());
        assert_eq!(l.step(&[], false, false), Step::Done(None));
        // Not any known protocol: stop at once.
        let mut l = Loop::new(Sniffers::tcp());
        assert_eq!(
            l.step(b"SSH-2.0-OpenSSH_9.2\r\n", true, true),
            Step::Done(None)
        );
        // BitTorrent.
        let mut bt = vec![19u8];
        bt.extend_from_slice(b"BitTorrent protocol");
        let mut l = Loop::new(Sniffers::tcp());
        match l.step(&bt, true, true) {
            Step::Done(Some(s)) => assert_eq!(s.protocol, "bittorrent"),
            other => panic!("{other:?}"),
        }
    }
}
