//! The `ferry` command: run, test, version, uuid.

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::{Parser, Subcommand};

use ferry::app::instance::Instance;
use ferry::config::{self, Config, Diagnostics};

/// Used when `ferry run` gets no config: a SOCKS5+HTTP proxy on 127.0.0.1:1080 going direct.
const DEFAULT_CONFIG: &str = r#"{
  "log": {"loglevel": "warning"},
  "inbounds": [{"tag": "mixed-in", "listen": "127.0.0.1", "port": 1080, "protocol": "mixed",
                "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
  "outbounds": [{"tag": "direct", "protocol": "freedom"}]
}"#;

#[derive(Parser)]
#[command(
    name = "ferry",
    version,
    about = "A proxy core that reads Xray/V2Ray configs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run with one or more config files (`-c stdin:` reads standard input).
    Run {
        /// Config file; repeat to merge several. `stdin:` reads standard input.
        #[arg(short = 'c', long = "config")]
        config: Vec<String>,
        /// Only check the config and exit (Xray's `-test`).
        #[arg(short = 't', long = "test")]
        test: bool,
        /// Seconds to let live connections finish after SIGINT/SIGTERM.
        #[arg(long, default_value_t = 5)]
        grace: u64,
    },
    /// Check a config, print what would run, exit 0 (valid) or 1 (invalid).
    Test {
        #[arg(short = 'c', long = "config", required = true)]
        config: Vec<String>,
    },
    /// Print the version.
    Version,
    /// Share links: turn an `ss://`, `ssr://` or `vmess://` link into an outbound JSON object, or
    /// print the links of a config (`-c`): `ss://` / `ssr://` for shadowsocks(r) inbound users,
    /// `vmess://` for VMess outbounds.
    Link {
        /// An `ss://`, `ssr://` or `vmess://` link to turn into an outbound.
        link: Option<String>,
        /// Config whose shadowsocks and shadowsocksr inbounds' users get links.
        #[arg(short = 'c', long = "config")]
        config: Vec<String>,
        /// Host name clients use to reach the server (default: the inbound's listen address).
        #[arg(long)]
        host: Option<String>,
    },
    /// TLS helpers.
    Tls {
        #[command(subcommand)]
        cmd: TlsCmd,
    },
    /// geoip.dat / geosite.dat: list a file's tags (with their sizes and attributes), or the
    /// tags that hold an IP or a domain.
    Geodata {
        /// A path, or a file name looked up as Xray finds assets (XRAY_LOCATION_ASSET, next to
        /// the binary, /usr/local/share/xray, /usr/share/xray, /opt/share/xray).
        file: String,
        /// An IP or a domain to look up; without it, the tags are listed.
        query: Option<String>,
    },
    /// Print a new X25519 key pair for REALITY (`privateKey` for the server, `password` for
    /// clients), or the public half of `-i KEY`, as `xray x25519` prints them.
    X25519 {
        #[arg(short = 'i', long = "input")]
        input: Option<String>,
        /// Standard base64 with padding instead of base64url.
        #[arg(long = "std-encoding")]
        std_encoding: bool,
    },
    /// Print a new ML-DSA-65 seed for REALITY (`mldsa65Seed` for the server) and its public
    /// key (`mldsa65Verify` for clients), or those of `-i SEED`, as `xray mldsa65` prints them.
    Mldsa65 {
        #[arg(short = 'i', long = "input")]
        input: Option<String>,
    },
    /// Print a random UUID, or map a string to a UUID as Xray does (`-i STRING`).
    Uuid {
        #[arg(short = 'i', long = "input")]
        input: Option<String>,
    },
}

#[derive(Subcommand)]
enum TlsCmd {
    /// Write a self-signed certificate and key (quick starts, tests) and print the SHA-256 pin a
    /// client puts in `pinnedPeerCertSha256`. Without `--file`, prints the pair as the inline
    /// `certificates[]` entry of `tlsSettings` (JSON) and the pin on stderr.
    Cert {
        /// A DNS name or IP the certificate is for; repeat for several.
        #[arg(long = "domain", required = true)]
        domain: Vec<String>,
        /// Write PREFIX.crt and PREFIX.key instead of printing JSON.
        #[arg(long)]
        file: Option<String>,
        /// Days of validity.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
}

/// `ferry x25519`: the key pair with the private half clamped, the public half (REALITY's
/// `password`) and its BLAKE3 hash, in `xray x25519`'s three lines.
fn x25519_cmd(input: Option<&str>, std_encoding: bool) -> anyhow::Result<ExitCode> {
    use base64::Engine;
    let mut private = match input {
        Some(k) => ferry::config::reality::key32(k)
            .or_else(|| {
                let b = base64::engine::general_purpose::STANDARD
                    .decode(k.trim())
                    .ok()?;
                b.try_into().ok()
            })
            .ok_or_else(|| {
                anyhow::anyhow!("{k:?} is not a base64 X25519 private key of 32 bytes")
            })?,
        None => ferry::transport::reality::generate_x25519().0,
    };
    private[0] &= 248;
    private[31] &= 127;
    private[31] |= 64;
    let public = ferry::transport::reality::keys::x25519_public(&private);
    let enc = |b: &[u8]| match std_encoding {
        true => base64::engine::general_purpose::STANDARD.encode(b),
        false => ferry::config::reality::b64(b),
    };
    println!("PrivateKey: {}", enc(&private));
    println!("Password (PublicKey): {}", enc(&public));
    println!("Hash32: {}", enc(blake3::hash(&public).as_bytes()));
    Ok(ExitCode::SUCCESS)
}

/// `ferry mldsa65`: a seed (REALITY's `mldsa65Seed`) and its ML-DSA-65 public key
/// (`mldsa65Verify`), in `xray mldsa65`'s two lines.
fn mldsa65_cmd(input: Option<&str>) -> anyhow::Result<ExitCode> {
    let seed = match input {
        Some(k) => ferry::config::reality::key32(k)
            .ok_or_else(|| anyhow::anyhow!("{k:?} is not a base64url seed of 32 bytes"))?,
        None => {
            let mut s = [0u8; 32];
            ferry::common::rand::fill(&mut s);
            s
        }
    };
    let public = ferry::transport::reality::cert::mldsa65_public(&seed)
        .ok_or_else(|| anyhow::anyhow!("not a valid ML-DSA-65 seed"))?;
    println!("Seed: {}", ferry::config::reality::b64(&seed));
    println!("Verify: {}", ferry::config::reality::b64(&public));
    Ok(ExitCode::SUCCESS)
}

fn tls_cert(domains: &[String], file: Option<&str>, days: u32) -> Result<ExitCode> {
    use ferry::transport::tls;
    let c = tls::generate_self_signed(domains, days).map_err(|e| anyhow!("{e}"))?;
    let pin = tls::hex(&c.pin);
    match file {
        Some(prefix) => {
            let (crt, key) = (format!("{prefix}.crt"), format!("{prefix}.key"));
            std::fs::write(&crt, &c.cert_pem).with_context(|| format!("writing {crt}"))?;
            write_private(&key, &c.key_pem).with_context(|| format!("writing {key}"))?;
            eprintln!("wrote {crt} and {key}");
            println!("{pin}");
        }
        None => {
            let lines = |p: &str| -> Vec<serde_json::Value> {
                p.lines().map(serde_json::Value::from).collect()
            };
            let v =
                serde_json::json!({"certificate": lines(&c.cert_pem), "key": lines(&c.key_pem)});
            println!("{}", serde_json::to_string_pretty(&v)?);
            eprintln!("pinnedPeerCertSha256: {pin}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn geodata_cmd(file: &str, query: Option<&str>) -> Result<ExitCode> {
    use ferry::app::router::{geodata, Assets};
    let path = if std::path::Path::new(file).is_file() {
        std::path::PathBuf::from(file)
    } else {
        Assets::from_env().find(file).map_err(|e| anyhow!("{e}"))?
    };
    match query {
        None => {
            let tags = geodata::list(&path).map_err(|e| anyhow!("{e}"))?;
            for t in &tags {
                if t.attrs.is_empty() {
                    println!("{}\t{}", t.code, t.items);
                } else {
                    println!("{}\t{}\t@{}", t.code, t.items, t.attrs.join(" @"));
                }
            }
            eprintln!("{}: {} tags", path.display(), tags.len());
            Ok(ExitCode::SUCCESS)
        }
        Some(q) => {
            let hits = ferry::matchers::lookup::lookup(&path, q).map_err(|e| anyhow!("{e}"))?;
            for h in &hits {
                println!("{h}");
            }
            Ok(if hits.is_empty() {
                eprintln!("{q}: in no tag of {}", path.display());
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// Writes a file only its owner can read.
fn write_private(path: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// Accepts Xray's single-dash spellings (`-config`, `-test`, `-version`), and like Xray treats a
/// command line that starts with a flag (`ferry -c x.json`, `ferry -test -config x.json`) as `run`.
/// Whether this binary was started under Xray's name (a panel's `xray` or `xray-linux-amd64`).
fn invoked_as_xray() -> bool {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().to_ascii_lowercase())
        })
        .is_some_and(|n| n.starts_with("xray"))
}

fn normalize_args() -> Vec<String> {
    normalize(std::env::args().collect())
}

fn normalize(args: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = args
        .into_iter()
        .map(|a| match a.as_str() {
            "-config" => "--config".to_string(),
            "-test" => "--test".to_string(),
            "-version" => "version".to_string(),
            _ => a
                .strip_prefix("-config=")
                .map(|v| format!("--config={v}"))
                .unwrap_or(a),
        })
        .collect();
    let first_is_flag = out.get(1).is_some_and(|a| {
        a.starts_with('-') && !["-h", "--help", "-V", "--version"].contains(&a.as_str())
    });
    if first_is_flag {
        if out.iter().any(|a| a == "version") {
            return vec![out.swap_remove(0), "version".to_string()];
        }
        out.insert(1, "run".to_string());
    }
    out
}

fn read_source(src: &str) -> Result<(String, String)> {
    if src == "stdin:" || src == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading config from stdin")?;
        return Ok(("stdin".into(), s));
    }
    let lower = src.to_ascii_lowercase();
    if lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".toml") {
        return Err(anyhow!("{src}: only JSON configs are supported yet"));
    }
    let text = std::fs::read_to_string(src).with_context(|| format!("reading {src}"))?;
    Ok((src.to_string(), text))
}

/// Reads and merges the configs (the embedded default without any).
fn read_merged(sources: &[String]) -> Result<serde_json::Value> {
    let mut docs = Vec::new();
    if sources.is_empty() {
        docs.push((
            String::new(),
            config::json::parse(DEFAULT_CONFIG).map_err(|e| anyhow!("embedded config: {e}"))?,
        ));
    }
    for src in sources {
        let (name, text) = read_source(src)?;
        let doc = config::json::parse(&text).map_err(|e| anyhow!("{name}: {e}"))?;
        docs.push((name, doc));
    }
    Ok(config::merge_named(docs))
}

/// The names of the configs, for messages.
fn source_names(sources: &[String]) -> String {
    if sources.is_empty() {
        "the default config".to_string()
    } else {
        sources.join(", ")
    }
}

/// Reads, merges and validates the configs; prints warnings to stderr.
fn load(sources: &[String]) -> Result<(Config, serde_json::Value)> {
    let merged = read_merged(sources)?;
    let diag = Diagnostics::default();
    let cfg = Config::from_value(&merged, &diag);
    for w in diag.take() {
        eprintln!("warning: {w}");
    }
    cfg.map(|c| (c, merged))
        .map_err(|e| anyhow!("{}: {e}", source_names(sources)))
}

/// The parts of a config a reload does not change (the services bound at start, the log): the
/// top-level keys whose value differs between `old` and `new`.
fn restart_only_changes(old: &serde_json::Value, new: &serde_json::Value) -> Vec<&'static str> {
    ["log", "api", "metrics", "stats"]
        .into_iter()
        .filter(|k| old.get(k) != new.get(k))
        .collect()
}

/// SIGHUP: reads the configs again and switches the running instance to them (see
/// [`Instance::reload`]); a config that does not load leaves the running one as it is.
async fn reload(sources: &[String], inst: &mut Instance, running: &mut serde_json::Value) {
    if sources.iter().any(|s| s == "-" || s == "stdin:") {
        tracing::warn!(
            "SIGHUP: the config came from stdin, which cannot be read again; nothing reloaded"
        );
        return;
    }
    let names = source_names(sources);
    let merged = match read_merged(sources) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!("SIGHUP: {e:#}; still running the previous config");
            return;
        }
    };
    let diag = Diagnostics::default();
    let cfg = Config::from_value_reusing(&merged, &diag, &inst.reuse());
    for w in diag.take() {
        tracing::warn!("{names}: {w}");
    }
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("SIGHUP: {names}: {e}; still running the previous config");
            return;
        }
    };
    for k in restart_only_changes(running, &merged) {
        tracing::warn!(
            "SIGHUP: {k:?} changed; it takes effect at the next start (the running {k} stays)"
        );
    }
    let r = inst.reload(cfg).await;
    for (tag, e) in &r.failed {
        tracing::error!("SIGHUP: inbound {}: {e}", show_tag(tag));
    }
    tracing::warn!(
        "reloaded {names}: {} inbound(s) kept, {} replaced, {} added, {} removed, {} failed; outbounds, routing, dns and policy switched; {} connection(s) live",
        r.kept.len(),
        r.replaced.len(),
        r.added.len(),
        r.removed.len(),
        r.failed.len(),
        inst.live.count()
    );
    *running = merged;
}

fn describe(cfg: &Config) {
    for ib in &cfg.inbounds {
        let (ip, ports) = match &ib.listen {
            config::Listen::Ip(ip, ports) => (ip.to_string(), ports.clone()),
            config::Listen::Unix(p) => (p.text(), Vec::new()),
        };
        let ports: Vec<String> = ports
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        println!(
            "inbound  {:<16} {:<14} {}{}{}",
            show_tag(&ib.tag),
            ib.protocol,
            ip,
            if ports.is_empty() { "" } else { ":" },
            ports.join(",")
        );
    }
    for (i, ob) in cfg.outbounds.iter().enumerate() {
        println!(
            "outbound {:<16} {:<14}{}",
            show_tag(&ob.tag),
            ob.protocol,
            if i == 0 { " (default)" } else { "" }
        );
    }
    println!(
        "routing  {} rule(s); stats {}",
        cfg.router.rules.len(),
        if cfg.stats.is_some() { "on" } else { "off" }
    );
}

fn show_tag(t: &str) -> &str {
    if t.is_empty() {
        "(untagged)"
    } else {
        t
    }
}

/// What the process was asked to do.
enum Signal {
    /// SIGINT or SIGTERM.
    Stop,
    /// SIGHUP.
    Reload,
}

/// Waits for SIGINT, SIGTERM or SIGHUP.
async fn next_signal(
    term: &mut Option<tokio::signal::unix::Signal>,
    hup: &mut Option<tokio::signal::unix::Signal>,
) -> Signal {
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Signal::Stop,
        _ = recv(term) => Signal::Stop,
        _ = recv(hup) => Signal::Reload,
    }
}

fn run(sources: Vec<String>, test: bool, grace: u64) -> Result<ExitCode> {
    let (cfg, mut running) = match load(&sources) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if test {
        describe(&cfg);
        println!("Configuration OK.");
        return Ok(ExitCode::SUCCESS);
    }
    ferry::app::log::init(&cfg.log);
    match ferry::common::sys::raise_nofile_limit() {
        Ok(n) => tracing::debug!("open files limit: {n}"),
        Err(e) => tracing::warn!("open files limit: {e}"),
    }
    // The parse's garbage (JSON trees, geodata buffers) goes back before the inbounds listen.
    ferry::common::sys::release_free_heap();
    let used_default = sources.is_empty();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        // Installed before the start line, so a panel's SIGHUP right after it is not fatal.
        let mut term = signal(SignalKind::terminate()).ok();
        let mut hup = signal(SignalKind::hangup()).ok();
        let mut inst = match ferry::app::api::start_instance(cfg).await {
            Ok(i) => i,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        // What loading the config left behind goes back to the system (Xray: FreeOSMemory).
        ferry::common::sys::release_free_heap();
        // Xray's start line on stdout: panels that launch the core wait for a line that
        // contains "core" and ends in "started" (Marzban-node).
        println!(
            "{} [Warning] core: Ferry {} (Xray {} compatible) started",
            ferry::app::log::timestamp(),
            env!("CARGO_PKG_VERSION"),
            ferry::XRAY_COMPAT
        );
        for (tag, net, addr) in &inst.bound() {
            tracing::warn!("ferry {} started: {} {net} {addr}", env!("CARGO_PKG_VERSION"), show_tag(tag));
        }
        if used_default {
            eprintln!(
                "ferry: no config given; serving SOCKS5 and HTTP on 127.0.0.1:1080, direct.\n  \
                 try: curl -x socks5h://127.0.0.1:1080 http://example.com/   or   curl -x http://127.0.0.1:1080 ..."
            );
        }
        while let Signal::Reload = next_signal(&mut term, &mut hup).await {
            reload(&sources, &mut inst, &mut running).await;
        }
        tracing::warn!("stopping: no new connections; waiting up to {grace}s for {} live", inst.live.count());
        let left = inst.stop(Duration::from_secs(grace)).await;
        if left > 0 {
            tracing::warn!("{left} connection(s) still open after the grace period; closing");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `ferry link`: a `ss://`, `ssr://`, `vmess://`, `vless://` or `trojan://` link becomes an
/// outbound JSON object; with `-c`, prints `ss://` / `ssr://` / `vless://` / `trojan://` links
/// for the users of the config's shadowsocks, shadowsocksr, VLESS and Trojan inbounds (REALITY
/// or TLS included) and `vmess://` links for its VMess outbounds.
fn link_cmd(link: Option<String>, config: Vec<String>, host: Option<String>) -> Result<ExitCode> {
    use ferry::proxy::table;
    if let Some(l) = link {
        let out = table::parse_link(&l).map_err(|e| anyhow!("{e}"))?;
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    if config.is_empty() {
        return Err(anyhow!(
            "give an ss://, ssr://, vmess://, vless:// or trojan:// link, or -c CONFIG to print links"
        ));
    }
    let mut docs = Vec::new();
    for src in &config {
        let (name, text) = read_source(src)?;
        docs.push(config::json::parse(&text).map_err(|e| anyhow!("{name}: {e}"))?);
    }
    let merged = config::merge(docs);
    let mut n = 0;
    for ib in merged
        .get("inbounds")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
    {
        let proto = ib.get("protocol").and_then(|v| v.as_str()).unwrap_or("");
        let Some(links_for) = table::inbound(proto).and_then(|p| p.links.inbound) else {
            continue;
        };
        let port = ib
            .get("port")
            .and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| anyhow!("a {proto} inbound has no single port"))?;
        let listen = ib
            .get("listen")
            .and_then(|v| v.as_str())
            .unwrap_or("0.0.0.0");
        let h = host.clone().unwrap_or_else(|| listen.to_string());
        for (email, l) in links_for(ib, &h, port).map_err(|e| anyhow!("{e}"))? {
            let who = if email.is_empty() {
                "(no email)".to_string()
            } else {
                email
            };
            println!("{who}\t{l}");
            n += 1;
        }
    }
    for outbound_links in table::PROTOCOLS.iter().filter_map(|p| p.links.outbounds) {
        for l in outbound_links(&merged) {
            println!("{l}");
            n += 1;
        }
    }
    if n == 0 {
        return Err(anyhow!(
            "no shadowsocks/shadowsocksr/vless/trojan inbound users or vmess outbounds in the config"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(normalize_args());
    let res = match cli.cmd {
        None => run(Vec::new(), false, 5),
        Some(Cmd::Run {
            config,
            test,
            grace,
        }) => run(config, test, grace),
        Some(Cmd::Test { config }) => run(config, true, 0),
        Some(Cmd::Version) => {
            if invoked_as_xray() {
                // Panels that run the core (3x-ui, Marzban-node, Remnawave's node) read the
                // version as the second word of a line starting "Xray ".
                println!(
                    "Xray {} (Ferry {}, Xray-compatible) Rust",
                    ferry::XRAY_COMPAT,
                    env!("CARGO_PKG_VERSION")
                );
            } else {
                println!(
                    "Ferry {} (Xray/V2Ray v4 config compatible; Xray {})",
                    env!("CARGO_PKG_VERSION"),
                    ferry::XRAY_COMPAT
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Cmd::Link { link, config, host }) => link_cmd(link, config, host),
        Some(Cmd::Tls {
            cmd: TlsCmd::Cert { domain, file, days },
        }) => tls_cert(&domain, file.as_deref(), days),
        Some(Cmd::Geodata { file, query }) => geodata_cmd(&file, query.as_deref()),
        Some(Cmd::X25519 {
            input,
            std_encoding,
        }) => x25519_cmd(input.as_deref(), std_encoding),
        Some(Cmd::Mldsa65 { input }) => mldsa65_cmd(input.as_deref()),
        Some(Cmd::Uuid { input }) => {
            match input {
                Some(s) => println!("{}", ferry::common::uuid::from_string(&s)),
                None => println!("{}", uuid::Uuid::new_v4()),
            }
            Ok(ExitCode::SUCCESS)
        }
    };
    match res {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;

    fn n(a: &[&str]) -> Vec<String> {
        normalize(a.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn xray_spellings() {
        assert_eq!(
            n(&["ferry", "-test", "-config", "a.json"]),
            ["ferry", "run", "--test", "--config", "a.json"]
        );
        assert_eq!(
            n(&["ferry", "-c", "a.json"]),
            ["ferry", "run", "-c", "a.json"]
        );
        assert_eq!(n(&["ferry", "-version"]), ["ferry", "version"]);
        assert_eq!(
            n(&["ferry", "run", "-config=a"]),
            ["ferry", "run", "--config=a"]
        );
        assert_eq!(n(&["ferry", "--help"]), ["ferry", "--help"]);
    }
}
