//! Active probing over TLS (beside probing.rs): what a prober sees of a Trojan+TLS server must
//! be what it sees of Xray's with the same certificate: the cipher suite its TLS server picks
//! for a ClientHello, close_notify before the FIN when it closes a connection itself, and when
//! the client of a fallback is closed. (Xray holds a fallback's client `uplinkOnly`, 1 s, after
//! the fallback's end only when its writer cannot close: a raw TCP or REALITY client. Its TLS
//! connection is closed at once, with close_notify.)

use super::common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

const SNI: &str = "probe.test";
const PASSWORD: &str = "probe-pass-1234";
/// The handshake timeout both servers get (seconds).
const HANDSHAKE: u64 = 1;

/// A CA and a leaf for [`SNI`] it issued (ECDSA P-256), in files; the CA as rustls trusts it.
struct Pki {
    dir: tempdir::Dir,
    ca: rustls::pki_types::CertificateDer<'static>,
}

impl Pki {
    fn new() -> Pki {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "probe ca");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec![SNI.to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let dir = tempdir::Dir::new("probe-tls");
        std::fs::write(dir.path().join("c.pem"), leaf.pem()).unwrap();
        std::fs::write(dir.path().join("k.pem"), key.serialize_pem()).unwrap();
        Pki {
            dir,
            ca: ca.der().clone(),
        }
    }

    /// A Trojan+TLS inbound (Xray's spelling, read by both).
    fn inbound(&self, fallback: Option<u16>) -> String {
        let fb = fallback
            .map(|p| format!(r#","fallbacks":[{{"dest":{p}}}]"#))
            .unwrap_or_default();
        format!(
            r#""protocol":"trojan","settings":{{"clients":[{{"password":"{PASSWORD}"}}]{fb}}},
            "streamSettings":{{"security":"tls","tlsSettings":{{"certificates":[
              {{"certificateFile":"{}","keyFile":"{}"}}]}}}}"#,
            self.dir.path().join("c.pem").display(),
            self.dir.path().join("k.pem").display()
        )
    }
}

/// Ferry and Xray with the same inbound: (ferry port, xray port, processes).
fn servers(inbound: &str) -> (u16, u16, Vec<Proc>) {
    let (f, x) = (free_port(), free_port());
    let cfg = |port: u16, log: &str| {
        format!(
            r#"{{"log":{{"loglevel":"{log}"}},"policy":{{"levels":{{"0":{{"handshake":{HANDSHAKE}}}}}}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},{inbound}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
        )
    };
    let fe = ferry(&cfg(f, "debug"), &[f]);
    let xr = spawn_with_config(
        &peer("xray"),
        "xray",
        &cfg(x, "warning"),
        &["run", "-c", "{config}"],
    );
    wait_listening(x, &xr);
    (f, x, vec![fe, xr])
}

/// The suite `openssl s_client` negotiated with these arguments.
fn negotiated(port: u16, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", SNI])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (scripts/peers.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    // "New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"
    text.lines()
        .find_map(|l| l.trim().strip_prefix("New, "))
        .and_then(|l| l.split("Cipher is ").nth(1))
        .unwrap_or("(none)")
        .trim()
        .to_string()
}

#[test]
fn the_cipher_suite_chosen_is_xrays() {
    let pki = Pki::new();
    let (f, x, procs) = servers(&pki.inbound(None));
    let cases: &[(&str, &[&str])] = &[
        // OpenSSL's default order: AES-256 first.
        ("TLS 1.3 default", &["-tls1_3"]),
        (
            "TLS 1.3 AES-128 last",
            &["-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256"],
        ),
        // A client without AES hardware: ChaCha20 first.
        (
            "TLS 1.3 ChaCha20 first",
            &[
                "-tls1_3",
                "-ciphersuites",
                "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256",
            ],
        ),
        (
            "TLS 1.2 AES-256 first",
            &[
                "-tls1_2",
                "-cipher",
                "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256",
            ],
        ),
        (
            "TLS 1.2 ChaCha20 first",
            &[
                "-tls1_2",
                "-cipher",
                "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256",
            ],
        ),
    ];
    let mut table = String::new();
    let mut diffs = Vec::new();
    for (name, args) in cases {
        let (a, b) = (negotiated(f, args), negotiated(x, args));
        table.push_str(&format!("{name:<26} ferry {a:<32} xray {b}\n"));
        if a != b || a == "(none)" {
            diffs.push(*name);
        }
    }
    eprintln!("{table}");
    assert!(
        diffs.is_empty(),
        "{diffs:?}\n{table}\n{}",
        procs[0].output()
    );
    // The default ClientHello gets AES-128 (this machine has AES hardware, as Go checks).
    assert!(table.contains("ferry TLS_AES_128_GCM_SHA256"), "{table}");
}

/// A TLS client trusting the test CA, connected and handshaken.
fn tls_client(port: u16, ca: &rustls::pki_types::CertificateDer<'static>) -> Client {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), SNI.try_into().unwrap()).unwrap();
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    Client { conn, tcp }
}

struct Client {
    conn: rustls::ClientConnection,
    tcp: TcpStream,
}

/// How the server ended a connection, as the client saw it.
#[derive(Debug)]
struct End {
    /// Plaintext received.
    data: Vec<u8>,
    /// When the first plaintext came (since the send).
    first: Option<Duration>,
    /// A close_notify came before the socket closed.
    close_notify: bool,
    /// The socket closed with a FIN (not a reset) ...
    fin: bool,
    /// ... this long after the send.
    at: Duration,
}

impl Client {
    fn send(&mut self, data: &[u8]) {
        self.conn.writer().write_all(data).unwrap();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.tcp).unwrap();
        }
    }

    /// Reads until the server closes the socket (at most 5 s).
    fn watch(mut self) -> End {
        let t0 = Instant::now();
        let mut end = End {
            data: Vec::new(),
            first: None,
            close_notify: false,
            fin: false,
            at: Duration::ZERO,
        };
        let mut buf = vec![0u8; 65536];
        loop {
            match self.tcp.read(&mut buf) {
                Ok(0) => {
                    end.fin = true;
                    break;
                }
                Ok(n) => {
                    let mut rd = &buf[..n];
                    while !rd.is_empty() {
                        self.conn.read_tls(&mut rd).unwrap();
                        let st = self.conn.process_new_packets().unwrap();
                        end.close_notify |= st.peer_has_closed();
                        let before = end.data.len();
                        let _ = self.conn.reader().read_to_end(&mut end.data);
                        if end.data.len() > before && end.first.is_none() {
                            end.first = Some(t0.elapsed());
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        end.at = t0.elapsed();
        end
    }
}

/// SHA-224 of the password in hex: a Trojan request's first 56 bytes.
fn trojan_hash() -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA224, PASSWORD.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_trojan_request_that_stops_short_gets_close_notify_then_fin() {
    let pki = Pki::new();
    let (f, x, procs) = servers(&pki.inbound(None));
    // The hash, CRLF, CONNECT, a domain address cut short: both wait for the rest until the
    // handshake timeout, then close.
    let mut req = trojan_hash().into_bytes();
    req.extend_from_slice(b"\r\n\x01\x03\x0aexam");
    let ends: Vec<End> = [f, x]
        .into_iter()
        .map(|port| {
            let mut c = tls_client(port, &pki.ca);
            c.send(&req);
            c.watch()
        })
        .collect();
    for (who, e) in ["ferry", "xray"].iter().zip(&ends) {
        assert!(
            e.close_notify && e.fin && e.data.is_empty(),
            "{who}: {e:?}\n{}",
            procs[0].output()
        );
        let hs = Duration::from_secs(HANDSHAKE);
        assert!(
            e.at >= hs.mul_f64(0.8) && e.at < hs * 3,
            "{who} closed at {:?}",
            e.at
        );
    }
}

/// A fallback target that answers the first bytes it reads and closes.
pub(super) fn answer_and_close() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                let _ = c.read(&mut b);
                let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            });
        }
    });
    port
}

#[test]
fn a_tls_fallback_s_client_is_closed_with_the_fallback() {
    let pki = Pki::new();
    let target = answer_and_close();
    let (f, x, procs) = servers(&pki.inbound(Some(target)));
    let ends: Vec<End> = [f, x]
        .into_iter()
        .map(|port| {
            let mut c = tls_client(port, &pki.ca);
            c.send(b"GET / HTTP/1.1\r\nHost: probe.test\r\n\r\n");
            c.watch()
        })
        .collect();
    let mut seen = Vec::new();
    for (who, e) in ["ferry", "xray"].iter().zip(&ends) {
        assert!(
            e.data.starts_with(b"HTTP/1.1 400"),
            "{who}: {e:?}\n{}",
            procs[0].output()
        );
        let open = e.at.saturating_sub(e.first.unwrap_or_default());
        seen.push((open < Duration::from_millis(500), e.close_notify, e.fin));
        eprintln!("{who}: closed {open:?} after the fallback's answer");
    }
    assert_eq!(seen[0], seen[1], "ferry vs xray: {ends:?}");
    assert_eq!(
        seen[0],
        (true, true, true),
        "at once, close_notify, FIN: {ends:?}"
    );
}
