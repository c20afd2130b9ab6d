//! The VMess body, sans-IO: chunk framing per security type and option bits. A [`Sealer`]
//! appends encoded chunks to an output buffer; an [`Opener`] decodes chunks in place at the
//! front of an input buffer.
//!
//! Split by concept: `params` (options, security, limits), `mask` (SHAKE128 masks and padding),
//! `framing` (keys, size codec, framing choice), `sealer` and `opener`. The legacy CFB stream and
//! FNV-1a checksum live in `super::legacy`, below both the body and the header.

mod framing;
mod mask;
mod opener;
mod params;
mod sealer;

pub use super::legacy::{fnv1a32, fnv1a32_many};
pub use framing::chacha_key;
pub use opener::{Opened, OpenedInto, Opener};
pub use params::*;
pub use sealer::{Sealer, MAX_STREAM_HEADERS};

#[cfg(test)]
mod tests {
    use super::mask::Mask;
    use super::*;
    use crate::proxy::vmess::legacy::{cfb_dec, cfb_enc};

    fn params(security: Security, opt: u8, packet: bool) -> BodyParams {
        BodyParams {
            security,
            opt,
            packet,
            key: [1; 16],
            iv: [2; 16],
            req_key: [3; 16],
            req_iv: [4; 16],
        }
    }

    fn pair(sec: Security, opt: u8, packet: bool) -> (Sealer, Opener) {
        let p = params(sec, opt, packet);
        let (e, d) = if sec == Security::Legacy {
            (Some(cfb_enc(&p.key, &p.iv)), Some(cfb_dec(&p.key, &p.iv)))
        } else {
            (None, None)
        };
        (Sealer::new(&p, e).unwrap(), Opener::new(&p, d).unwrap())
    }

    /// Seals `msgs` then decodes the wire fed `step` bytes at a time.
    fn round_trip(sec: Security, opt: u8, packet: bool, msgs: &[Vec<u8>], step: usize) {
        let (mut s, mut o) = pair(sec, opt, packet);
        let mut wire = Vec::new();
        for m in msgs {
            for c in m.chunks(s.max_payload()) {
                let before = wire.len();
                s.seal(c, &mut wire);
                assert!(wire.len() - before <= MAX_CHUNK, "chunk too big");
            }
        }
        s.seal_eof(&mut wire);
        let mut got = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut fed = 0;
        let mut eof = false;
        while !eof {
            match o.open(&mut buf).unwrap() {
                Opened::NeedMore(_) => {
                    if fed == wire.len() {
                        break;
                    }
                    let n = step.min(wire.len() - fed);
                    let at = buf.len();
                    buf.extend_from_slice(&wire[fed..fed + n]);
                    o.on_read(&mut buf[at..]);
                    fed += n;
                }
                Opened::Data {
                    start,
                    end,
                    consumed,
                } => {
                    got.extend_from_slice(&buf[start..end]);
                    buf.drain(..consumed);
                }
                Opened::Eof => eof = true,
            }
        }
        let want: Vec<u8> = msgs.concat();
        assert_eq!(got, want, "{sec:?} opt {opt:#x} packet {packet}");
        let framed = opt & OPT_CHUNK_STREAM != 0;
        assert_eq!(eof, framed, "{sec:?} opt {opt:#x} end marker");
    }

    #[test]
    fn every_security_and_option_combination_round_trips() {
        let msgs = vec![
            vec![7u8; 1],
            (0..20000u32).map(|i| i as u8).collect::<Vec<_>>(),
            vec![9u8; 8110],
        ];
        for sec in [
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
            Security::None,
            Security::Legacy,
        ] {
            for opt in [0x00u8, 0x01, 0x05, 0x0d, 0x11, 0x15, 0x1d] {
                for packet in [false, true] {
                    for step in [1usize, 7, 100_000] {
                        round_trip(sec, opt, packet, &msgs, step);
                    }
                }
            }
        }
    }

    #[test]
    fn seal_all_matches_chunk_by_chunk() {
        for sec in [Security::Legacy, Security::Aes128Gcm, Security::None] {
            for len in [0usize, 1, 8190, 8191, 3 * 8190 + 5, 9 * 8000] {
                let data: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
                // Padding is random, so compare without it.
                let (mut a, _) = pair(sec, 0x05, false);
                let (mut b, _) = pair(sec, 0x05, false);
                let (mut wa, mut wb) = (Vec::new(), Vec::new());
                a.seal_all(&data, &mut wa);
                for c in data.chunks(b.max_payload()) {
                    b.seal(c, &mut wb);
                }
                assert_eq!(wa, wb, "{sec:?} {len}");
            }
        }
    }

    #[test]
    fn masks_and_padding_follow_the_shake_stream() {
        // With M|P the first chunk's padding is next()%64 and its mask is the next word.
        let (mut s, _) = pair(Security::Aes128Gcm, 0x0d, false);
        let mut m = Mask::new(&[2; 16]);
        let pad = (m.next() % 64) as usize;
        let mask = m.next();
        let mut wire = Vec::new();
        s.seal(b"hello", &mut wire);
        let size = u16::from_be_bytes([wire[0], wire[1]]) ^ mask;
        assert_eq!(size as usize, 5 + 16 + pad);
        assert_eq!(wire.len(), 2 + 5 + 16 + pad);
    }

    #[test]
    fn corrupted_chunk_and_bad_sizes_are_errors() {
        for sec in [
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
            Security::Legacy,
        ] {
            for opt in [0x01u8, 0x0d, 0x1d] {
                let (mut s, mut o) = pair(sec, opt, false);
                let mut wire = Vec::new();
                s.seal(&[5u8; 300], &mut wire);
                let last = wire.len() - 1 - if opt & 8 != 0 { 64 } else { 0 };
                let i = last.min(100);
                wire[i] ^= 0x40;
                o.on_read(&mut wire);
                let r = o.open(&mut wire);
                assert!(r.is_err(), "{sec:?} {opt:#x}: {r:?}");
            }
        }
        // A plain size smaller than the tag.
        let (_, mut o) = pair(Security::Aes128Gcm, 0x01, false);
        assert_eq!(o.open(&mut [0, 3, 0, 0]), Err(BodyError::BadSize(3)));
        // A huge size just asks for more bytes (bounded by u16).
        let (_, mut o) = pair(Security::Aes128Gcm, 0x01, false);
        assert_eq!(o.open(&mut [0xff, 0xff]), Ok(Opened::NeedMore(2 + 65535)));
        assert!(o.max_chunk() >= 2 + 65535);
    }

    #[test]
    fn empty_first_chunk_is_data_only_when_tolerated() {
        for (sec, opt) in [
            (Security::Aes128Gcm, 0x0d),
            (Security::None, 0x01),
            (Security::Aes128Gcm, 0x1d),
        ] {
            let (mut s, mut o) = pair(sec, opt, false);
            let mut wire = Vec::new();
            s.seal(&[], &mut wire);
            s.seal(b"data", &mut wire);
            s.seal_eof(&mut wire);
            assert_eq!(o.open(&mut wire.clone()), Ok(Opened::Eof));
            let (_, mut o) = pair(sec, opt, false);
            o.tolerate_empty_first();
            let mut got = Vec::new();
            loop {
                match o.open(&mut wire).unwrap() {
                    Opened::Data {
                        start,
                        end,
                        consumed,
                    } => {
                        got.extend_from_slice(&wire[start..end]);
                        wire.drain(..consumed);
                    }
                    Opened::Eof => break,
                    Opened::NeedMore(_) => panic!("truncated"),
                }
            }
            assert_eq!(got, b"data");
        }
    }

    #[test]
    fn stream_headers_match_sealed_chunks() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 13) as u8).collect();
        let (mut a, _) = pair(Security::None, 0x05, false);
        let (mut b, mut o) = pair(Security::None, 0x05, false);
        assert!(a.is_plain_stream());
        let mut want = Vec::new();
        a.seal_all(&data, &mut want);
        // Frame, "send" only part of the chunks, commit those, frame the rest again.
        let mut wire = Vec::new();
        let mut off = 0;
        let max = b.max_payload();
        while off < data.len() {
            let mut hdrs = [[0u8; 2]; 5];
            let k = b.stream_headers(&data[off..], &mut hdrs);
            let sent = k.div_ceil(2);
            for (h, c) in hdrs.iter().zip(data[off..].chunks(max)).take(sent) {
                wire.extend_from_slice(h);
                wire.extend_from_slice(c);
                off += c.len();
            }
            b.commit_headers(sent);
        }
        assert_eq!(wire, want);
        // And it decodes.
        let mut got = Vec::new();
        while let Opened::Data {
            start,
            end,
            consumed,
        } = o.open(&mut wire).unwrap()
        {
            got.extend_from_slice(&wire[start..end]);
            wire.drain(..consumed);
        }
        assert_eq!(got, data);
    }

    #[test]
    fn open_into_matches_open_for_every_destination_size() {
        let data: Vec<u8> = (0..30_000u32).map(|i| (i * 7) as u8).collect();
        for sec in [
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
            Security::None,
            Security::Legacy,
        ] {
            for opt in [0x00u8, 0x01, 0x05, 0x0d, 0x1d] {
                for dst_len in [1usize, 100, 8000, 8192, 65536] {
                    let (mut s, mut o) = pair(sec, opt, false);
                    let mut wire = Vec::new();
                    s.seal_all(&data, &mut wire);
                    s.seal_eof(&mut wire);
                    o.on_read(&mut wire);
                    let mut got = Vec::new();
                    let mut dst = vec![0u8; dst_len];
                    loop {
                        match o.open_into(&mut wire, &mut dst).unwrap() {
                            OpenedInto::Copied { len, consumed } => {
                                assert!(len <= dst_len);
                                got.extend_from_slice(&dst[..len]);
                                wire.drain(..consumed);
                            }
                            OpenedInto::InPlace {
                                start,
                                end,
                                consumed,
                            } => {
                                assert!(end - start > dst_len || start == end);
                                got.extend_from_slice(&wire[start..end]);
                                wire.drain(..consumed);
                            }
                            OpenedInto::Eof | OpenedInto::NeedMore(_) => break,
                        }
                    }
                    assert_eq!(got, data, "{sec:?} {opt:#x} dst {dst_len}");
                }
            }
        }
    }

    #[test]
    fn seal_all_to_stops_at_whole_chunks() {
        let data = vec![3u8; 50_000];
        let (mut s, mut o) = pair(Security::Aes128Gcm, 0x0d, false);
        let mut out = vec![0u8; 20_000];
        let (taken, written) = s.seal_all_to(&data, &mut out);
        assert_eq!(taken % s.max_payload(), 0);
        assert!(taken > 0 && written <= out.len());
        let mut wire = out[..written].to_vec();
        let mut got = 0;
        while let Ok(Opened::Data {
            start,
            end,
            consumed,
        }) = o.open(&mut wire)
        {
            got += end - start;
            wire.drain(..consumed);
        }
        assert_eq!(got, taken);
    }
}
