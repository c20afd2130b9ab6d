//! VLESS Reverse and the legacy `reverse` object (Xray's `app/reverse`, `proxy/vless` command
//! 4): a *bridge* (a machine behind NAT) keeps connections open to a *portal* (a public
//! server), and the portal sends connections back through them. Each such connection is one
//! Mux.Cool connection with the roles swapped: the portal opens sessions ([`portal`]), the
//! bridge serves them like a mux server (the dispatcher's `reverse` module). Besides the
//! sessions it routes, the portal keeps one control session open on each connection (UDP to
//! `reverse:0`) and sends a [`Control`] message in it every 10 s, or `DRAIN` once the
//! connection has carried 256 sessions (the bridge then opens another).
//!
//! VLESS Reverse (v25.9.10 on): the bridge is a VLESS outbound with `reverse` (it dials the
//! portal with command 4 and no address), the portal a VLESS inbound whose user has `reverse`
//! (its connections become the workers of an outbound registered under that tag at run time);
//! its New frames carry each session's portal-side source and local address. Legacy: the
//! bridge routes a connection to `domain:0` through any outbound, the portal takes a
//! connection routed to its outbound with that domain as a worker.

pub mod portal;

use std::sync::Arc;

use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::sniffing::Sniffing;
use crate::transport::Dialer;

pub use portal::Portal;

/// The target a VLESS outbound dials as command 4 (Xray's internal `v1.rvs.cool`).
pub const RVS_COOL: &str = "v1.rvs.cool";
/// The control session's domain (UDP to `reverse:0`).
pub const INTERNAL: &str = "reverse";
/// The inbound name the bridge gives its sessions (freedom's default rule keeps them off
/// every destination a `finalRules` allow does not open, as Xray v26.5.3 on).
pub const BRIDGE_PROTOCOL: &str = "vless-reverse";
/// How often a bridge looks at its workers (and the first look, after start).
pub const MONITOR: std::time::Duration = std::time::Duration::from_secs(2);
/// A bridge opens another worker when its workers carry more sessions each than this.
pub const SESSIONS_PER_WORKER: usize = 16;
/// A portal's worker that opened more sessions than this drains.
pub const DRAIN_AFTER: u32 = 256;

/// `v1.rvs.cool:0`: what a bridge's VLESS outbound dials.
pub fn rvs_cool() -> Destination {
    Destination::new(Address::Domain(RVS_COOL.into()), 0)
}

/// Whether `dest` is the VLESS Reverse target.
pub fn is_rvs_cool(dest: &Destination) -> bool {
    dest.addr.domain() == Some(RVS_COOL)
}

/// Whether a session opened in a reverse mux is its control session.
pub fn is_internal(dest: &Destination) -> bool {
    dest.addr.domain() == Some(INTERNAL)
}

/// A bridge to start with the instance.
#[derive(Clone)]
pub struct Bridge {
    /// The inbound tag its sessions get (routing matches it).
    pub tag: Arc<str>,
    pub via: Via,
}

/// How a bridge reaches its portal.
#[derive(Clone)]
pub enum Via {
    /// VLESS Reverse: the VLESS outbound (before any mux) dials [`rvs_cool`]; its user's email
    /// and the `reverse.sniffing` go to the sessions.
    Vless {
        dialer: Arc<dyn Dialer>,
        email: Arc<str>,
        sniffing: Option<Arc<Sniffing>>,
    },
    /// Legacy: a connection to `domain:0`, routed as from inbound `tag`.
    Routed { domain: String },
}

/// A VLESS outbound's `reverse` object: `{tag, sniffing}`.
pub fn parse_outbound_reverse(o: &Obj<'_>) -> Result<(Arc<str>, Option<Arc<Sniffing>>)> {
    let tag = o.str("tag")?.unwrap_or_default();
    if tag.is_empty() {
        return Err(ConfigError::new(
            o.key_path("tag"),
            "VLESS reverse: \"tag\" can't be empty",
        ));
    }
    let sniffing = match o.obj("sniffing")? {
        Some(s) => {
            let r = Sniffing::parse(&s)?;
            s.finish();
            r.map(Arc::new)
        }
        None => None,
    };
    Ok((tag.into(), sniffing))
}

/// A legacy portal: its tag and domain.
pub type LegacyPortal = (String, String);

/// The top-level `reverse` object: its portals and bridges.
pub fn parse_legacy(o: &Obj<'_>) -> Result<(Vec<LegacyPortal>, Vec<Bridge>)> {
    let read = |key: &str| -> Result<Vec<(String, String)>> {
        let mut v = Vec::new();
        for e in o.objs(&[key])? {
            let tag = e.str("tag")?.unwrap_or_default();
            let domain = e.str("domain")?.unwrap_or_default();
            let what = &key[..key.len() - 1];
            if tag.is_empty() {
                return Err(ConfigError::new(
                    e.key_path("tag"),
                    format!("{what} tag is empty"),
                ));
            }
            if domain.is_empty() {
                return Err(ConfigError::new(
                    e.key_path("domain"),
                    format!("{what} domain is empty"),
                ));
            }
            e.finish();
            v.push((tag, domain));
        }
        Ok(v)
    };
    let bridges = read("bridges")?
        .into_iter()
        .map(|(tag, domain)| Bridge {
            tag: tag.into(),
            via: Via::Routed { domain },
        })
        .collect();
    Ok((read("portals")?, bridges))
}

/// The control message (Xray's `app/reverse` `Control` protobuf: `state = 1` (ACTIVE 0,
/// DRAIN 1), `random = 99`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    /// 0: active; anything else (1: draining) takes the worker out of use.
    pub state: u64,
}

impl Control {
    /// Encodes it with 1-64 random bytes, as Xray's `FillInRandom`.
    pub fn encode(drain: bool) -> Vec<u8> {
        let mut n = [0u8; 1];
        crate::common::rand::fill(&mut n);
        let len = 1 + (n[0] % 64) as usize;
        let mut out = Vec::with_capacity(5 + len);
        if drain {
            out.extend_from_slice(&[0x08, 0x01]);
        }
        out.extend_from_slice(&[0x9a, 0x06, len as u8]);
        let mut r = vec![0u8; len];
        crate::common::rand::fill(&mut r);
        out.extend_from_slice(&r);
        out
    }

    /// Decodes a protobuf message as Go's `proto.Unmarshal` would for `Control`: unknown
    /// fields skipped, the last `state` wins, nothing allocated.
    pub fn decode(mut b: &[u8]) -> std::result::Result<Control, &'static str> {
        fn varint(b: &mut &[u8]) -> std::result::Result<u64, &'static str> {
            let mut v = 0u64;
            for i in 0..10 {
                let (&x, rest) = b.split_first().ok_or("truncated varint")?;
                *b = rest;
                v |= u64::from(x & 0x7f) << (7 * i);
                if x & 0x80 == 0 {
                    return Ok(v);
                }
            }
            Err("varint too long")
        }
        let mut c = Control { state: 0 };
        while !b.is_empty() {
            let key = varint(&mut b)?;
            let (field, wire) = (key >> 3, key & 7);
            if field == 0 {
                return Err("field number 0");
            }
            match wire {
                0 => {
                    let v = varint(&mut b)?;
                    if field == 1 {
                        c.state = v;
                    }
                }
                1 | 5 => {
                    let n = if wire == 1 { 8 } else { 4 };
                    b = b.get(n..).ok_or("truncated fixed field")?;
                }
                2 => {
                    let n = varint(&mut b)?;
                    let n = usize::try_from(n).map_err(|_| "length too large")?;
                    b = b.get(n..).ok_or("truncated length-delimited field")?;
                    if field == 1 {
                        return Err("state is not a varint");
                    }
                }
                _ => return Err("unsupported wire type"),
            }
        }
        Ok(c)
    }

    pub fn active(&self) -> bool {
        self.state == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_are_xrays_bytes() {
        for drain in [false, true] {
            let b = Control::encode(drain);
            let body = if drain {
                assert_eq!(&b[..2], &[0x08, 0x01]);
                &b[2..]
            } else {
                &b[..]
            };
            assert_eq!(&body[..2], &[0x9a, 0x06]);
            let n = body[2] as usize;
            assert!((1..=64).contains(&n));
            assert_eq!(body.len(), 3 + n);
            assert_eq!(Control::decode(&b).unwrap().active(), !drain);
        }
        // What Xray sends, and what Go's decoder also takes: an empty message (ACTIVE), an
        // explicit zero, unknown fields of each wire type, an unknown state.
        assert!(Control::decode(&[]).unwrap().active());
        assert!(Control::decode(&[0x08, 0x00]).unwrap().active());
        let m = [
            0x10, 0x05, 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0x25, 1, 2, 3, 4, 0x08, 0x02,
        ];
        assert_eq!(Control::decode(&m).unwrap().state, 2);
        // Malformed: truncated, a field 0, a length past the end, a group.
        for bad in [
            &[0x08][..],
            &[0x00, 0x01],
            &[0x9a, 0x06, 0x05, 1],
            &[0x0b],
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            &[0x0a, 0x00],
            &[
                0x9a, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ],
        ] {
            assert!(Control::decode(bad).is_err(), "{bad:02x?}");
        }
        assert!(is_rvs_cool(&rvs_cool()));
        assert!(is_internal(&Destination::parse("reverse:0").unwrap()));
    }
}
