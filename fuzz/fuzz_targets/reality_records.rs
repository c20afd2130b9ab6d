//! REALITY's record side on hostile bytes: the target's first flight (ServerHello, CCS,
//! encrypted records) is parsed without panicking; a ServerHello parses only inside its bytes;
//! records sealed from the input's pieces open to exactly those pieces; any bytes fed to a
//! REALITY stream end in data, an error or end of stream, never a panic or a hang.
#![no_main]
use ferry::transport::reality::hello::ServerHello;
use ferry::transport::tls13::keys::{Suite, TrafficKey};
use ferry::transport::tls13::record;
use ferry::transport::reality::server::TargetFlight;
use ferry::transport::tls13::{Direction, Tls13Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(Some(f)) = TargetFlight::parse(data) {
        assert!(f.lengths.iter().sum::<usize>() <= data.len());
        assert!(f.server_hello.share.end <= f.server_hello.raw.len());
    }
    if let Ok(sh) = ServerHello::parse(data) {
        assert!(sh.share.end <= data.len());
    }
    // Records sealed from the input's pieces open to the same pieces.
    let mut w = TrafficKey::new(Suite::Aes128Gcm, &[3u8; 32]);
    let mut r = TrafficKey::new(Suite::Aes128Gcm, &[3u8; 32]);
    let mut sealed = Vec::new();
    let pieces: Vec<&[u8]> = data.chunks(700).collect();
    for p in &pieces {
        record::seal(&mut w, record::APPLICATION_DATA, p, p.first().copied().unwrap_or(0) as usize, &mut sealed);
    }
    let mut at = 0;
    for p in &pieces {
        let n = record::complete(&sealed[at..]).unwrap();
        let (ty, c) = record::open(&mut r, &mut sealed[at..at + n]).unwrap();
        assert_eq!((ty, &sealed[at + c.start..at + c.end]), (record::APPLICATION_DATA, *p));
        at += n;
    }
    // A stream fed the raw input, then the sealed records after a valid prefix.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        for feed in [data.to_vec(), sealed] {
            let (a, mut b) = tokio::io::duplex(1 << 20);
            let s = Suite::Aes128Gcm;
            let mut st = Tls13Stream::new(
                Box::new(a),
                &[],
                s,
                Direction::new(s, vec![3u8; 32]),
                Direction::new(s, vec![4u8; 32]),
            );
            b.write_all(&feed).await.unwrap();
            drop(b);
            let mut out = Vec::new();
            let r = tokio::time::timeout(std::time::Duration::from_secs(5), st.read_to_end(&mut out)).await;
            assert!(r.is_ok(), "a stream fed {} bytes hung", feed.len());
        }
    });
});
