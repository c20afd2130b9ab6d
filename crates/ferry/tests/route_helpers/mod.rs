//! Shared by the routing scenario tests: generated geodata files, tagged sinks that say who
//! they are and record what they got, a SOCKS5 client that can choose its source address, and
//! a TLS ClientHello builder.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry::app::router::geodata::wire::{encode_geoip, encode_geosite, Cidr, Domain, DomainType};

use crate::common::{tempdir, Proc};

fn d(kind: DomainType, value: &'static str, attrs: &[&'static str]) -> Domain<'static> {
    Domain {
        kind,
        value,
        attrs: attrs.to_vec(),
    }
}

fn v4(s: &str, len: u8) -> Cidr {
    Cidr::V4(u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()), len)
}

fn v6(s: &str, len: u8) -> Cidr {
    Cidr::V6(u128::from(s.parse::<std::net::Ipv6Addr>().unwrap()), len)
}

/// Writes `geoip.dat`, `geosite.dat` and `custom.dat` (V2Ray's format, uppercase codes sorted as
/// the generators write them) into `dir`.
pub fn write_geodata(dir: &Path) {
    use DomainType::*;
    let geoip = encode_geoip(&[
        (
            "CN",
            &[
                v4("1.0.1.0", 24),
                v4("36.0.0.0", 8),
                v4("101.64.0.0", 10),
                v6("240e::", 20),
            ],
        ),
        (
            "PRIVATE",
            &[
                v4("10.0.0.0", 8),
                v4("172.16.0.0", 12),
                v4("192.168.0.0", 16),
                v4("127.0.0.0", 8),
                v6("fc00::", 7),
                v6("::1", 128),
            ],
        ),
        (
            "US",
            &[v4("8.8.8.0", 24), v4("3.0.0.0", 8), v6("2001:4860::", 32)],
        ),
        // IPv4 only: a negated tag without ranges of a family (routing_xray's negations).
        ("YY", &[v4("9.9.9.0", 24)]),
    ]);
    std::fs::write(dir.join("geoip.dat"), geoip).unwrap();
    let cn = [
        d(Domain, "cn", &[]),
        d(Domain, "baidu.com", &[]),
        d(Full, "qq.com", &["!cn"]),
        d(Domain, "taobao.com", &["ads"]),
        d(Substr, "alibaba", &[]),
        d(Regex, "^cdn[0-9]+\\.example\\.net$", &[]),
    ];
    let google = [
        d(Domain, "google.com", &[]),
        d(Full, "ads.google.com", &["ads"]),
        d(Domain, "doubleclick.net", &["ads", "cn"]),
        d(Domain, "youtube.com", &[]),
    ];
    let ads = [
        d(Domain, "ads.example", &[]),
        d(Substr, "tracker", &[]),
        d(Full, "pixel.example.org", &[]),
    ];
    let site = encode_geosite(&[("CATEGORY-ADS-ALL", &ads), ("CN", &cn), ("GOOGLE", &google)]);
    std::fs::write(dir.join("geosite.dat"), site).unwrap();
    let mut custom = encode_geoip(&[("OFFICE", &[v4("127.0.0.64", 26)])]);
    custom.extend(encode_geosite(&[(
        "WORK",
        &[
            d(Full, "intra.example", &[]),
            d(Domain, "corp.example", &[]),
        ],
    )]));
    std::fs::write(dir.join("custom.dat"), custom).unwrap();
}

/// A tagged TCP sink: says its name and a newline, then records what the client sends.
pub struct Sink {
    pub name: String,
    pub port: u16,
    pub got: Arc<Mutex<Vec<Vec<u8>>>>,
}

pub fn sink(name: &str) -> Sink {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let (g, n) = (got.clone(), name.to_string());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let (g, n) = (g.clone(), n.clone());
            std::thread::spawn(move || {
                let _ = s.write_all(format!("{n}\n").as_bytes());
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut all = Vec::new();
                let _ = s.read_to_end(&mut all);
                g.lock().unwrap().push(all);
            });
        }
    });
    Sink {
        name: name.to_string(),
        port,
        got,
    }
}

/// A tagged UDP sink: answers each datagram with its name, and records it.
pub struct UdpSink {
    pub name: String,
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Vec<u8>>>>,
}

pub fn udp_sink(name: &str) -> UdpSink {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let (g, n) = (got.clone(), name.to_string());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((k, from)) = s.recv_from(&mut buf) {
            g.lock().unwrap().push(buf[..k].to_vec());
            let _ = s.send_to(n.as_bytes(), from);
        }
    });
    UdpSink {
        name: name.to_string(),
        addr,
        got,
    }
}

/// A freedom outbound that sends everything to `port` (whatever the destination); its
/// `finalRules` allow the loopback sink, as a proxy user's session needs.
pub fn to_sink(tag: &str, port: u16) -> String {
    format!(
        r#"{{"tag":"{tag}","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{port}",
            "finalRules":[{{"action":"allow","ip":["127.0.0.0/8"]}}]}}}}"#
    )
}

/// SOCKS5 CONNECT from `source` (an address on the loopback) to `host:port` (an IP literal
/// goes as an address); then writes `payload` and returns the first line the far end says.
pub fn socks_line(
    proxy: u16,
    source: &str,
    host: &str,
    port: u16,
    payload: &[u8],
) -> std::io::Result<String> {
    use socket2::{Domain as D, Protocol, SockAddr, Socket, Type};
    let sock = Socket::new(D::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    let src: SocketAddr = format!("{source}:0").parse().unwrap();
    sock.bind(&SockAddr::from(src))?;
    let to: SocketAddr = format!("127.0.0.1:{proxy}").parse().unwrap();
    sock.connect_timeout(&SockAddr::from(to), Duration::from_secs(5))?;
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(&[5, 1, 0])?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r)?;
    let mut req = vec![5, 1, 0];
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => {
            req.push(1);
            req.extend_from_slice(&a.octets());
        }
        Ok(std::net::IpAddr::V6(a)) => {
            req.push(4);
            req.extend_from_slice(&a.octets());
        }
        Err(_) => {
            req.push(3);
            req.push(host.len() as u8);
            req.extend_from_slice(host.as_bytes());
        }
    }
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req)?;
    let mut h = [0u8; 4];
    s.read_exact(&mut h)?;
    let rest = match h[3] {
        1 => 6,
        4 => 18,
        3 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l)?;
            usize::from(l[0]) + 2
        }
        _ => return Err(std::io::Error::other("bad reply")),
    };
    let mut skip = vec![0u8; rest];
    s.read_exact(&mut skip)?;
    if h[1] != 0 {
        return Err(std::io::Error::other(format!("reply {}", h[1])));
    }
    s.write_all(payload)?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => line.push(b[0]),
            Err(e) => return Err(e),
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// A TLS 1.2-framed ClientHello record naming `sni` (and offering h2).
pub fn client_hello(sni: &str) -> Vec<u8> {
    let mut ext = Vec::new();
    let n = sni.len();
    ext.extend_from_slice(&[0, 0]);
    ext.extend_from_slice(&((n + 5) as u16).to_be_bytes());
    ext.extend_from_slice(&((n + 3) as u16).to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&(n as u16).to_be_bytes());
    ext.extend_from_slice(sni.as_bytes());
    ext.extend_from_slice(&[0, 16, 0, 5, 0, 3, 2, b'h', b'2']);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]);
    body.push(32);
    body.extend_from_slice(&[9u8; 32]);
    body.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// Starts a program with a config file and extra environment variables.
pub fn spawn_env(
    bin: &Path,
    name: &str,
    config: &str,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Proc {
    let dir = tempdir::Dir::new(name);
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, config).unwrap();
    let out = std::fs::File::create(dir.path().join("out.log")).unwrap();
    let err = std::fs::File::create(dir.path().join("err.log")).unwrap();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{config}", cfg.to_str().unwrap()))
        .collect();
    let mut c = std::process::Command::new(bin);
    c.args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    Proc {
        child,
        name: name.to_string(),
        dir,
    }
}

/// `ferry run` with its assets in `assets`, waiting for `ports`.
pub fn ferry_with_assets(config: &str, assets: &Path, ports: &[u16]) -> Proc {
    let p = spawn_env(
        Path::new(env!("CARGO_BIN_EXE_ferry")),
        "ferry",
        config,
        &["run", "-c", "{config}"],
        &[("XRAY_LOCATION_ASSET", assets)],
    );
    for port in ports {
        crate::common::wait_listening(*port, &p);
    }
    p
}
