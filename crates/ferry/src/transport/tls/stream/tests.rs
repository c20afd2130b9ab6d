//! The bytes a TLS stream holds, its refusals, and the handover to Ferry's record layer.

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::{ClientConnection, ServerConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::transport::tls::{
    generate_self_signed, CertSource, CertificateEntry, TlsSettings, Usage,
};

fn settings() -> (TlsSettings, TlsSettings) {
    let g = generate_self_signed(&["t.test".into()], 1).unwrap();
    let entry = CertificateEntry::load(
        CertSource::Inline {
            cert: g.cert_pem,
            key: Some(g.key_pem),
        },
        Usage::Encipherment,
        true,
    )
    .unwrap();
    let server = TlsSettings {
        certificates: vec![Arc::new(entry)],
        ..Default::default()
    };
    let client = TlsSettings {
        pins: vec![g.pin],
        ..Default::default()
    };
    (server, client)
}

/// A server `TlsStream` over a pipe whose other end the test drives with a bare rustls
/// client, so it sees every ciphertext byte.
async fn handshaken() -> (TlsStream<ServerConnection>, ClientConnection, DuplexStream) {
    handshaken_with(settings(), None).await
}

/// As [`handshaken`], with given settings; `with_finished` goes out as application data in
/// the same write as the client's Finished.
async fn handshaken_with(
    (s, c): (TlsSettings, TlsSettings),
    with_finished: Option<&[u8]>,
) -> (TlsStream<ServerConnection>, ClientConnection, DuplexStream) {
    let (ours, mut theirs) = tokio::io::duplex(1 << 20);
    let conn = ServerConnection::new(Arc::new(s.server_config().unwrap())).unwrap();
    let server = tokio::spawn(async move {
        let mut t = TlsStream::new(Box::new(ours), conn, true);
        t.handshake().await.unwrap();
        t
    });
    let name = rustls::pki_types::ServerName::try_from("t.test").unwrap();
    let mut client = ClientConnection::new(Arc::new(c.client_config().unwrap()), name).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut extra = with_finished;
    loop {
        if !client.is_handshaking() {
            if let Some(data) = extra.take() {
                client.writer().write_all(data).unwrap();
            }
        }
        let mut out = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut out).unwrap();
        }
        if !out.is_empty() {
            theirs.write_all(&out).await.unwrap();
        }
        if !client.is_handshaking() {
            break;
        }
        let n = theirs.read(&mut buf).await.unwrap();
        client.read_tls(&mut &buf[..n]).unwrap();
        client.process_new_packets().unwrap();
    }
    (server.await.unwrap(), client, theirs)
}

/// One application-data record as the client puts it on the wire.
fn record(client: &mut ClientConnection, data: &[u8]) -> Vec<u8> {
    client.writer().write_all(data).unwrap();
    let mut out = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut out).unwrap();
    }
    out
}

#[tokio::test]
async fn the_bytes_held_are_known_exactly_at_any_point() {
    let (mut server, mut client, mut wire) = handshaken().await;
    let r1 = record(&mut client, &[1u8; 1000]);
    let r2 = record(&mut client, &[2u8; 1000]);
    let r3 = record(&mut client, &[3u8; 1000]);
    assert!(r1.len() > 1000 && r2.len() > 1000);
    // Record 1 whole and the first half of record 2 arrive.
    let half = r2.len() / 2;
    wire.write_all(&r1).await.unwrap();
    wire.write_all(&r2[..half]).await.unwrap();
    let mut got = [0u8; 400];
    server.read_exact(&mut got).await.unwrap();
    assert_eq!(got, [1u8; 400]);
    // Nudge the stream to pick up what is already on the pipe without reading plaintext.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let mut one = [0u8; 1];
    server.read_exact(&mut one).await.unwrap();
    // 599 bytes of record 1's plaintext wait to be read; record 2's first half is
    // ciphertext not yet decrypted (rustls was handed it as an incomplete record).
    assert_eq!(server.take_plaintext().unwrap(), vec![1u8; 599]);
    assert_eq!(server.ciphertext_held(), &r2[..half]);
    assert!(!server.write_pending());
    // The rest arrives: what was held decrypts in order, nothing lost or repeated.
    wire.write_all(&r2[half..]).await.unwrap();
    wire.write_all(&r3).await.unwrap();
    let mut rest = vec![0u8; 2000];
    server.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest[..1000], &[2u8; 1000][..]);
    assert_eq!(&rest[1000..], &[3u8; 1000][..]);
    assert!(server.ciphertext_held().is_empty());
}

#[tokio::test]
async fn a_non_tls_first_flight_is_refused_unanswered() {
    let (s, _) = settings();
    let (ours, mut theirs) = tokio::io::duplex(1 << 16);
    let conn = ServerConnection::new(Arc::new(s.server_config().unwrap())).unwrap();
    let mut t = TlsStream::new(Box::new(ours), conn, true);
    theirs.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let e = t.handshake().await.unwrap_err();
    assert!(e.get_ref().is_some_and(|e| e.is::<NotTls>()), "{e}");
    drop(t);
    let mut answer = Vec::new();
    theirs.read_to_end(&mut answer).await.unwrap();
    assert!(answer.is_empty(), "answered {answer:?}");
}

#[tokio::test]
async fn a_record_longer_than_tls_allows_fails_the_connection() {
    let (mut server, _client, mut wire) = handshaken().await;
    // Application-data header announcing 30000 bytes (TLS allows 2^14 + 2048).
    let mut bad = vec![23u8, 3, 3, 0x75, 0x30];
    bad.resize(5 + 30000, 0);
    wire.write_all(&bad).await.unwrap();
    let mut b = [0u8; 16];
    assert!(server.read(&mut b).await.is_err());
}

/// Decrypts what the server wrote until `n` plaintext bytes came.
async fn client_reads(client: &mut ClientConnection, wire: &mut DuplexStream, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while got.len() < n {
        let k = wire.read(&mut buf).await.unwrap();
        assert!(k > 0, "server closed after {} bytes", got.len());
        let mut left = &buf[..k];
        while !left.is_empty() {
            client.read_tls(&mut left).unwrap();
            client.process_new_packets().unwrap();
            let _ = client.reader().read_to_end(&mut got);
        }
    }
    got
}

#[tokio::test]
async fn tls13_goes_on_in_ferrys_record_layer_with_nothing_lost() {
    let (server, mut client, mut wire) =
        handshaken_with(settings(), Some(b"sent with Finished")).await;
    // The first data came in the same read as the Finished: rustls decrypted it already.
    let mut own = match server.into_tls13().unwrap() {
        Ok(own) => own,
        Err(_) => panic!("a TLS 1.3 connection stayed with rustls"),
    };
    let mut b = vec![0u8; 18];
    own.read_exact(&mut b).await.unwrap();
    assert_eq!(b, b"sent with Finished");
    // Both ways, records of every size.
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31) as u8).collect();
    for chunk in data.chunks(20_000) {
        let rec = record(&mut client, chunk);
        wire.write_all(&rec).await.unwrap();
    }
    let mut got = vec![0u8; data.len()];
    own.read_exact(&mut got).await.unwrap();
    assert_eq!(got, data);
    own.write_all(&data).await.unwrap();
    own.flush().await.unwrap();
    assert_eq!(client_reads(&mut client, &mut wire, data.len()).await, data);
    // A KeyUpdate from rustls is followed (and answered before our next record).
    client.refresh_traffic_keys().unwrap();
    let rec = record(&mut client, b"after the update");
    wire.write_all(&rec).await.unwrap();
    let mut b = vec![0u8; 16];
    own.read_exact(&mut b).await.unwrap();
    assert_eq!(b, b"after the update");
    own.write_all(b"reply").await.unwrap();
    own.flush().await.unwrap();
    assert_eq!(client_reads(&mut client, &mut wire, 5).await, b"reply");
    // close_notify ends the stream; ours reaches rustls.
    client.send_close_notify();
    let mut out = Vec::new();
    client.write_tls(&mut out).unwrap();
    wire.write_all(&out).await.unwrap();
    let mut rest = Vec::new();
    own.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    own.shutdown().await.unwrap();
    let mut buf = vec![0u8; 4096];
    let k = wire.read(&mut buf).await.unwrap();
    client.read_tls(&mut &buf[..k]).unwrap();
    let st = client.process_new_packets().unwrap();
    assert!(st.peer_has_closed());
}

#[tokio::test]
async fn a_record_split_at_the_handover_is_read_whole() {
    let (mut server, mut client, mut wire) = handshaken().await;
    // Half a record arrives and is handed to rustls before the switch.
    let rec = record(&mut client, &[9u8; 3000]);
    wire.write_all(&rec[..1000]).await.unwrap();
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(std::time::Duration::from_millis(50), server.read(&mut b));
    assert!(r.await.is_err(), "half a record yielded plaintext");
    let mut own = match server.into_tls13().unwrap() {
        Ok(own) => own,
        Err(_) => panic!("stayed with rustls"),
    };
    wire.write_all(&rec[1000..]).await.unwrap();
    let mut got = vec![0u8; 3000];
    own.read_exact(&mut got).await.unwrap();
    assert_eq!(got, vec![9u8; 3000]);
}

#[tokio::test]
async fn tls12_and_resumption_clients_stay_with_rustls() {
    let (mut s, c) = settings();
    s.max_version = Some(crate::transport::tls::Version::Tls12);
    let (server, _client, _wire) = handshaken_with((s, c), None).await;
    assert!(server.into_tls13().unwrap().is_err());
    let (_, mut c) = settings();
    c.session_resumption = true;
    assert!(!c
        .client_config()
        .unwrap()
        .key_log
        .will_log("CLIENT_TRAFFIC_SECRET_0"));
}
