//! The HTTP/1 upgrade of the WebSocket and HTTPUpgrade transports on hostile bytes, as both
//! ends read them: the server's request reader (head scan, size limit, request, path and Host
//! check, the WebSocket key and early data, X-Forwarded-For) and the client's response reader,
//! with and without early data (where the answer is read in front of the first bytes). Any
//! bytes, in reads of any size, end in a stream, an error or an answer; never a panic or a
//! wait for more than there is. A server that takes the upgrade answers 101; one that refuses
//! answers an HTTP error or nothing.
#![no_main]
mod feed;

use std::sync::Arc;

use ferry::common::{Address, Destination};
use ferry::session::{ConnInfo, Endpoint};
use ferry::transport::httpupgrade::HttpUpgradeLayer;
use ferry::transport::upgrade::UpgradeSettings;
use ferry::transport::ws::{WsLayer, WsSettings};
use ferry::transport::{BoxStream, Layer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn settings(ctl: u8) -> UpgradeSettings {
    let mut s = UpgradeSettings::with_path(if ctl & 4 != 0 { "/ray?ed=2048" } else { "/ray" });
    if ctl & 8 != 0 {
        s.host = "example.com".into();
    }
    s
}

fn layers(ctl: u8) -> (WsLayer, HttpUpgradeLayer) {
    let trusted: Arc<[String]> = if ctl & 16 != 0 {
        Arc::from(vec!["X-Real-IP".to_string()])
    } else {
        Arc::from(Vec::new())
    };
    let ws = WsLayer {
        settings: Arc::new(WsSettings {
            upgrade: settings(ctl),
            early_header: if ctl & 32 != 0 { "X-Early".into() } else { ferry::transport::ws::EARLY_DATA_HEADER.into() },
            heartbeat: None,
        }),
        tls_name: None,
        trusted_xff: trusted.clone(),
    };
    let hu = HttpUpgradeLayer { settings: Arc::new(settings(ctl)), tls_name: None, trusted_xff: trusted };
    (ws, hu)
}

/// Reads a stream to its end (or an error), at most `limit` reads.
async fn drain(mut s: BoxStream, limit: usize) -> usize {
    let mut buf = [0u8; 4096];
    let mut total = 0;
    for _ in 0..limit {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
    panic!("no end after {limit} reads");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (ctl, step, rest) = feed::split(data);
    let limit = rest.len() + 4;
    let (ws, hu) = layers(ctl);
    let server = Destination::new(Address::Domain("example.com".into()), 443);
    feed::runtime().block_on(async {
        for (i, layer) in [&ws as &dyn Layer, &hu].into_iter().enumerate() {
            // Server: the request.
            let (stream, written) = feed::Feed::boxed(rest, step);
            let mut info = ConnInfo::new(Endpoint::Ip("127.0.0.1:1".parse().unwrap()), Endpoint::Ip("127.0.0.1:2".parse().unwrap()));
            match layer.accept(stream, &mut info).await {
                Ok(s) => {
                    assert!(info.path.is_some());
                    drain(s, limit).await;
                    assert!(written.lock().unwrap().starts_with(b"HTTP/1.1 101 "), "layer {i}");
                }
                Err(_) => {
                    let w = written.lock().unwrap();
                    assert!(w.is_empty() || w.starts_with(b"HTTP/1.1 4"), "layer {i}: {:?}", String::from_utf8_lossy(&w));
                }
            }
            // Client: the response (with early data: behind the first write).
            let (stream, _) = feed::Feed::boxed(rest, step);
            if let Ok(mut s) = layer.connect(stream, &server).await {
                let _ = s.write_all(b"hello").await;
                let _ = s.flush().await;
                drain(s, limit).await;
            }
        }
    });
});
