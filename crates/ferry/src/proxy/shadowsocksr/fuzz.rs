//! Fuzz entry points for the SSR decoders: plain functions that must never panic on any input.
//! The `fuzz/` crate calls them from cargo-fuzz targets; a unit test below feeds them random
//! inputs so they run without nightly. The first byte of the input picks a variant and the
//! piece size, so the decoders also see their input split at every boundary.

use std::sync::Arc;

use super::obfs::{self, Obfs, TlsServerShared};
use super::protocol::{self, Info, Kind, Protocol, ServerShared, SsrUser};
use super::udp;
use crate::proxy::User;

fn pieces(data: &[u8]) -> (u8, usize, &[u8]) {
    match data.split_first() {
        Some((&b, rest)) => (b, (b as usize >> 3) + 1, rest),
        None => (0, 1, &[]),
    }
}

fn server(kind: Kind, users: bool) -> Protocol {
    let key: Arc<[u8]> = vec![0x11u8; 32].into();
    let list = if users {
        vec![SsrUser {
            uid: 1024,
            password: b"userpass".to_vec(),
            user: User::new("u", 0),
        }]
    } else {
        Vec::new()
    };
    let info = Info {
        key,
        iv: vec![0x22; 16],
        overhead: kind.overhead(),
        tcp_mss: protocol::TCP_MSS,
    };
    let mut p = Protocol::new(
        kind,
        info,
        protocol::Side::Server(Arc::new(ServerShared::new(list, User::new("", 0)))),
    );
    p.set_recv_iv(&[0x33; 16]);
    p
}

/// verify_deflate's decoder.
pub fn verify_deflate(data: &[u8]) {
    protocol_of(&[Kind::VerifyDeflate], data)
}

/// auth_sha1_v4's decoders.
pub fn auth_sha1_v4(data: &[u8]) {
    protocol_of(&[Kind::AuthSha1V4], data)
}

/// auth_aes128_md5's and auth_aes128_sha1's decoders (TCP and UDP).
pub fn auth_aes128(data: &[u8]) {
    protocol_of(&[Kind::AuthAes128Md5, Kind::AuthAes128Sha1], data)
}

/// auth_chain_a … _e decoders (TCP and UDP).
pub fn auth_chain(data: &[u8]) {
    protocol_of(
        &[
            Kind::AuthChainA,
            Kind::AuthChainB,
            Kind::AuthChainC,
            Kind::AuthChainD,
            Kind::AuthChainE,
        ],
        data,
    )
}

/// Every protocol plugin (the kind chosen by the first byte).
pub fn protocol(data: &[u8]) {
    protocol_of(Kind::ALL, data)
}

fn client(kind: Kind, login: bool) -> Protocol {
    Protocol::new(
        kind,
        Info {
            key: vec![0x11u8; 32].into(),
            iv: vec![0x33; 16],
            overhead: kind.overhead(),
            tcp_mss: protocol::TCP_MSS,
        },
        protocol::Side::Client(Arc::new(protocol::ClientShared::new(if login {
            "1024:userpass"
        } else {
            ""
        }))),
    )
}

/// The codecs' round trip on a valid stream carrying `rest` (client to server and back, cut
/// into `step`-byte pieces), then the same stream with one byte changed: decoded or refused,
/// never a panic.
fn round_trip(kind: Kind, b: u8, step: usize, rest: &[u8]) {
    let users = b & 0x80 != 0;
    let mut c = client(kind, users);
    let mut s = server(kind, users);
    let mut req = b"\x01\x7f\x00\x00\x01\x00\x50".to_vec();
    req.extend_from_slice(rest);
    let mut wire = Vec::new();
    c.client_encode(&req[..req.len().min(40)], &mut wire);
    c.client_encode(req.get(40..).unwrap_or_default(), &mut wire);
    let mut got = Vec::new();
    for p in wire.chunks(step) {
        s.server_decode(p, &mut got)
            .expect("a valid client stream decodes");
    }
    assert_eq!(got, req, "{kind:?}");
    let mut back = Vec::new();
    s.server_encode(&[], &mut back);
    s.server_encode(rest, &mut back);
    let mut got = Vec::new();
    for p in back.chunks(step) {
        c.client_decode(p, &mut got)
            .expect("a valid server stream decodes");
    }
    assert_eq!(got, rest, "{kind:?}");
    if !wire.is_empty() {
        let at = rest.first().map_or(0, |&x| x as usize * 7919) % wire.len();
        wire[at] ^= rest.get(1).copied().unwrap_or(0x55) | 1;
        let mut s = server(kind, users);
        let mut out = Vec::new();
        for p in wire.chunks(step) {
            if s.server_decode(p, &mut out).is_err() {
                break;
            }
        }
    }
}

/// One protocol plugin (of `kinds`, chosen by the first byte): its server and client decoders
/// on the raw bytes, the round trip of a valid stream carrying them, and the UDP decoders.
fn protocol_of(kinds: &[Kind], data: &[u8]) {
    let (b, step, rest) = pieces(data);
    let kind = kinds[b as usize % kinds.len()];
    round_trip(kind, b, step, rest);
    let mut s = server(kind, b & 0x80 != 0);
    let mut out = Vec::new();
    for c in rest.chunks(step) {
        if s.server_decode(c, &mut out).is_err() {
            break;
        }
    }
    let mut c = Protocol::new(
        kind,
        Info {
            key: vec![0x11u8; 32].into(),
            iv: vec![0x22; 16],
            overhead: kind.overhead(),
            tcp_mss: protocol::TCP_MSS,
        },
        protocol::Side::Client(Arc::new(protocol::ClientShared::new("1024:userpass"))),
    );
    // A client decodes only after it has sent its first packet.
    let mut w = Vec::new();
    c.client_encode(b"\x01\x7f\x00\x00\x01\x00\x50hello", &mut w);
    for p in rest.chunks(step) {
        if c.client_decode(p, &mut out).is_err() {
            break;
        }
    }
    let k = udp::Keys {
        kind,
        method: super::cipher::Method::Rc4Md5,
        key: &[0x11; 16],
    };
    let _ = udp::server_open(&k, &[], b & 1 == 0, rest);
    let _ = udp::client_open(&k, None, rest);
}

fn obfs_server(kind: obfs::Kind, param: &str) -> Obfs {
    Obfs::new(
        kind,
        obfs::Info {
            host: String::new(),
            port: 0,
            param: param.into(),
            key: vec![0x11u8; 16].into(),
            head_size: 0,
        },
        obfs::Side::Server(Arc::new(TlsServerShared::default())),
    )
}

/// The tls1.2_ticket_auth server decoder (hello, Finished, records) and client flight decoder.
pub fn tls(data: &[u8]) {
    let (b, step, rest) = pieces(data);
    let mut s = obfs_server(obfs::Kind::TlsTicketAuth, if b & 1 == 0 { "" } else { "0" });
    let mut out = Vec::new();
    for c in rest.chunks(step) {
        match s.server_decode(c, &mut out) {
            Ok(true) => s.server_encode(&[], &mut out),
            Ok(false) => {}
            Err(_) => break,
        }
    }
    let mut c = Obfs::new(
        obfs::Kind::TlsTicketAuth,
        obfs::Info {
            host: "example.com".into(),
            port: 443,
            param: String::new(),
            key: vec![0x11u8; 16].into(),
            head_size: 0,
        },
        obfs::tls_client(),
    );
    c.client_encode(b"x", &mut out);
    for p in rest.chunks(step) {
        if c.client_decode(p, &mut out).is_err() {
            break;
        }
    }
}

/// The http_simple server decoder (request head, URL bytes, Host check) and client decoder.
pub fn http_simple(data: &[u8]) {
    let (b, step, rest) = pieces(data);
    let param = if b & 1 == 0 {
        ""
    } else {
        "a.example,b.example"
    };
    let mut s = obfs_server(obfs::Kind::HttpSimple, param);
    let mut out = Vec::new();
    for c in rest.chunks(step) {
        if s.server_decode(c, &mut out).is_err() {
            break;
        }
    }
    let mut r = obfs_server(obfs::Kind::RandomHead, "");
    let _ = r.server_decode(rest, &mut out);
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_inputs_never_panic() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        for i in 0..3000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 700) as usize;
            let data: Vec<u8> = (0..n)
                .map(|j| (seed.rotate_left(j as u32 % 64) >> 3) as u8)
                .collect();
            super::protocol(&data);
            super::tls(&data);
            super::http_simple(&data);
            let _ = i;
        }
    }
}
