//! REALITY server side on hostile ClientHellos: the record reassembly, the parser and the
//! authentication never panic on any bytes; a parsed hello's key shares lie inside it; a
//! genuine authenticated hello with bytes of the input written over it is either refused or
//! still parses with its shares inside it.
#![no_main]
use std::sync::OnceLock;

use ferry::common::{Address, Destination};
use ferry::transport::reality::hello::{self, ClientHello};
use ferry::transport::reality::server::authenticate;
use ferry::transport::reality::{fingerprint, keys, RateLimit, ServerSettings};

fn settings() -> &'static ServerSettings {
    static S: OnceLock<ServerSettings> = OnceLock::new();
    S.get_or_init(|| ServerSettings {
        target: Destination::new(Address::Domain("t".into()), 443),
        xver: 0,
        server_names: vec!["reality.test".into(), String::new()],
        private_key: [7u8; 32],
        short_ids: vec![[0u8; 8]],
        min_client_ver: None,
        max_client_ver: None,
        max_time_diff: None,
        limit_upload: RateLimit::default(),
        limit_download: RateLimit::default(),
        mldsa65_seed: None,
    })
}

/// An authenticated Chrome hello, made once.
fn genuine() -> &'static Vec<u8> {
    static G: OnceLock<Vec<u8>> = OnceLock::new();
    G.get_or_init(|| {
        let (mut ch, k) = hello::build(&fingerprint::CHROME, Some("reality.test"));
        let random: [u8; 32] = ch[6..38].try_into().unwrap();
        let shared = keys::x25519(k.auth_private().unwrap(), &keys::x25519_public(&[7u8; 32])).unwrap();
        let auth = keys::auth_key(&shared, &random);
        let sid = keys::seal_session_id(&auth, &random, &[26, 7, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &ch);
        ch[hello::SESSION_ID_AT..hello::SESSION_ID_AT + 32].copy_from_slice(&sid);
        ch
    })
}

fn check(ch: &ClientHello) {
    for (_, r) in &ch.key_shares {
        assert!(r.end <= ch.raw.len());
    }
    let _ = ch.zeroed_session_id();
    let _ = authenticate(ch, settings(), 0);
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(Some((msg, used))) = hello::message_from_records(data, 1 << 16) {
        assert!(used <= data.len() && msg.len() <= 1 << 16);
    }
    if let Ok(ch) = ClientHello::parse(data) {
        check(&ch);
    }
    // The genuine hello with the input written over it at an offset the input picks.
    if data.len() > 2 {
        let mut g = genuine().clone();
        let at = u16::from_be_bytes([data[0], data[1]]) as usize % g.len();
        let n = (data.len() - 2).min(g.len() - at);
        g[at..at + n].copy_from_slice(&data[2..2 + n]);
        if let Ok(ch) = ClientHello::parse(&g) {
            check(&ch);
        }
    } else {
        let ch = ClientHello::parse(genuine()).unwrap();
        assert!(authenticate(&ch, settings(), 0).is_ok());
    }
});
