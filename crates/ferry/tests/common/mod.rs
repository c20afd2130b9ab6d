//! Shared helpers for scenario tests: start the real `ferry` binary with a config, find free
//! loopback ports, run echo servers, and locate peer binaries (a missing peer fails the test).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (also free for UDP at the time of asking).
///
/// Taken below Linux's ephemeral range (32768-60999): a port from that range, free when asked,
/// can become the local port of any outgoing connection of a test running alongside before
/// its server binds it ("address already in use"). Each test process walks its own slice of
/// 12000-31999 (by pid), one port after another, so threads of one process never get the same.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 12000;
    const SPAN: u32 = 20000;
    let start = (std::process::id() % 100) * (SPAN / 100);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = (LOW + (start + n) % SPAN) as u16;
        let tcp = TcpListener::bind(("127.0.0.1", p));
        if tcp.is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

/// The folder scripts/peers.sh installs into.
pub fn peers_dir() -> PathBuf {
    if let Ok(p) = std::env::var("FERRY_PEERS") {
        return PathBuf::from(p);
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cache")
        });
    cache.join("ferry/peers/bin")
}

/// Path of a peer binary; panics (fails the test) when it is not installed.
pub fn peer(name: &str) -> PathBuf {
    let p = peers_dir().join(name);
    assert!(
        p.exists(),
        "peer {name} is not installed at {}: run scripts/peers.sh",
        p.display()
    );
    p
}

/// A child process killed on drop.
pub struct Proc {
    pub child: Child,
    pub name: String,
    pub dir: tempdir::Dir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Everything the process wrote to stdout and stderr so far (for assertion messages).
    pub fn output(&self) -> String {
        let out = std::fs::read_to_string(self.dir.path().join("out.log")).unwrap_or_default();
        let err = std::fs::read_to_string(self.dir.path().join("err.log")).unwrap_or_default();
        format!(
            "--- {} stdout\n{out}--- {} stderr\n{err}",
            self.name, self.name
        )
    }

    /// Waits for the process to exit, failing the test if it has not within `within` of `since`.
    pub fn wait_exit(&mut self, since: Instant, within: Duration) -> std::process::ExitStatus {
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(since.elapsed() < within, "did not exit\n{}", self.output());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a signal (e.g. libc::SIGTERM).
    pub fn signal(&self, sig: i32) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status();
    }
}

pub mod tempdir {
    use std::path::{Path, PathBuf};
    /// A temporary folder removed on drop.
    pub struct Dir(PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p =
                std::env::temp_dir().join(format!("ferry-test-{}-{tag}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Starts a program with a config file written to a temp folder; `args` may contain `{config}`.
pub fn spawn_with_config(bin: &std::path::Path, name: &str, config: &str, args: &[&str]) -> Proc {
    let dir = tempdir::Dir::new(name);
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, config).unwrap();
    let out = std::fs::File::create(dir.path().join("out.log")).unwrap();
    let err = std::fs::File::create(dir.path().join("err.log")).unwrap();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{config}", cfg.to_str().unwrap()))
        .collect();
    // Every process of a test runs on loopback, where Ferry copies rather than splices by
    // default (a local peer's pages): the tests check the splice paths, so they ask for them.
    let child = Command::new(bin)
        .args(&args)
        .env("FERRY_SPLICE_LOCAL", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    Proc {
        child,
        name: name.to_string(),
        dir,
    }
}

/// Starts `ferry run -c CONFIG` and waits until every port in `wait_tcp` accepts connections.
pub fn ferry(config: &str, wait_tcp: &[u16]) -> Proc {
    let p = spawn_with_config(
        std::path::Path::new(env!("CARGO_BIN_EXE_ferry")),
        "ferry",
        config,
        &["run", "-c", "{config}"],
    );
    for port in wait_tcp {
        wait_listening(*port, &p);
    }
    p
}

/// Whether some socket listens on TCP `port`, read from /proc/net/tcp{,6} so that checking
/// does not open a connection (a probe connection would become a real proxied session, reach
/// the test's target server, and show up in access logs and stats). `None` without /proc.
fn listening_in_proc(port: u16) -> Option<bool> {
    let mut seen = false;
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(t) = std::fs::read_to_string(f) else {
            continue;
        };
        seen = true;
        for line in t.lines().skip(1) {
            let mut cols = line.split_whitespace();
            let (Some(local), Some(_remote), Some(state)) = (cols.nth(1), cols.next(), cols.next())
            else {
                continue;
            };
            let p = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if state == "0A" && p == Some(port) {
                return Some(true);
            }
        }
    }
    seen.then_some(false)
}

/// Waits until `port` refuses connections (its listener stopped), failing the test if it still
/// accepts `within` after `since`.
pub fn wait_refused(port: u16, since: std::time::Instant, within: Duration, p: &Proc) {
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            since.elapsed() < within,
            "still accepting on {port}\n{}",
            p.output()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (up to 20 s) until 127.0.0.1:port listens for TCP connections (without connecting
/// when /proc is there).
pub fn wait_listening(port: u16, p: &Proc) {
    let t = Instant::now();
    while !listening(port) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "port {port} never listened\n{}",
            p.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether something listens on TCP `port` of loopback: read from /proc without connecting
/// (a probe connection to a REALITY server reaches its target), by connecting without /proc.
pub fn listening(port: u16) -> bool {
    listening_in_proc(port).unwrap_or_else(|| TcpStream::connect(("127.0.0.1", port)).is_ok())
}

/// Waits (up to 20 s) until `p` listens on every port in `ports`, failing at once with its
/// output when it exits first (e.g. on a config it refuses).
pub fn up(mut p: Proc, ports: &[u16]) -> Proc {
    let t = Instant::now();
    for &port in ports {
        while !listening(port) {
            if let Some(st) = p.child.try_wait().unwrap() {
                panic!(
                    "{} exited ({st}) before listening on {port}\n{}",
                    p.name,
                    p.output()
                );
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{} never listened on {port}\n{}",
                p.name,
                p.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    p
}

/// What an nginx of a test serves.
pub enum Nginx<'a> {
    /// `http { ... }` around these directives and `server` blocks (access log and temp files
    /// in the prefix, `default_type text/plain`).
    Http(&'a str),
    /// `stream { ... }` around these `server` blocks (the stream module loaded).
    Stream(&'a str),
}

/// Starts nginx from the peers' cache with `dir` as its prefix (config, pid, error and access
/// logs, temp files), in the foreground as one process (`master_process off`: the kill on drop
/// ends it, where a master killed with SIGKILL would leave its worker running), and waits until
/// it listens on every port in `ports`.
pub fn nginx(dir: &std::path::Path, what: Nginx<'_>, ports: &[u16]) -> Proc {
    let d = dir.display();
    let (module, block) = match what {
        Nginx::Http(body) => (
            "",
            format!(
                "http {{\n    access_log {d}/access.log;\n    client_body_temp_path {d}/t-body;\n    \
                 proxy_temp_path {d}/t-proxy;\n    fastcgi_temp_path {d}/t-fastcgi;\n    \
                 uwsgi_temp_path {d}/t-uwsgi;\n    scgi_temp_path {d}/t-scgi;\n    \
                 default_type text/plain;\n{body}\n}}\n"
            ),
        ),
        Nginx::Stream(body) => (
            "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n",
            format!("stream {{\n{body}\n}}\n"),
        ),
    };
    let conf = format!(
        "{module}user root;\nmaster_process off;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log info;\nevents {{ worker_connections 512; }}\n{block}"
    );
    let p = spawn_with_config(
        &peer("nginx"),
        "nginx",
        &conf,
        &[
            "-p",
            dir.to_str().unwrap(),
            "-c",
            "{config}",
            "-g",
            "daemon off;",
        ],
    );
    up(p, ports)
}

/// The `http {}` body of a TLS website as the REALITY tests' targets are: `page` over TLS 1.2 and
/// 1.3 (h2 or HTTP/1.1) for `sni` on loopback `port`; a connection that sends no request (a
/// post-handshake probe) is dropped after 2 s instead of nginx's 60.
pub fn tls_site(
    port: u16,
    sni: &str,
    cert: &std::path::Path,
    key: &std::path::Path,
    page: &str,
) -> String {
    format!(
        r#"    client_header_timeout 2s;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        server_name {sni};
        ssl_certificate {};
        ssl_certificate_key {};
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {{ return 200 "{page}\n"; }}
    }}"#,
        cert.display(),
        key.display()
    )
}

/// nginx's error and access logs from its prefix `dir`, for a failing test's message.
pub fn nginx_logs(dir: &std::path::Path) -> String {
    let err = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
    let acc = std::fs::read_to_string(dir.join("access.log")).unwrap_or_default();
    format!("--- nginx error.log\n{err}--- nginx access.log\n{acc}")
}

/// A TCP echo server on a free port; runs until the test process ends.
pub fn echo_server() -> SocketAddr {
    echo_server_greeting(b"")
}

/// An echo server that first greets each connection with `hello` (tells servers apart).
pub fn echo_server_greeting(hello: &'static [u8]) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                if s.write_all(hello).is_err() {
                    return;
                }
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            let _ = s.shutdown(std::net::Shutdown::Write);
                            return;
                        }
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Sends `msg` from `u` to `to` and returns the first datagram back that `stale` does not take
/// for a late answer to an earlier message; resends after each read timeout of `u`, `tries`
/// sends in all, then `None`. A resend can bring two answers back, and the late one of
/// datagram i must not be read as the answer to datagram i + 1.
pub fn udp_ask(
    u: &UdpSocket,
    to: SocketAddr,
    msg: &[u8],
    tries: usize,
    stale: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 65536];
    for _ in 0..tries {
        u.send_to(msg, to).unwrap();
        while let Ok((n, _)) = u.recv_from(&mut buf) {
            if !stale(&buf[..n]) {
                return Some(buf[..n].to_vec());
            }
        }
    }
    None
}

/// A UDP echo server on a free port.
pub fn udp_echo_server() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    addr
}

/// Deterministic pseudo-random bytes (xorshift), so a mismatch shows where it happened.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Writes `data` on one thread while reading the same length back on this one; returns what came back.
pub fn echo_through(s: TcpStream, data: &[u8]) -> Vec<u8> {
    try_echo_through(s, data).unwrap()
}

/// [`echo_through`], with the error of the read or the write instead of a panic, so the caller
/// can print the proxies' logs beside it.
pub fn try_echo_through(mut s: TcpStream, data: &[u8]) -> std::io::Result<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut w = s.try_clone()?;
    let out = data.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&out));
    let mut got = vec![0u8; data.len()];
    let read = s.read_exact(&mut got);
    let wrote = writer.join().expect("the writer thread panicked");
    read.map_err(|e| std::io::Error::new(e.kind(), format!("reading the echo: {e}")))?;
    wrote.map_err(|e| std::io::Error::new(e.kind(), format!("writing: {e}")))?;
    Ok(got)
}

/// A TCP echo server on a free port, on the test's tokio runtime (in-process tests).
pub async fn echo_server_async() -> SocketAddr {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// A Ferry instance in this process, started from a JSON config.
pub async fn start_instance(v: serde_json::Value) -> ferry::app::instance::Instance {
    let cfg =
        ferry::config::Config::from_value(&v, &ferry::config::Diagnostics::default()).unwrap();
    ferry::app::api::start_instance(cfg).await.unwrap()
}
