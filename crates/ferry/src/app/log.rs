//! Logging set-up (`log.loglevel`, `log.error`) and the access log in Xray's format.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::writer::BoxMakeWriter;

use super::mask::Mask;

use crate::proxy::Session;

/// `log` settings.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// `debug` | `info` | `warning` | `error` | `none`.
    pub level: String,
    /// Access log path: `None` = stdout, `Some("none")` = off.
    pub access: Option<String>,
    /// Error log path: `None` = stderr.
    pub error: Option<String>,
    /// `maskAddress`: how much of each IP address both logs keep.
    pub mask: Option<super::mask::Mask>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "warning".into(),
            access: None,
            error: None,
            mask: None,
        }
    }
}

/// Installs the tracing subscriber for the error log. `RUST_LOG` overrides the level.
pub fn init(cfg: &LogConfig) {
    let level = match cfg.level.to_ascii_lowercase().as_str() {
        "debug" => "debug",
        "info" => "info",
        "error" => "error",
        "none" => "off",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("ferry={level},{level}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let file = match cfg.error.as_deref() {
        Some(p) if !p.is_empty() && p != "none" => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            Ok(f) => Some(Arc::new(Mutex::new(f))),
            Err(e) => {
                eprintln!("log.error: cannot open {p}: {e}; logging to stderr");
                None
            }
        },
        _ => None,
    };
    let ansi = file.is_none();
    let mask = cfg.mask;
    let writer = BoxMakeWriter::new(move || -> Box<dyn Write> {
        let out: Box<dyn Write> = match &file {
            Some(f) => Box::new(Shared(f.clone())),
            None => Box::new(std::io::stderr()),
        };
        match mask {
            Some(mask) => Box::new(Masked { inner: out, mask }),
            None => out,
        }
    });
    let res = builder.with_ansi(ansi).with_writer(writer).try_init();
    let _ = res;
}

/// The error-log file, shared by the writers tracing makes per event.
struct Shared(Arc<Mutex<std::fs::File>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

/// Masks the addresses in what is written through it (tracing writes each event at once).
struct Masked {
    inner: Box<dyn Write>,
    mask: Mask,
}

impl Write for Masked {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(b);
        self.inner.write_all(self.mask.apply(&text).as_bytes())?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The access log: one line per dispatched session, as Xray writes it.
pub struct AccessLog {
    out: Option<Mutex<Box<dyn Write + Send>>>,
    mask: Option<Mask>,
}

impl AccessLog {
    /// Opens the access log file anew (after logrotate moved it); stdout and "none" stay.
    pub fn reopen(&self, cfg: &LogConfig) -> std::io::Result<()> {
        if let (Some(out), Some(p)) = (&self.out, cfg.access.as_deref()) {
            if !p.is_empty() && p != "none" {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?;
                *out.lock().unwrap_or_else(|e| e.into_inner()) = Box::new(f);
            }
        }
        Ok(())
    }

    pub fn open(cfg: &LogConfig) -> std::io::Result<AccessLog> {
        let out: Option<Box<dyn Write + Send>> = match cfg.access.as_deref() {
            Some("none") => None,
            None | Some("") => Some(Box::new(std::io::stdout())),
            Some(p) => Some(Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            )),
        };
        Ok(AccessLog {
            out: out.map(Mutex::new),
            mask: cfg.mask,
        })
    }

    pub fn disabled() -> AccessLog {
        AccessLog {
            out: None,
            mask: None,
        }
    }

    /// `from SRC accepted tcp:DST [inbound -> outbound] email: E`, as Xray writes it: `->` when a
    /// routing rule chose the outbound, `>>` for the default one; only the outbound tag when the
    /// inbound is untagged; no brackets when the outbound is untagged.
    pub fn accepted(&self, s: &Session, outbound: &str, routed: bool) {
        let Some(out) = &self.out else { return };
        let line = format!("{} {}\n", timestamp(), accepted_line(s, outbound, routed));
        let line = self.masked(line);
        if let Ok(mut w) = out.lock() {
            let _ = w.write_all(line.as_bytes());
            let _ = w.flush();
        }
    }

    /// `from SRC rejected REASON`
    pub fn rejected(&self, source: &crate::session::Endpoint, reason: &str) {
        let Some(out) = &self.out else { return };
        let line = format!("{} from {} rejected {}\n", timestamp(), source, reason);
        let line = self.masked(line);
        if let Ok(mut w) = out.lock() {
            let _ = w.write_all(line.as_bytes());
            let _ = w.flush();
        }
    }

    fn masked(&self, line: String) -> String {
        match &self.mask {
            Some(m) => m.apply(&line),
            None => line,
        }
    }
}

/// The access-log text after the timestamp.
fn accepted_line(s: &Session, outbound: &str, routed: bool) -> String {
    let detour = match (s.inbound_tag.is_empty(), outbound.is_empty()) {
        (_, true) => String::new(),
        (true, false) => format!(" [{outbound}]"),
        (false, false) => format!(
            " [{} {} {outbound}]",
            s.inbound_tag,
            if routed { "->" } else { ">>" }
        ),
    };
    let email = s
        .user
        .as_ref()
        .filter(|u| !u.email.is_empty())
        .map(|u| format!(" email: {}", u.email))
        .unwrap_or_default();
    format!(
        "from {} accepted {}:{}{detour}{email}",
        s.source, s.network, s.dest
    )
}

/// `YYYY/MM/DD HH:MM:SS.uuuuuu` in UTC.
pub fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86400, secs % 86400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}/{m:02}/{d:02} {:02}:{:02}:{:02}.{:06}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        now.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::accepted_line;
    use crate::common::{Destination, Network};
    use crate::proxy::{Session, User};

    #[test]
    fn access_line_like_xray() {
        let mut s = Session {
            inbound_tag: "in".into(),
            source: "127.0.0.1:5000".parse().unwrap(),
            local: "127.0.0.1:1080".parse().unwrap(),
            dest: Destination::parse("example.com:443").unwrap(),
            network: Network::Tcp,
            user: None,
            protocol: "socks",
            sniffed: None,
        };
        assert_eq!(
            accepted_line(&s, "out", true),
            "from 127.0.0.1:5000 accepted tcp:example.com:443 [in -> out]"
        );
        assert_eq!(
            accepted_line(&s, "out", false),
            "from 127.0.0.1:5000 accepted tcp:example.com:443 [in >> out]"
        );
        assert_eq!(
            accepted_line(&s, "", false),
            "from 127.0.0.1:5000 accepted tcp:example.com:443"
        );
        s.inbound_tag = "".into();
        s.network = Network::Udp;
        s.user = Some(User::new("a@b", 0));
        assert_eq!(
            accepted_line(&s, "out", true),
            "from 127.0.0.1:5000 accepted udp:example.com:443 [out] email: a@b"
        );
    }

    #[test]
    fn timestamp_shape() {
        let t = super::timestamp();
        assert_eq!(t.len(), 26, "{t}");
        assert_eq!(&t[4..5], "/");
        assert!(t.starts_with("20"));
    }
}
