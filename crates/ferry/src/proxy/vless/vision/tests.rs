//! The Vision core driven buffer by buffer.

use super::*;

const UUID: [u8; 16] = *b"0123456789abcdef";

/// A block as Xray writes it, with a fixed padding of `pad` zeros.
fn block(first: bool, cmd: u8, content: &[u8], pad: u16) -> Vec<u8> {
    let mut v = Vec::new();
    if first {
        v.extend_from_slice(&UUID);
    }
    v.push(cmd);
    v.extend_from_slice(&(content.len() as u16).to_be_bytes());
    v.extend_from_slice(&pad.to_be_bytes());
    v.extend_from_slice(content);
    v.resize(v.len() + pad as usize, 0);
    v
}

#[test]
fn blocks_unpad_across_any_cut_and_end_in_direct() {
    let mut wire = block(true, 0, b"hello", 300);
    wire.extend(block(false, 0, b"", 7));
    wire.extend(block(false, 2, b" world", 0));
    // Every way of cutting the stream in two gives the same content and the same end.
    for cut in 0..wire.len() {
        let mut u = Unpadder::new(UUID);
        let mut out = Vec::new();
        let (a, b) = wire.split_at(cut);
        // The first buffer must hold the UUID and a header (Xray passes shorter ones on).
        if a.len() < 21 {
            continue;
        }
        u.unpad(a, &mut out);
        u.unpad(b, &mut out);
        assert_eq!(out, b"hello world", "cut at {cut}");
        assert_eq!(u.end_batch(), ReadState::Direct, "cut at {cut}");
    }
}

#[test]
fn a_batch_that_stops_inside_a_block_stays_padded() {
    let wire = block(true, 2, b"abcdef", 10);
    let mut u = Unpadder::new(UUID);
    let mut out = Vec::new();
    u.unpad(&wire[..24], &mut out);
    assert_eq!(u.end_batch(), ReadState::Padded);
    u.unpad(&wire[24..], &mut out);
    assert_eq!(u.end_batch(), ReadState::Direct);
    assert_eq!(out, b"abcdef");
}

#[test]
fn what_follows_an_end_block_passes_as_it_is() {
    let mut wire = block(true, 1, b"last", 3);
    wire.extend_from_slice(b"plain after");
    let mut u = Unpadder::new(UUID);
    let mut out = Vec::new();
    u.unpad(&wire, &mut out);
    assert_eq!(out, b"lastplain after");
    assert_eq!(u.end_batch(), ReadState::Plain);
    // Later buffers not starting with the UUID pass unchanged.
    out.clear();
    u.unpad(b"more bytes that are long enough", &mut out);
    assert_eq!(out, b"more bytes that are long enough");
}

#[test]
fn a_first_buffer_without_the_uuid_passes_unparsed() {
    let mut u = Unpadder::new(UUID);
    let mut out = Vec::new();
    let other = block(false, 0, b"x", 0);
    u.unpad(&other, &mut out);
    assert_eq!(out, other);
    assert_eq!(u.end_batch(), ReadState::Padded);
    // Too short to hold UUID + header: passed on too (as Xray).
    let mut u = Unpadder::new(UUID);
    out.clear();
    u.unpad(&UUID, &mut out);
    assert_eq!(out, UUID);
}

#[test]
fn an_unknown_command_ends_the_blocks_and_keeps_the_state() {
    let mut wire = block(true, 9, b"odd", 2);
    wire.extend_from_slice(b"tail");
    let mut u = Unpadder::new(UUID);
    let mut out = Vec::new();
    u.unpad(&wire, &mut out);
    assert_eq!(out, b"oddtail");
    assert_eq!(u.end_batch(), ReadState::Padded);
}

/// An inner TLS 1.3 ServerHello record with cipher suite `cipher` (a 32-byte session id).
fn server_hello(cipher: u16, tls13: bool) -> Vec<u8> {
    let mut body = vec![0x02, 0, 0, 0, 0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(32);
    body.extend_from_slice(&[9u8; 32]); // session id
    body.extend_from_slice(&cipher.to_be_bytes());
    body.push(0); // compression
    let ext: Vec<u8> = if tls13 {
        vec![0x00, 0x2b, 0x00, 0x02, 0x03, 0x04]
    } else {
        vec![0xff, 0x01, 0x00, 0x01, 0x00]
    };
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let hl = (body.len() - 4) as u32;
    body[1..4].copy_from_slice(&hl.to_be_bytes()[1..]);
    let mut rec = vec![0x16, 0x03, 0x03];
    rec.extend_from_slice(&(body.len() as u16).to_be_bytes());
    rec.extend_from_slice(&body);
    rec
}

#[test]
fn the_filter_tells_tls13_and_its_cipher() {
    for (cipher, tls13, xtls) in [
        (0x1301, true, true),
        (0x1303, true, true),
        (0x1305, true, false),
        (0xc02f, false, false),
    ] {
        let mut f = TlsFilter::default();
        f.inspect([&[0x16, 0x03, 0x01, 0x00, 0x10, 0x01, 0, 0][..]]);
        assert!(f.is_tls && !f.is_tls12_or_above);
        assert_eq!(f.packets_left(), 7);
        f.inspect([&server_hello(cipher, tls13)[..]]);
        assert!(f.is_tls12_or_above);
        assert_eq!(f.cipher, cipher);
        assert_eq!(f.enable_xtls, xtls, "{cipher:x}");
        assert!(!f.active(), "the ServerHello decides");
    }
}

#[test]
fn non_tls_traffic_ends_padding_when_the_filter_runs_out() {
    let mut f = TlsFilter::default();
    let mut p = Padder::new(UUID, DEFAULT_SEEDS);
    let mut n = 0;
    while p.state() == WriteState::Padding {
        let mut out = Vec::new();
        p.write(b"GET / HTTP/1.1\r\n\r\n", &mut f, &mut out);
        n += 1;
        assert!(n < 10);
        // Each batch is a block the unpadder reads back.
        let mut u = Unpadder::new(UUID);
        let mut got = Vec::new();
        if n > 1 {
            // Later blocks carry no UUID: feed a first one to get past it.
            u.unpad(&block(true, 0, b"", 0), &mut got);
        }
        u.unpad(&out, &mut got);
        assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n");
    }
    // Filter at 8: padding ends on the 7th packet (filter <= 1 after inspecting it).
    assert_eq!(n, 7);
    assert_eq!(p.state(), WriteState::Plain);
}

#[test]
fn application_data_after_a_tls13_hello_ends_in_direct() {
    let mut f = TlsFilter::default();
    f.inspect([&server_hello(0x1301, true)[..]]);
    assert!(f.enable_xtls);
    f.is_tls = true;
    let mut p = Padder::new(UUID, DEFAULT_SEEDS);
    let mut rec = vec![0x17, 0x03, 0x03, 0x00, 0x20];
    rec.extend_from_slice(&[5u8; 32]);
    let mut out = Vec::new();
    p.write(&rec, &mut f, &mut out);
    assert_eq!(p.state(), WriteState::DirectNext);
    let mut u = Unpadder::new(UUID);
    let mut got = Vec::new();
    u.unpad(&out, &mut got);
    assert_eq!(got, rec);
    assert_eq!(u.end_batch(), ReadState::Direct);
    // An incomplete record does not end padding.
    let mut p = Padder::new(UUID, DEFAULT_SEEDS);
    let mut out = Vec::new();
    p.write(&rec[..20], &mut f, &mut out);
    assert_eq!(p.state(), WriteState::Padding);
}

#[test]
fn padding_lengths_follow_the_seeds_and_the_block_limit() {
    let mut f = TlsFilter {
        is_tls: true,
        ..Default::default()
    };
    for _ in 0..200 {
        let mut p = Padder::new(UUID, DEFAULT_SEEDS);
        let mut out = Vec::new();
        p.write(&[0x16, 0x03, 0x01, 0x00, 0x01, 0x01], &mut f, &mut out);
        let pad = u16::from_be_bytes([out[19], out[20]]) as usize;
        // Long padding: 900..1399 in all, content included.
        assert!((900..1400).contains(&(pad + 6)), "{pad}");
        assert_eq!(out.len(), 21 + 6 + pad);
    }
    // A large batch is cut into blocks of at most 8192 - 21 content bytes.
    let big = vec![1u8; 20000];
    let mut p = Padder::new(UUID, DEFAULT_SEEDS);
    let mut f = TlsFilter::default();
    let mut out = Vec::new();
    p.write(&big, &mut f, &mut out);
    let mut u = Unpadder::new(UUID);
    let mut got = Vec::new();
    u.unpad(&out, &mut got);
    assert_eq!(got, big);
}

#[test]
fn complete_records_are_recognised() {
    assert!(is_complete_record(&[0x17, 3, 3, 0, 1, 9]));
    assert!(is_complete_record(&[
        0x17, 3, 3, 0, 1, 9, 0x17, 3, 3, 0, 2, 1, 2
    ]));
    assert!(!is_complete_record(&[0x17, 3, 3, 0, 2, 9]));
    assert!(!is_complete_record(&[0x17, 3, 3, 0, 0]));
    assert!(!is_complete_record(&[0x16, 3, 3, 0, 1, 9]));
    assert!(!is_complete_record(&[]));
}

#[test]
fn reshape_cuts_at_the_last_record_start() {
    let mut b = vec![0u8; 8180];
    b[5000..5003].copy_from_slice(&APP_DATA);
    let r = reshape(&b);
    assert_eq!(
        r.iter().map(|x| x.len()).collect::<Vec<_>>(),
        vec![5000, 3180]
    );
    let b = vec![0u8; 8180];
    let r = reshape(&b);
    assert_eq!(
        r.iter().map(|x| x.len()).collect::<Vec<_>>(),
        vec![4096, 4084]
    );
    let b = vec![0u8; 20000];
    let r = reshape(&b);
    assert_eq!(r.iter().map(|x| x.len()).sum::<usize>(), 20000);
    assert!(r.iter().all(|x| x.len() <= 8192 - 21));
}

fn app_record(len: usize, fill: u8) -> Vec<u8> {
    let mut r = vec![0x17, 0x03, 0x03];
    r.extend_from_slice(&(len as u16).to_be_bytes());
    r.resize(5 + len, fill);
    r
}

#[test]
fn a_batch_that_ends_inside_a_record_still_ends_padding_at_its_last_whole_record() {
    // The inner handshake went by (TLS 1.3, AES-GCM): records are followed from the start.
    let mut f = TlsFilter::default();
    f.inspect([&server_hello(0x1301, true)[..]]);
    f.is_tls = true;
    let mut p = Padder::new(UUID, DEFAULT_SEEDS);
    let a = app_record(3000, 1);
    let b = app_record(3000, 2);
    let c = app_record(3000, 3);
    // First batch: all of `a` and half of `b` (a bulk upload's reads are not aligned).
    let mut batch1 = a.clone();
    batch1.extend_from_slice(&b[..1500]);
    let mut out = Vec::new();
    let raw = p.write(&batch1, &mut f, &mut out);
    // `a` is the run of whole records: it ends padding with Direct; `b`'s half goes raw.
    assert_eq!(p.state(), WriteState::DirectNext);
    assert_eq!(raw, a.len());
    let mut u = Unpadder::new(UUID);
    let mut got = Vec::new();
    u.unpad(&out, &mut got);
    assert_eq!(got, a);
    assert_eq!(u.end_batch(), ReadState::Direct);
    // Starting in the middle of a record: the record's rest is padded, then `c` ends it.
    let mut p = Padder::new(UUID, DEFAULT_SEEDS);
    let mut out = Vec::new();
    p.write(&b[..1500], &mut f, &mut out);
    assert_eq!(p.state(), WriteState::Padding);
    let mut batch2 = b[1500..].to_vec();
    batch2.extend_from_slice(&c);
    let raw = p.write(&batch2, &mut f, &mut out);
    assert_eq!(raw, batch2.len());
    assert_eq!(p.state(), WriteState::DirectNext);
    let mut u = Unpadder::new(UUID);
    let mut got = Vec::new();
    u.unpad(&out, &mut got);
    let mut want = b.clone();
    want.extend_from_slice(&c);
    assert_eq!(got, want);
    assert_eq!(u.end_batch(), ReadState::Direct);
}
