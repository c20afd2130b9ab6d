//! The impairment hop: delay, jitter and loss between two testbed nodes. netem is not in this
//! kernel, so a namespace between the two nodes routes every forwarded packet into a TUN device;
//! this hop reads each packet, drops it with the configured probability, holds it for the
//! configured delay (plus jitter), and writes it back, and the kernel forwards it on. It measures
//! what it did (packets, drops, the delay each packet really got) so a report states the link it
//! ran on, not only the one it asked for.
//!
//! Packets keep their order: jitter moves a packet's departure but never before the previous
//! one's (netem reorders under jitter, and a TCP transfer would then measure reordering too).

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

use crate::sys;

/// What the hop does to each packet, in each direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Impair {
    /// Added to every packet, each way (the round trip grows by twice this).
    pub delay: Duration,
    /// Uniform in ±jitter around `delay` (never below zero, never reordering).
    pub jitter: Duration,
    /// Drop probability per packet, in percent.
    pub loss_pct: f64,
    /// Seed of the drop decisions (a run is repeatable).
    pub seed: u64,
}

impl Serialize for Impair {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Impair", 4)?;
        st.serialize_field("delay_ms", &(self.delay.as_secs_f64() * 1000.0))?;
        st.serialize_field("jitter_ms", &(self.jitter.as_secs_f64() * 1000.0))?;
        st.serialize_field("loss_pct", &self.loss_pct)?;
        st.serialize_field("seed", &self.seed)?;
        st.end()
    }
}

impl Impair {
    /// "25 ms each way, 1% loss" for reports.
    pub fn describe(&self) -> String {
        let mut v = vec![format!("{} ms each way", self.delay.as_millis())];
        if !self.jitter.is_zero() {
            v.push(format!("± {} ms jitter", self.jitter.as_millis()));
        }
        if self.loss_pct > 0.0 {
            v.push(format!("{}% loss", self.loss_pct));
        }
        v.join(", ")
    }
}

impl Default for Impair {
    fn default() -> Self {
        Impair {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss_pct: 0.0,
            seed: 1,
        }
    }
}

/// What the hop measured.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HopStats {
    pub packets: u64,
    pub dropped: u64,
    pub forwarded: u64,
    pub bytes: u64,
    /// Dropped over received, in percent.
    pub loss_pct: f64,
    /// The delay packets really got inside the hop, from read to written.
    pub delay_mean_ms: f64,
    pub delay_p50_ms: f64,
    pub delay_p99_ms: f64,
    pub delay_max_ms: f64,
}

#[derive(Default)]
struct Acc {
    packets: u64,
    dropped: u64,
    forwarded: u64,
    bytes: u64,
    /// Microseconds, one per forwarded packet (capped so a long run stays small).
    delays_us: Vec<u32>,
}

const MAX_SAMPLES: usize = 4_000_000;

impl Acc {
    fn stats(&self) -> HopStats {
        let mut d = self.delays_us.clone();
        d.sort_unstable();
        let pick = |q: f64| -> f64 {
            if d.is_empty() {
                return 0.0;
            }
            let i = ((d.len() - 1) as f64 * q).round() as usize;
            d[i] as f64 / 1000.0
        };
        HopStats {
            packets: self.packets,
            dropped: self.dropped,
            forwarded: self.forwarded,
            bytes: self.bytes,
            loss_pct: if self.packets > 0 {
                self.dropped as f64 * 100.0 / self.packets as f64
            } else {
                0.0
            },
            delay_mean_ms: if d.is_empty() {
                0.0
            } else {
                d.iter().map(|&x| x as f64).sum::<f64>() / d.len() as f64 / 1000.0
            },
            delay_p50_ms: pick(0.5),
            delay_p99_ms: pick(0.99),
            delay_max_ms: pick(1.0),
        }
    }
}

/// xorshift64*: the drop and jitter decisions (no cryptographic need, a fixed seed repeats a run).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    /// Uniform in [0, 1).
    fn next(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A running hop; dropping it stops it and removes its TUN device.
pub struct Hop {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    acc: Arc<Mutex<Acc>>,
}

type Packet = (Instant, Instant, Vec<u8>);

impl Hop {
    /// Creates the TUN device `tun` inside the namespace `ns` (an open `/var/run/netns/NAME`) and
    /// starts forwarding through it. Routing packets into the device is the caller's part.
    pub fn start(ns: File, tun: &str, cfg: Impair) -> Result<Hop> {
        let stop = Arc::new(AtomicBool::new(false));
        let acc = Arc::new(Mutex::new(Acc::default()));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<File>>();
        let (pkt_tx, pkt_rx) = mpsc::channel::<Packet>();
        let name = tun.to_string();
        let (stop_r, acc_r) = (stop.clone(), acc.clone());
        let reader = std::thread::Builder::new()
            .name(format!("hop-{tun}-in"))
            .spawn(move || {
                let dev = sys::enter_netns(&ns)
                    .context("entering the hop's namespace")
                    .and_then(|_| sys::open_tun(&name).context("creating the TUN device"))
                    .and_then(|d| Ok((d.try_clone()?, d)));
                let (dev, out) = match dev {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(out));
                read_loop(dev, cfg, &stop_r, &acc_r, pkt_tx);
            })?;
        let out = match ready_rx.recv() {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => {
                let _ = reader.join();
                return Err(e);
            }
            Err(_) => return Err(anyhow!("the hop's reader thread ended before starting")),
        };
        let (stop_w, acc_w) = (stop.clone(), acc.clone());
        let writer = std::thread::Builder::new()
            .name(format!("hop-{tun}-out"))
            .spawn(move || write_loop(out, &stop_w, &acc_w, pkt_rx))?;
        Ok(Hop {
            stop,
            threads: vec![reader, writer],
            acc,
        })
    }

    /// What the hop has done so far.
    pub fn stats(&self) -> HopStats {
        self.acc.lock().map(|a| a.stats()).unwrap_or_default()
    }

    /// Clears the counters (between measurements on one testbed).
    pub fn reset(&self) {
        if let Ok(mut a) = self.acc.lock() {
            *a = Acc::default();
        }
    }
}

impl Drop for Hop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn read_loop(
    mut dev: File,
    cfg: Impair,
    stop: &AtomicBool,
    acc: &Mutex<Acc>,
    out: mpsc::Sender<Packet>,
) {
    let mut rng = Rng::new(cfg.seed);
    let mut buf = vec![0u8; 65536];
    let mut last_due = Instant::now();
    let p = cfg.loss_pct / 100.0;
    let jitter = cfg.jitter.as_secs_f64();
    while !stop.load(Ordering::SeqCst) {
        match sys::wait_readable(&dev, 100) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return,
        }
        let n = match dev.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let now = Instant::now();
        let drop = p > 0.0 && rng.next() < p;
        {
            let Ok(mut a) = acc.lock() else { return };
            a.packets += 1;
            if drop {
                a.dropped += 1;
            }
        }
        if drop {
            continue;
        }
        let mut d = cfg.delay.as_secs_f64();
        if jitter > 0.0 {
            d = (d + (rng.next() * 2.0 - 1.0) * jitter).max(0.0);
        }
        let due = (now + Duration::from_secs_f64(d)).max(last_due);
        last_due = due;
        if out.send((now, due, buf[..n].to_vec())).is_err() {
            return;
        }
    }
}

fn write_loop(mut dev: File, stop: &AtomicBool, acc: &Mutex<Acc>, rx: mpsc::Receiver<Packet>) {
    loop {
        let (read_at, due, pkt) = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(x) => x,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        // A write the kernel refuses (the device going away at the end) is a lost packet, as on
        // a real link.
        let ok = dev.write(&pkt).is_ok();
        let held = read_at.elapsed();
        let Ok(mut a) = acc.lock() else { return };
        if ok {
            a.forwarded += 1;
            a.bytes += pkt.len() as u64;
            if a.delays_us.len() < MAX_SAMPLES {
                a.delays_us
                    .push(held.as_micros().min(u32::MAX as u128) as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_uniform_enough_for_a_loss_rate() {
        let mut r = Rng::new(7);
        let n = 200_000;
        let hits = (0..n).filter(|_| r.next() < 0.01).count();
        let pct = hits as f64 * 100.0 / n as f64;
        assert!((0.9..1.1).contains(&pct), "{pct}% for 1%");
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next().to_bits(), b.next().to_bits(), "a seed repeats");
    }

    #[test]
    fn stats_report_percentiles_and_loss() {
        let a = Acc {
            packets: 10,
            dropped: 1,
            forwarded: 9,
            bytes: 900,
            delays_us: (1..=9).map(|x| x * 1000).collect(),
        };
        let s = a.stats();
        assert_eq!(s.loss_pct, 10.0);
        assert_eq!(s.delay_p50_ms, 5.0);
        assert_eq!(s.delay_max_ms, 9.0);
        assert_eq!(s.delay_mean_ms, 5.0);
    }
}
