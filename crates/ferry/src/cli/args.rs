//! The command line: its subcommands, Xray's spellings of it, and what `version` and `uuid` print.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ferry",
    version,
    about = "A proxy core that reads Xray/V2Ray configs"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Option<Cmd>,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
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
    /// Share links: turn an `ss://`, `ssr://`, `vmess://`, `vless://`, `trojan://`,
    /// `hysteria2://` or `wireguard://` link into an outbound JSON object, or print the links
    /// of a config (`-c`) for its inbounds' users and its VMess and WireGuard outbounds.
    Link {
        /// An `ss://`, `ssr://`, `vmess://`, `vless://`, `trojan://`, `hysteria2://` or
        /// `wireguard://` link to turn into an outbound.
        link: Option<String>,
        /// Config whose inbounds' users get links (Shadowsocks, ShadowsocksR, VMess, VLESS,
        /// Trojan, Hysteria; REALITY and TLS included), as do its VMess and WireGuard outbounds.
        #[arg(short = 'c', long = "config")]
        config: Vec<String>,
        /// Host name clients use to reach the server (default: the inbound's listen address).
        #[arg(long)]
        host: Option<String>,
        /// With `-c`: print one subscription (the links, one per line, in base64) instead of
        /// one `email<TAB>link` line per user, what client apps import from a subscription
        /// URL. With a FILE (or `-` for stdin) and no `-c`: turn that subscription into
        /// outbounds, tagged with the links' names.
        #[arg(long = "sub", visible_alias = "subscription", value_name = "FILE",
              num_args = 0..=1, default_missing_value = "")]
        sub: Option<String>,
        /// With `--sub FILE`: add a `leastPing` balancer over the subscription's outbounds,
        /// probed by the observatory (sing-box's `urltest`).
        #[arg(long, requires = "sub")]
        balancer: bool,
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
    /// Print a new key pair for VLESS Encryption, X25519 and ML-KEM-768, as the `decryption`
    /// (server) and `encryption` (client) strings `xray vlessenc` prints.
    Vlessenc,
    /// Print a new ML-KEM-768 seed (VLESS Encryption's server key) and its encapsulation key
    /// (the client's), or those of `-i SEED`, as `xray mlkem768` prints them.
    Mlkem768 {
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
pub(crate) enum TlsCmd {
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

/// Whether this binary was started under Xray's name (a panel's `xray` or `xray-linux-amd64`).
pub(crate) fn invoked_as_xray() -> bool {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().to_ascii_lowercase())
        })
        .is_some_and(|n| n.starts_with("xray"))
}

/// Accepts Xray's single-dash spellings (`-config`, `-test`, `-version`), and like Xray treats a
/// command line that starts with a flag (`ferry -c x.json`, `ferry -test -config x.json`) as `run`.
pub(crate) fn normalize_args() -> Vec<String> {
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
