//! VLESS Encryption on hostile bytes: the server's handshake (every relay check and length,
//! in `random` mode with a two-key chain), a 1-RTT client reading a forged server reply, the
//! record stream (`native` and `random`) fed the input in small reads, and the config
//! strings. Each ends in data, an error or end of stream: never a panic, a hang or an
//! allocation the input's lengths choose beyond 64 KiB. Records sealed from the input's
//! pieces read back to exactly the input.
#![no_main]
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferry::transport::vlessenc::kdf::{Aead, Ctr};
use ferry::transport::vlessenc::stream::{EncStream, Setup};
use ferry::transport::vlessenc::xor::HeaderXor;
use ferry::transport::vlessenc::{generate, Client, ClientConfig, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod feed;
use feed::Feed;

struct Keys {
    server: Arc<Server>,
    client: Arc<Client>,
}

fn keys() -> &'static Keys {
    static K: OnceLock<Keys> = OnceLock::new();
    K.get_or_init(|| {
        let [x, m] = generate();
        let tail = |s: &str| s.rsplit('.').next().unwrap().to_string();
        let dec = format!("mlkem768x25519plus.random.600s.{}.{}", tail(&x.1), tail(&m.1));
        let enc = format!("mlkem768x25519plus.native.1rtt.100-35-36.{}", tail(&x.2));
        Keys {
            server: Arc::new(Server::new(ServerConfig::parse(&dec).unwrap().unwrap())),
            client: Client::new(ClientConfig::parse(&enc).unwrap().unwrap()),
        }
    })
}

fn stream(feed: Feed, random: bool) -> EncStream {
    let united = vec![5u8; 96];
    EncStream::new(Setup {
        io: Box::new(feed),
        held: Vec::new(),
        write: Aead::new(b"w", &united, true),
        read: Some(Aead::new(b"r", &united, true)),
        pre_write: Vec::new(),
        peer_padding: 0,
        xor_in: random.then(|| HeaderXor::new(Ctr::new(&united, &[1; 16]), 0, false)),
        xor_out: random.then(|| HeaderXor::new(Ctr::new(&united, &[2; 16]), 0, true)),
        random,
        resumed: None,
        splice_ok: false,
        united,
        aes: true,
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = ServerConfig::parse(&text);
    let _ = ClientConfig::parse(&text);
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let step = 1 + (sel as usize & 0x3f) * 37;
    let k = keys();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let limit = Duration::from_secs(60);
        let (f, _) = Feed::new(rest, step);
        let r = tokio::time::timeout(limit, k.server.handshake(Box::new(f), false)).await;
        assert!(r.is_ok(), "the server's handshake hung");
        let (f, _) = Feed::new(rest, step);
        let r = tokio::time::timeout(limit, k.client.handshake(Box::new(f), false)).await;
        assert!(r.is_ok(), "the client's handshake hung");
        for random in [false, true] {
            let (f, _) = Feed::new(rest, step);
            let mut s = stream(f, random);
            let mut out = Vec::new();
            let r = tokio::time::timeout(limit, s.read_to_end(&mut out)).await;
            assert!(r.is_ok(), "a stream fed {} bytes hung", rest.len());
            // What a writer seals from the input reads back as the input.
            let (f, written) = Feed::new(&[], 1);
            let mut w = stream(f, random);
            for piece in rest.chunks(step * 50) {
                w.write_all(piece).await.unwrap();
            }
            w.flush().await.unwrap();
            let wire = written.lock().unwrap().clone();
            let (f, _) = Feed::new(&wire, step);
            let mut r = stream_reader(f, random);
            let mut back = Vec::new();
            r.read_to_end(&mut back).await.unwrap();
            assert_eq!(back, rest);
        }
    });
});

/// A stream whose read side has the keys of [`stream`]'s write side.
fn stream_reader(feed: Feed, random: bool) -> EncStream {
    let united = vec![5u8; 96];
    EncStream::new(Setup {
        io: Box::new(feed),
        held: Vec::new(),
        write: Aead::new(b"r", &united, true),
        read: Some(Aead::new(b"w", &united, true)),
        pre_write: Vec::new(),
        peer_padding: 0,
        xor_in: random.then(|| HeaderXor::new(Ctr::new(&united, &[2; 16]), 0, false)),
        xor_out: None,
        random,
        resumed: None,
        splice_ok: false,
        united,
        aes: true,
    })
}
