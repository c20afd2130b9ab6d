//! Mux.Cool frames, sans-IO (Xray's `common/mux`): the metadata of one frame (session
//! id, status, options, the target of a new session, XUDP's GlobalID and per-packet address)
//! and its optional data part, encoded exactly as Xray writes them.
//!
//! ```text
//! Frame = MetaLen(BE16) || Meta || [ DataLen(BE16) || Data ]      (data iff Opt & 0x01)
//! Meta  = SessionID(BE16) || Status(1) || Opt(1) || [status-specific]
//! New   : Network(1) || Port(BE16) || ATYP || Address [ || GlobalID(8) ]
//!         reverse mux (VLESS Reverse): [ || Net(1) Port ATYP Addr (source) [ || the same (local) ] ]
//! Keep  : [ 0x02 || Port(BE16) || ATYP || Address ]   (UDP packet address, XUDP)
//! ```

use std::ops::Range;

use bytes::BufMut;

use crate::common::addr::{v2ray, AddrError};
use crate::common::{Destination, Network};

/// Receivers refuse metadata longer than this.
pub const MAX_META: usize = 512;
/// A stream writer puts at most this much data in one frame.
pub const MAX_STREAM_DATA: usize = 8 * 1024;
/// The longest frame a reader may have to hold: `2 + 512 + 2 + 65535`.
pub const MAX_FRAME: usize = 2 + MAX_META + 2 + u16::MAX as usize;

/// Option bit: a data part follows the metadata.
pub const OPT_DATA: u8 = 0x01;
/// Option bit (with End): the session failed.
pub const OPT_ERROR: u8 = 0x02;

const NET_TCP: u8 = 0x01;
const NET_UDP: u8 = 0x02;

/// What a frame does to its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Opens a session (client to server), with its target.
    New = 0x01,
    /// Data of an open session.
    Keep = 0x02,
    /// Closes a session.
    End = 0x03,
    /// Nothing; its data, if any, is discarded.
    KeepAlive = 0x04,
}

/// Why bytes are not a frame. Any of these ends the whole mux connection.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("metadata length {0} (at most 512)")]
    MetaTooLong(usize),
    #[error("metadata length {0} is too short")]
    MetaTooShort(usize),
    #[error("unknown session status {0}")]
    Status(u8),
    #[error("unknown network {0}")]
    Network(u8),
    #[error("address: {0}")]
    Addr(#[from] AddrError),
    #[error("address runs past the metadata")]
    AddrTruncated,
}

/// The metadata of one frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub id: u16,
    pub status: Status,
    pub opt: u8,
    /// New: the session's network and target. Keep: the address of this UDP packet, when the
    /// frame carries one (always `Network::Udp`).
    pub target: Option<(Network, Destination)>,
    /// New UDP session with data: XUDP's GlobalID when the client sent one (may be all zero).
    pub global_id: Option<[u8; 8]>,
    /// New, in a reverse mux (VLESS Reverse, portal to bridge): where the session came from at
    /// the portal (written instead of a GlobalID).
    pub origin: Option<Box<Origin>>,
}

/// The portal-side source and local address of a session opened through VLESS Reverse (Xray
/// v25.10.15 on): each with its network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub source: (Network, Destination),
    pub local: Option<(Network, Destination)>,
}

impl Meta {
    /// A New frame for `target` (with or without data: the encoder sets the data bit).
    pub fn new_session(id: u16, network: Network, target: Destination) -> Meta {
        Meta {
            id,
            status: Status::New,
            opt: 0,
            target: Some((network, target)),
            global_id: None,
            origin: None,
        }
    }

    /// A Keep frame; `udp` is the packet's address (XUDP), if it carries one.
    pub fn keep(id: u16, udp: Option<Destination>) -> Meta {
        Meta {
            id,
            status: Status::Keep,
            opt: 0,
            target: udp.map(|d| (Network::Udp, d)),
            global_id: None,
            origin: None,
        }
    }

    /// An End frame (Opt Error when the session failed).
    pub fn end(id: u16, error: bool) -> Meta {
        Meta {
            id,
            status: Status::End,
            opt: if error { OPT_ERROR } else { 0 },
            target: None,
            global_id: None,
            origin: None,
        }
    }

    pub fn has_data(&self) -> bool {
        self.opt & OPT_DATA != 0
    }
}

/// A decoded frame: its metadata, where its data lies in the input (empty without a data
/// part), and how many bytes it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub meta: Meta,
    pub data: Range<usize>,
    pub len: usize,
}

/// Decodes the frame at the start of `buf`: `Ok(None)` asks for more bytes. Reads what Xray
/// reads: the target of New, the optional UDP address of Keep (recognised by byte 4 of the
/// metadata being 0x02), the GlobalID of a New UDP frame with data; other trailing metadata is
/// ignored.
pub fn decode(buf: &[u8]) -> Result<Option<Frame>, Error> {
    decode_in(buf, false)
}

/// [`decode`]; `reverse`: the frames of a reverse mux (a bridge reading its portal), whose New
/// frames may carry the session's [`Origin`] where others carry a GlobalID.
pub fn decode_in(buf: &[u8], reverse: bool) -> Result<Option<Frame>, Error> {
    let Some(len) = buf.get(..2) else {
        return Ok(None);
    };
    let meta_len = u16::from_be_bytes([len[0], len[1]]) as usize;
    if meta_len > MAX_META {
        return Err(Error::MetaTooLong(meta_len));
    }
    if meta_len < 4 {
        return Err(Error::MetaTooShort(meta_len));
    }
    let Some(m) = buf.get(2..2 + meta_len) else {
        return Ok(None);
    };
    let meta = decode_meta_in(m, reverse)?;
    let mut end = 2 + meta_len;
    let mut data = end..end;
    if meta.has_data() {
        let Some(l) = buf.get(end..end + 2) else {
            return Ok(None);
        };
        let n = u16::from_be_bytes([l[0], l[1]]) as usize;
        end += 2;
        if buf.len() < end + n {
            return Ok(None);
        }
        data = end..end + n;
        end += n;
    }
    Ok(Some(Frame {
        meta,
        data,
        len: end,
    }))
}

/// Decodes the metadata (without its length prefix).
pub fn decode_meta(m: &[u8]) -> Result<Meta, Error> {
    decode_meta_in(m, false)
}

fn decode_meta_in(m: &[u8], reverse: bool) -> Result<Meta, Error> {
    if m.len() < 4 {
        return Err(Error::MetaTooShort(m.len()));
    }
    let id = u16::from_be_bytes([m[0], m[1]]);
    let status = match m[2] {
        0x01 => Status::New,
        0x02 => Status::Keep,
        0x03 => Status::End,
        0x04 => Status::KeepAlive,
        s => return Err(Error::Status(s)),
    };
    let opt = m[3];
    let mut meta = Meta {
        id,
        status,
        opt,
        target: None,
        global_id: None,
        origin: None,
    };
    let addressed = status == Status::New || (status == Status::Keep && m.get(4) == Some(&NET_UDP));
    if !addressed {
        return Ok(meta);
    }
    if m.len() < 8 {
        return Err(Error::MetaTooShort(m.len()));
    }
    let network = match m[4] {
        NET_TCP => Network::Tcp,
        NET_UDP => Network::Udp,
        n => return Err(Error::Network(n)),
    };
    let (dest, n) = v2ray::decode(&m[5..])?.ok_or(Error::AddrTruncated)?;
    meta.target = Some((network, dest));
    let rest = &m[5 + n..];
    if status == Status::New && reverse {
        meta.origin = decode_origin(rest)?;
        return Ok(meta);
    }
    if status == Status::New && network == Network::Udp && meta.has_data() {
        if let Some(g) = rest.get(..8) {
            let mut id = [0u8; 8];
            id.copy_from_slice(g);
            meta.global_id = Some(id);
        }
    }
    Ok(meta)
}

/// One `Net || Port || ATYP || Addr` of an origin; `None` when absent (no bytes, or a zero
/// network byte: padding, as Xray reads it).
/// A network and address, as an origin's endpoints are written.
type Endpoint = (Network, Destination);

fn decode_endpoint(m: &[u8]) -> Result<Option<(Endpoint, usize)>, Error> {
    let network = match m.first() {
        None | Some(0) => return Ok(None),
        Some(&NET_TCP) => Network::Tcp,
        Some(&NET_UDP) => Network::Udp,
        Some(&n) => return Err(Error::Network(n)),
    };
    let (dest, n) = v2ray::decode(&m[1..])?.ok_or(Error::AddrTruncated)?;
    Ok(Some(((network, dest), 1 + n)))
}

fn decode_origin(rest: &[u8]) -> Result<Option<Box<Origin>>, Error> {
    let Some((source, n)) = decode_endpoint(rest)? else {
        return Ok(None);
    };
    let local = decode_endpoint(&rest[n..])?.map(|(l, _)| l);
    Ok(Some(Box::new(Origin { source, local })))
}

fn encode_endpoint((net, dest): &(Network, Destination), w: &mut impl BufMut) {
    w.put_u8(match net {
        Network::Tcp => NET_TCP,
        Network::Udp => NET_UDP,
    });
    v2ray::encode(dest, w);
}

/// Appends a frame: the metadata as Xray writes it (New: network, target, GlobalID when
/// given; Keep: the UDP address when given) and, when `data` is `Some`, the data part (the
/// data bit is set from it). `data` must fit in 65535 bytes.
pub fn encode(meta: &Meta, data: Option<&[u8]>, out: &mut impl BufMut) {
    let mut m = [0u8; MAX_META];
    let mut w = &mut m[..];
    w.put_u16(meta.id);
    w.put_u8(meta.status as u8);
    let opt = match data {
        Some(_) => meta.opt | OPT_DATA,
        None => meta.opt & !OPT_DATA,
    };
    w.put_u8(opt);
    match (meta.status, &meta.target) {
        (Status::New, Some((net, dest))) => {
            w.put_u8(match net {
                Network::Tcp => NET_TCP,
                Network::Udp => NET_UDP,
            });
            v2ray::encode(dest, &mut w);
            if let Some(o) = &meta.origin {
                encode_endpoint(&o.source, &mut w);
                if let Some(l) = &o.local {
                    encode_endpoint(l, &mut w);
                }
            } else if let Some(g) = &meta.global_id {
                w.put_slice(g);
            }
        }
        (Status::Keep, Some((_, dest))) => {
            w.put_u8(NET_UDP);
            v2ray::encode(dest, &mut w);
        }
        _ => {}
    }
    let meta_len = MAX_META - w.len();
    out.put_u16(meta_len as u16);
    out.put_slice(&m[..meta_len]);
    if let Some(d) = data {
        out.put_u16(d.len() as u16);
        out.put_slice(d);
    }
}

/// The encoded length of a frame with this metadata and `data_len` bytes of data.
pub fn encoded_len(meta: &Meta, data_len: Option<usize>) -> usize {
    let addr = match (meta.status, &meta.target) {
        (Status::New, Some((_, d))) => {
            let ext = match &meta.origin {
                Some(o) => {
                    1 + v2ray::encoded_len(&o.source.1)
                        + o.local.as_ref().map_or(0, |l| 1 + v2ray::encoded_len(&l.1))
                }
                None => meta.global_id.map_or(0, |_| 8),
            };
            1 + v2ray::encoded_len(d) + ext
        }
        (Status::Keep, Some((_, d))) => 1 + v2ray::encoded_len(d),
        _ => 0,
    };
    2 + 4 + addr + data_len.map_or(0, |n| 2 + n)
}

/// Whether the first bytes of a Mux connection start XUDP (Xray's `common/xudp`):
/// session id 0 and network UDP. Fewer than 7 bytes are "Mux and not XUDP".
pub fn is_xudp(first: &[u8]) -> bool {
    first.len() >= 7 && first[2] == 0 && first[3] == 0 && first[6] == NET_UDP
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Address;

    fn d(s: &str) -> Destination {
        Destination::parse(s).unwrap()
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn xudp_first_packet_and_reply_match_the_spec() {
        // §8.2: first datagram to 8.8.8.8:53 with GlobalID G, then the server's reply.
        let g = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut meta = Meta::new_session(0, Network::Udp, d("8.8.8.8:53"));
        meta.global_id = Some(g);
        let mut b = Vec::new();
        encode(&meta, Some(b"P"), &mut b);
        let want = hex("0014 0000 01 01 02 0035 01 08080808 0102030405060708 0001 50");
        assert_eq!(b, want);
        assert_eq!(encoded_len(&meta, Some(1)), b.len());
        assert!(is_xudp(&b));
        let f = decode(&b).unwrap().unwrap();
        assert_eq!(f.len, b.len());
        assert_eq!(&b[f.data.clone()], b"P");
        assert_eq!(f.meta.global_id, Some(g));
        assert_eq!(f.meta.opt, OPT_DATA);
        assert_eq!(f.meta.target, Some((Network::Udp, d("8.8.8.8:53"))));

        let mut r = Vec::new();
        encode(
            &Meta::keep(0, Some(d("8.8.8.8:53"))),
            Some(b"reply"),
            &mut r,
        );
        assert_eq!(
            r,
            hex("000c 0000 02 01 02 0035 01 08080808 0005 7265706c79")
        );
        let f = decode(&r).unwrap().unwrap();
        assert_eq!(f.meta.status, Status::Keep);
        assert_eq!(f.meta.target, Some((Network::Udp, d("8.8.8.8:53"))));
        assert_eq!(&r[f.data], b"reply");
    }

    #[test]
    fn stream_frames_round_trip_and_wait_for_more() {
        let cases = [
            (
                Meta::new_session(7, Network::Tcp, d("example.com:443")),
                Some(&b"hello"[..]),
            ),
            (
                Meta::new_session(8, Network::Tcp, d("[2001:db8::1]:80")),
                None,
            ),
            (Meta::keep(7, None), Some(&b"more"[..])),
            (Meta::end(7, false), None),
            (Meta::end(9, true), None),
        ];
        for (meta, data) in cases {
            let mut b = Vec::new();
            encode(&meta, data, &mut b);
            assert_eq!(encoded_len(&meta, data.map(<[u8]>::len)), b.len());
            for cut in 0..b.len() {
                assert_eq!(decode(&b[..cut]), Ok(None), "{meta:?} cut {cut}");
            }
            b.extend_from_slice(b"next");
            let f = decode(&b).unwrap().unwrap();
            assert_eq!(&b[f.len..], b"next");
            assert_eq!(f.meta.id, meta.id);
            assert_eq!(f.meta.status, meta.status);
            assert_eq!(f.meta.target, meta.target);
            assert_eq!(f.meta.opt & OPT_ERROR, meta.opt & OPT_ERROR);
            assert_eq!(f.meta.has_data(), data.is_some());
            assert_eq!(&b[f.data], data.unwrap_or_default());
        }
        // A TCP New: `0000 01 00 01 01bb 02 0b example.com` after its length.
        let mut b = Vec::new();
        encode(
            &Meta::new_session(1, Network::Tcp, d("example.com:443")),
            None,
            &mut b,
        );
        assert_eq!(
            b,
            hex("0014 0001 01 00 01 01bb 02 0b 6578616d706c652e636f6d")
        );
        assert!(!is_xudp(&b));
    }

    #[test]
    fn hostile_metadata_is_an_error() {
        assert_eq!(decode(&[0x02, 0x01]), Err(Error::MetaTooLong(513)));
        assert_eq!(decode(&[0xff, 0xff, 0, 0]), Err(Error::MetaTooLong(65535)));
        assert_eq!(decode(&[0, 3, 0, 1, 2]), Err(Error::MetaTooShort(3)));
        assert_eq!(decode(&hex("0004 0001 09 00")), Err(Error::Status(9)));
        // New too short for an address, a bad network, a bad address type, an address
        // running past the metadata.
        assert_eq!(
            decode(&hex("0005 0001 01 00 01")),
            Err(Error::MetaTooShort(5))
        );
        assert_eq!(
            decode(&hex("0009 0001 01 00 07 0050 01 7f")),
            Err(Error::Network(7))
        );
        assert_eq!(
            decode(&hex("0009 0001 01 00 01 0050 09 7f00")),
            Err(Error::Addr(AddrError::BadType(9)))
        );
        assert_eq!(
            decode(&hex("0009 0001 01 00 01 0050 01 7f00")),
            Err(Error::AddrTruncated)
        );
        assert_eq!(
            decode(&hex("0009 0001 01 00 01 0050 02 00")),
            Err(Error::Addr(AddrError::BadDomain))
        );
        // Keep whose byte 4 is not UDP: the rest is ignored.
        let f = decode(&hex("0006 0001 02 00 01 ff")).unwrap().unwrap();
        assert_eq!(
            (f.meta.status, f.meta.target, f.len),
            (Status::Keep, None, 8)
        );
        // End and KeepAlive with data: decoded (their data is for the caller to discard).
        let f = decode(&hex("0004 0001 04 01 0002 abcd")).unwrap().unwrap();
        assert_eq!((f.meta.status, f.data), (Status::KeepAlive, 8..10));
    }

    #[test]
    fn global_id_only_on_new_udp_with_data() {
        let tail = hex("0102030405060708");
        let mut m = hex("0000 01 00 02 0035 01 08080808");
        m.extend_from_slice(&tail);
        assert_eq!(decode_meta(&m).unwrap().global_id, None, "no data bit");
        m[3] = OPT_DATA;
        assert_eq!(
            decode_meta(&m).unwrap().global_id,
            Some([1, 2, 3, 4, 5, 6, 7, 8])
        );
        m[4] = NET_TCP;
        assert_eq!(decode_meta(&m).unwrap().global_id, None, "tcp");
        // Fewer than 8 trailing bytes: no GlobalID.
        let short = hex("0000 01 01 02 0035 01 08080808 0102");
        assert_eq!(decode_meta(&short).unwrap().global_id, None);
        let dom = decode_meta(&hex("0000 01 01 02 0035 02 01 61")).unwrap();
        assert_eq!(
            dom.target,
            Some((
                Network::Udp,
                Destination::new(Address::Domain("a".into()), 53)
            ))
        );
    }

    #[test]
    fn reverse_mux_new_frames_carry_their_origin_as_xray_writes_it() {
        let mut meta = Meta::new_session(1, Network::Tcp, d("example.com:80"));
        meta.origin = Some(Box::new(Origin {
            source: (Network::Tcp, d("1.2.3.4:5678")),
            local: Some((Network::Tcp, d("5.6.7.8:8080"))),
        }));
        let mut b = Vec::new();
        encode(&meta, None, &mut b);
        let want = hex("0024 0001 01 00 01 0050 02 0b 6578616d706c652e636f6d \
            01 162e 01 01020304 01 1f90 01 05060708");
        assert_eq!(b, want);
        assert_eq!(encoded_len(&meta, None), b.len());
        // A bridge reads it back; a plain server ignores the trailing bytes.
        let f = decode_in(&b, true).unwrap().unwrap();
        assert_eq!(f.meta, meta);
        let plain = decode(&b).unwrap().unwrap();
        assert_eq!(plain.meta.origin, None);
        // Source only; a zero network byte is padding; nothing at all is no origin.
        let mut only = meta.clone();
        only.origin.as_mut().unwrap().local = None;
        let mut b = Vec::new();
        encode(&only, Some(b"x"), &mut b);
        assert_eq!(decode_in(&b, true).unwrap().unwrap().meta, {
            let mut m = only.clone();
            m.opt = OPT_DATA;
            m
        });
        let mut pad = Vec::new();
        encode(
            &Meta::new_session(2, Network::Udp, d("reverse:0")),
            None,
            &mut pad,
        );
        let f = decode_in(&pad, true).unwrap().unwrap();
        assert_eq!(f.meta.origin, None);
        // A bad network byte in the origin ends the connection, as Xray's reader fails.
        let mut bad = hex("000c 0003 01 00 01 0050 01 01020304 07");
        bad[1] = (bad.len() - 2) as u8;
        assert_eq!(decode_in(&bad, true), Err(Error::Network(7)));
        assert!(decode(&bad).is_ok());
        // A truncated origin address is refused, not read past.
        let mut cut = hex("0000 0003 01 00 01 0050 01 01020304 01 0050 01 0102");
        cut[1] = (cut.len() - 2) as u8;
        assert_eq!(decode_in(&cut, true), Err(Error::AddrTruncated));
    }
}
