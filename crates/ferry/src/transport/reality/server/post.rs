//! What the target sends after its handshake (session tickets): measured once per server name
//! and ALPN class in the background, and imitated with empty records of those lengths.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::hello::{self, ClientHello};
use super::super::record;
use super::Server;
use crate::transport::{Dialer, SocketDialer};

#[derive(Clone)]
pub(super) enum Post {
    Measuring,
    Known(Arc<[usize]>),
}

/// The ALPN class of a ClientHello, as Xray groups them: 0 none, 1 http/1.1 first, 2 h2 first.
pub fn alpn_class(ch: &ClientHello) -> u8 {
    match ch.alpn.first().map(Vec::as_slice) {
        Some(b"h2") => 2,
        Some(b"http/1.1") => 1,
        _ => 0,
    }
}

/// Shakes hands with the target as a browser of ALPN `class` would for `sni` and returns the
/// lengths of the application-data records it sends after the handshake (its session tickets),
/// collected until it is quiet for a second (five at most).
pub async fn measure_post_handshake(
    target: &crate::common::Destination,
    xver: u8,
    sni: &str,
    class: u8,
) -> io::Result<Vec<usize>> {
    let dialer = SocketDialer {
        opts: Default::default(),
    };
    let mut io = dialer.dial_tcp(target).await?;
    if xver > 0 {
        let lo = crate::session::Endpoint::Ip(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        io.write_all(&crate::transport::proxy_protocol::encode(xver, &lo, &lo))
            .await?;
    }
    let alpn: &[&str] = match class {
        0 => &[],
        1 => &["http/1.1"],
        _ => &["h2", "http/1.1"],
    };
    let (mut ch, keys) =
        hello::build_with_alpn(&super::super::fingerprint::CHROME, Some(sni), alpn);
    crate::common::rand::fill(&mut ch[hello::SESSION_ID_AT..hello::SESSION_ID_AT + 32]);
    let h = super::super::client::handshake(&mut io, &ch, &keys, 0x0301, None, None).await?;
    let mut buf = h.held;
    let mut lengths = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        while let Some(n) = record::complete(&buf) {
            if buf[0] == record::APPLICATION_DATA {
                lengths.push(n);
            }
            buf.drain(..n);
        }
        let wait = end
            .saturating_duration_since(tokio::time::Instant::now())
            .min(Duration::from_secs(1));
        let at = buf.len();
        buf.resize(at + 4096, 0);
        match tokio::time::timeout(wait, io.read(&mut buf[at..])).await {
            Ok(Ok(n)) if n > 0 => buf.truncate(at + n),
            _ => break,
        }
    }
    Ok(lengths)
}

impl Server {
    /// The target's post-handshake record lengths for this name and class, if measured; the
    /// first call starts measuring every server name and class in the background.
    pub(super) fn post_lengths(self: &Arc<Self>, sni: &str, class: u8) -> Option<Arc<[usize]>> {
        let mut map = self.post.lock().ok()?;
        if map.is_empty() {
            for name in self.settings.server_names.iter().filter(|n| !n.is_empty()) {
                for c in 0..3u8 {
                    map.insert((name.clone(), c), Post::Measuring);
                    let me = self.clone();
                    let name = name.clone();
                    tokio::spawn(async move {
                        let s = &me.settings;
                        let got = tokio::time::timeout(
                            Duration::from_secs(15),
                            measure_post_handshake(&s.target, s.xver, &name, c),
                        )
                        .await
                        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
                        let lens: Arc<[usize]> = match got {
                            Ok(l) => {
                                tracing::debug!("REALITY: target {} sends {l:?} after its handshake for {name} (ALPN class {c})", s.target);
                                l.into()
                            }
                            Err(e) => {
                                tracing::warn!(
                                    "REALITY: measuring target {} for {name}: {e}",
                                    s.target
                                );
                                Arc::new([])
                            }
                        };
                        if let Ok(mut m) = me.post.lock() {
                            m.insert((name, c), Post::Known(lens));
                        }
                    });
                }
            }
        }
        match map.get(&(sni.to_string(), class)) {
            Some(Post::Known(l)) => Some(l.clone()),
            _ => None,
        }
    }
}
