//! `observatory` and `burstObservatory` (routing.md §5.3–5.4): HTTP probes through the selected
//! outbounds, whose results (alive, delay; with bursts, failure counts and deviation) the
//! balancers read. Any HTTP response counts as alive, as in Xray.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::reader::duration;
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::registry::Outbounds;
use crate::transport::BoxStream;

/// What the observatory knows about one outbound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Status {
    pub alive: bool,
    /// The last probe's time (plain) or the average (burst).
    pub delay: Duration,
    /// Burst samples counted and failed (0 for the plain observatory).
    pub all: u32,
    pub fail: u32,
    pub deviation: Duration,
}

/// A probe URL.
#[derive(Debug, Clone)]
pub struct ProbeUrl {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl ProbeUrl {
    pub fn parse(s: &str) -> Option<ProbeUrl> {
        let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else {
            (false, s.strip_prefix("http://")?)
        };
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let default = if tls { 443 } else { 80 };
        let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
            let (h, p) = h.split_once(']')?;
            (
                h,
                p.strip_prefix(':')
                    .map_or(Some(default), |p| p.parse().ok())?,
            )
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().ok()?),
                None => (hostport, default),
            }
        };
        (!host.is_empty()).then(|| ProbeUrl {
            tls,
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }
}

#[derive(Debug)]
enum Mode {
    Plain {
        url: ProbeUrl,
        interval: Duration,
        concurrent: bool,
    },
    Burst {
        url: ProbeUrl,
        connectivity: Option<ProbeUrl>,
        interval: Duration,
        sampling: usize,
        timeout: Duration,
        method: String,
    },
}

/// One outbound's burst samples: when, and the round trip (`None`: failed).
type Samples = VecDeque<(Instant, Option<Duration>)>;

/// A running observatory's configuration and results.
#[derive(Debug)]
pub struct Observatory {
    selectors: Vec<String>,
    mode: Mode,
    status: Mutex<HashMap<String, Status>>,
    samples: Mutex<HashMap<String, Samples>>,
}

fn url(o: &Obj<'_>, key: &str, default: &str) -> Result<ProbeUrl> {
    let s = o
        .str(key)?
        .filter(|s| !s.is_empty())
        .unwrap_or(default.into());
    ProbeUrl::parse(&s)
        .ok_or_else(|| ConfigError::new(o.key_path(key), format!("{s:?} is not an http(s) URL")))
}

fn dur(o: &Obj<'_>, key: &str, default: Duration) -> Result<Duration> {
    match o.str(key)? {
        None => Ok(default),
        Some(s) => duration(&s)
            .ok_or_else(|| ConfigError::new(o.key_path(key), format!("{s:?} is not a duration"))),
    }
}

impl Observatory {
    /// Reads `observatory`.
    pub fn parse(o: &Obj<'_>) -> Result<Observatory> {
        let mode = Mode::Plain {
            url: url(o, "probeUrl", "https://www.google.com/generate_204")?,
            interval: dur(o, "probeInterval", Duration::from_secs(10))?
                .max(Duration::from_millis(100)),
            concurrent: o.bool("enableConcurrency")?.unwrap_or(false),
        };
        Ok(Self::new(
            o.str_list("subjectSelector")?.unwrap_or_default(),
            mode,
        ))
    }

    /// Reads `burstObservatory`.
    pub fn parse_burst(o: &Obj<'_>) -> Result<Observatory> {
        let selectors = o.str_list("subjectSelector")?.unwrap_or_default();
        static EMPTY: serde_json::Value = serde_json::Value::Null;
        let p = match o.obj("pingConfig")? {
            Some(p) => p,
            None => Obj::new(&EMPTY, o.key_path("pingConfig"), o.diag())?,
        };
        let connectivity = match p.str("connectivity")?.filter(|s| !s.is_empty()) {
            Some(s) => Some(ProbeUrl::parse(&s).ok_or_else(|| {
                ConfigError::new(
                    p.key_path("connectivity"),
                    format!("{s:?} is not an http(s) URL"),
                )
            })?),
            None => None,
        };
        let mode = Mode::Burst {
            url: url(
                &p,
                "destination",
                "https://connectivitycheck.gstatic.com/generate_204",
            )?,
            connectivity,
            interval: dur(&p, "interval", Duration::from_secs(60))?.max(Duration::from_secs(10)),
            sampling: p
                .get("sampling")
                .and_then(|(_, v)| v.as_u64())
                .filter(|&n| n > 0)
                .unwrap_or(10) as usize,
            timeout: dur(&p, "timeout", Duration::from_secs(5))?,
            method: p
                .str("httpMethod")?
                .unwrap_or_else(|| "HEAD".into())
                .to_ascii_uppercase(),
        };
        p.finish();
        Ok(Self::new(selectors, mode))
    }

    fn new(selectors: Vec<String>, mode: Mode) -> Observatory {
        Observatory {
            selectors,
            mode,
            status: Mutex::new(HashMap::new()),
            samples: Mutex::new(HashMap::new()),
        }
    }

    /// The last known status of `tag` (`None`: never probed).
    pub fn status(&self, tag: &str) -> Option<Status> {
        self.status.lock().ok()?.get(tag).copied()
    }

    /// Records a status (tests, and the API later).
    pub fn set(&self, tag: &str, s: Status) {
        if let Ok(mut m) = self.status.lock() {
            m.insert(tag.to_string(), s);
        }
    }

    fn subjects(
        &self,
        outbounds: &Outbounds,
    ) -> Vec<(String, Arc<crate::registry::OutboundEntry>)> {
        let t = outbounds.load();
        t.list()
            .iter()
            .filter(|e| self.selectors.iter().any(|s| e.tag.starts_with(s.as_str())))
            .map(|e| (e.tag.to_string(), e.clone()))
            .collect()
    }

    /// Probes until the task is aborted.
    pub async fn run(self: Arc<Self>, outbounds: Arc<Outbounds>) {
        match &self.mode {
            Mode::Plain {
                url,
                interval,
                concurrent,
            } => loop {
                let subjects = self.subjects(&outbounds);
                if *concurrent {
                    let mut set = tokio::task::JoinSet::new();
                    for (tag, e) in subjects {
                        let (me, url) = (self.clone(), url.clone());
                        set.spawn(async move {
                            let r = probe(&e, &url, "GET", Duration::from_secs(5)).await;
                            me.record_plain(&tag, r);
                        });
                    }
                    while set.join_next().await.is_some() {}
                    tokio::time::sleep(*interval).await;
                } else {
                    for (tag, e) in &subjects {
                        let r = probe(e, url, "GET", Duration::from_secs(5)).await;
                        self.record_plain(tag, r);
                        tokio::time::sleep(*interval).await;
                    }
                    if subjects.is_empty() {
                        tokio::time::sleep(*interval).await;
                    }
                }
            },
            Mode::Burst {
                url,
                connectivity,
                interval,
                sampling,
                timeout,
                method,
            } => loop {
                // One round now, then one ping per outbound per interval (Xray spreads the
                // `sampling` pings of each `interval × sampling` window at random times).
                for (tag, e) in self.subjects(&outbounds) {
                    let r = probe(&e, url, method, *timeout).await;
                    let keep = match (&r, connectivity) {
                        (Err(_), Some(c)) => direct_probe(c, *timeout).await.is_ok(),
                        _ => true,
                    };
                    if keep {
                        self.record_burst(
                            &tag,
                            r.ok(),
                            *interval * (*sampling as u32) * 2,
                            *sampling,
                        );
                    }
                }
                tokio::time::sleep(*interval).await;
            },
        }
    }

    fn record_plain(&self, tag: &str, r: io::Result<Duration>) {
        let s = match r {
            Ok(d) => Status {
                alive: true,
                delay: d,
                all: 0,
                fail: 0,
                deviation: Duration::ZERO,
            },
            Err(e) => {
                tracing::debug!("observatory: {tag}: {e}");
                Status {
                    alive: false,
                    delay: Duration::from_millis(99_999_999),
                    all: 0,
                    fail: 0,
                    deviation: Duration::ZERO,
                }
            }
        };
        self.set(tag, s);
    }

    /// Adds a burst sample and recomputes the status from the last `sampling` samples younger
    /// than `max_age`.
    pub fn record_burst(
        &self,
        tag: &str,
        rtt: Option<Duration>,
        max_age: Duration,
        sampling: usize,
    ) {
        let now = Instant::now();
        let st = {
            let Ok(mut m) = self.samples.lock() else {
                return;
            };
            let q = m.entry(tag.to_string()).or_default();
            q.push_back((now, rtt));
            while q.len() > sampling {
                q.pop_front();
            }
            q.retain(|(t, _)| now.duration_since(*t) <= max_age);
            let all = q.len() as u32;
            let ok: Vec<f64> = q
                .iter()
                .filter_map(|(_, r)| r.map(|d| d.as_secs_f64()))
                .collect();
            let fail = all - ok.len() as u32;
            let avg = if ok.is_empty() {
                0.0
            } else {
                ok.iter().sum::<f64>() / ok.len() as f64
            };
            let dev = match ok.len() {
                0 => 0.0,
                1 => avg / 2.0,
                n => (ok.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / n as f64).sqrt(),
            };
            Status {
                alive: all != fail,
                delay: Duration::from_secs_f64(avg),
                all,
                fail,
                deviation: Duration::from_secs_f64(dev),
            }
        };
        self.set(tag, st);
    }
}

/// One HTTP request through `e` to `url`; the time until a response starts.
async fn probe(
    e: &crate::registry::OutboundEntry,
    url: &ProbeUrl,
    method: &str,
    timeout: Duration,
) -> io::Result<Duration> {
    let start = Instant::now();
    let dest = Destination {
        addr: Address::parse(&url.host),
        port: url.port,
    };
    let fut = async {
        let s = e.handler.dial_tcp(&dest).await?;
        http_exchange(s, url, method, &dest).await
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(())) => Ok(start.elapsed()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// The connectivity check: the URL dialed directly.
async fn direct_probe(url: &ProbeUrl, timeout: Duration) -> io::Result<()> {
    let dest = Destination {
        addr: Address::parse(&url.host),
        port: url.port,
    };
    let fut = async {
        let s: BoxStream = Box::new(crate::transport::tcp::dial(&dest, &Default::default()).await?);
        http_exchange(s, url, "HEAD", &dest).await
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

async fn http_exchange(
    s: BoxStream,
    url: &ProbeUrl,
    method: &str,
    dest: &Destination,
) -> io::Result<()> {
    let mut s: BoxStream = if url.tls {
        let layer = crate::transport::tls::TlsLayer::client(&Default::default())
            .map_err(io::Error::other)?;
        Box::new(layer.connect_tls(s, dest).await?)
    } else {
        s
    };
    let req = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: Mozilla/5.0\r\nConnection: close\r\n\r\n",
        url.path, url.host
    );
    s.write_all(req.as_bytes()).await?;
    let mut head = [0u8; 5];
    s.read_exact(&mut head).await?;
    if &head == b"HTTP/" {
        Ok(())
    } else {
        Err(io::Error::other("not an HTTP response"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = ProbeUrl::parse("https://www.google.com/generate_204").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (true, "www.google.com", 443, "/generate_204")
        );
        let u = ProbeUrl::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!((u.port, u.path.as_str()), (8080, "/"));
        let u = ProbeUrl::parse("http://[::1]:81/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 81));
        assert!(ProbeUrl::parse("ftp://x").is_none());
    }

    #[test]
    fn burst_statistics() {
        let o = Observatory::new(
            vec![],
            Mode::Plain {
                url: ProbeUrl::parse("http://x/").unwrap(),
                interval: Duration::from_secs(1),
                concurrent: false,
            },
        );
        let age = Duration::from_secs(60);
        o.record_burst("a", Some(Duration::from_millis(100)), age, 3);
        let s = o.status("a").unwrap();
        assert_eq!((s.all, s.fail, s.alive), (1, 0, true));
        assert_eq!(
            s.deviation,
            Duration::from_millis(50),
            "one sample: half the average"
        );
        o.record_burst("a", Some(Duration::from_millis(300)), age, 3);
        o.record_burst("a", None, age, 3);
        let s = o.status("a").unwrap();
        assert_eq!((s.all, s.fail), (3, 1));
        assert_eq!(s.delay, Duration::from_millis(200));
        assert_eq!(s.deviation, Duration::from_millis(100));
        o.record_burst("b", None, age, 3);
        assert!(!o.status("b").unwrap().alive);
    }
}
