//! Congestion control chosen per connection: Hysteria's Brutal (a set send rate, held through
//! loss) and the switch that starts a connection on BBR (or NewReno) and moves it to Brutal
//! once the Hysteria handshake has agreed on a rate. quinn takes one controller when the
//! connection starts; [`Switch`] is that controller and swaps what it holds when its
//! [`Rate`] changes.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use quinn::congestion::{
    BbrConfig, Controller, ControllerFactory, ControllerMetrics, NewRenoConfig,
};
use quinn_proto::RttEstimator;

/// A connection's Brutal send rate in bytes/s, set by the handshake; 0 = the base controller.
#[derive(Debug, Default)]
pub struct Rate(AtomicU64);

impl Rate {
    pub fn new(bps: u64) -> Arc<Rate> {
        Arc::new(Rate(AtomicU64::new(bps)))
    }
    pub fn set(&self, bps: u64) {
        self.0.store(bps, Ordering::Relaxed)
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The controller a connection starts on when no rate is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Base {
    #[default]
    Bbr,
    Reno,
}

/// Makes a [`Switch`] for one connection.
pub struct SwitchFactory {
    pub rate: Arc<Rate>,
    pub base: Base,
}

impl ControllerFactory for SwitchFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let mut s = Switch {
            rate: self.rate.clone(),
            base: self.base,
            current: 0,
            mtu: current_mtu,
            inner: base(self.base, now, current_mtu),
        };
        s.check(now);
        Box::new(s)
    }
}

fn base(b: Base, now: Instant, mtu: u16) -> Box<dyn Controller> {
    match b {
        Base::Bbr => Arc::new(BbrConfig::default()).build(now, mtu),
        Base::Reno => Arc::new(NewRenoConfig::default()).build(now, mtu),
    }
}

/// The base controller until a rate is set, then Brutal at that rate.
struct Switch {
    rate: Arc<Rate>,
    base: Base,
    current: u64,
    mtu: u16,
    inner: Box<dyn Controller>,
}

impl Switch {
    fn check(&mut self, now: Instant) {
        let want = self.rate.get();
        if want == self.current {
            return;
        }
        self.current = want;
        self.inner = match want {
            0 => base(self.base, now, self.mtu),
            r => Box::new(Brutal::new(r, self.mtu, now)),
        };
    }
}

impl Controller for Switch {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.check(now);
        self.inner.on_sent(now, bytes, last_packet_number)
    }
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt)
    }
    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest: Option<u64>,
    ) {
        self.inner.on_end_acks(now, in_flight, app_limited, largest);
        self.check(now);
    }
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, lost: u64) {
        self.inner.on_congestion_event(now, sent, persistent, lost)
    }
    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.mtu = new_mtu;
        self.inner.on_mtu_update(new_mtu)
    }
    fn window(&self) -> u64 {
        self.inner.window()
    }
    fn metrics(&self) -> ControllerMetrics {
        self.inner.metrics()
    }
    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Switch {
            rate: self.rate.clone(),
            base: self.base,
            current: self.current,
            mtu: self.mtu,
            inner: self.inner.clone_box(),
        })
    }
    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Seconds of acks and losses Brutal's ack rate looks back over.
const SLOTS: usize = 5;
/// Fewer samples than this: the ack rate is taken as 1.
const MIN_SAMPLES: u64 = 50;
/// The lowest ack rate Brutal compensates for.
const MIN_ACK_RATE: f64 = 0.8;
/// The window before the first RTT sample.
const INITIAL_WINDOW: u64 = 10240;
/// The window over the bandwidth-delay product at the rate. quinn paces at 1.25 windows per
/// RTT, so the window is what holds the rate (Hysteria's Go sender paces at the rate itself and
/// keeps twice the product in flight): at 1.25 a 100 mbps Brutal sent 120% of it over a 50 ms,
/// 1% loss link (BENCHMARKS.md, session 21), at 1.0 it holds the rate.
const WINDOW_GAIN: f64 = 1.0;

#[derive(Clone, Copy, Default)]
struct Slot {
    second: u64,
    acks: u64,
    losses: u64,
}

/// Brutal: a window of rate x RTT / ack rate, whatever the loss.
#[derive(Clone)]
pub struct Brutal {
    rate: u64,
    mtu: u16,
    epoch: Instant,
    slots: [Slot; SLOTS],
    ack_rate: f64,
    window: u64,
}

impl Brutal {
    pub fn new(rate: u64, mtu: u16, now: Instant) -> Brutal {
        Brutal {
            rate,
            mtu,
            epoch: now,
            slots: [Slot::default(); SLOTS],
            ack_rate: 1.0,
            window: INITIAL_WINDOW,
        }
    }

    fn slot(&mut self, now: Instant) -> &mut Slot {
        let second = now.saturating_duration_since(self.epoch).as_secs();
        let s = &mut self.slots[(second % SLOTS as u64) as usize];
        if s.second != second {
            *s = Slot {
                second,
                ..Slot::default()
            };
        }
        s
    }

    fn update_ack_rate(&mut self, now: Instant) {
        let second = now.saturating_duration_since(self.epoch).as_secs();
        let (mut acks, mut losses) = (0, 0);
        for s in &self.slots {
            if second.saturating_sub(s.second) < SLOTS as u64 {
                acks += s.acks;
                losses += s.losses;
            }
        }
        self.ack_rate = if acks + losses < MIN_SAMPLES {
            1.0
        } else {
            (acks as f64 / (acks + losses) as f64).max(MIN_ACK_RATE)
        };
    }

    fn min_window(&self) -> u64 {
        u64::from(self.mtu) * 2
    }
}

impl Controller for Brutal {
    fn on_ack(
        &mut self,
        now: Instant,
        _sent: Instant,
        _bytes: u64,
        _app: bool,
        rtt: &RttEstimator,
    ) {
        self.slot(now).acks += 1;
        let rtt = rtt.get().as_secs_f64();
        let w = self.rate as f64 * rtt * WINDOW_GAIN / self.ack_rate;
        self.window = (w as u64).max(self.min_window());
    }

    fn on_end_acks(&mut self, now: Instant, _in_flight: u64, _app: bool, _largest: Option<u64>) {
        self.update_ack_rate(now);
    }

    fn on_congestion_event(&mut self, now: Instant, _sent: Instant, _persistent: bool, lost: u64) {
        let mtu = u64::from(self.mtu.max(1));
        self.slot(now).losses += lost.div_ceil(mtu).max(1);
        self.update_ack_rate(now);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.mtu = new_mtu;
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.window;
        m.pacing_rate = Some((self.rate as f64 / self.ack_rate) as u64);
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        INITIAL_WINDOW
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_rate_counts_only_with_enough_samples_and_is_floored() {
        let t0 = Instant::now();
        let mut b = Brutal::new(1_000_000, 1200, t0);
        for _ in 0..10 {
            b.slot(t0).acks += 1;
        }
        b.on_congestion_event(t0, t0, false, 1200 * 10);
        assert_eq!(b.ack_rate, 1.0, "20 samples are too few");
        for _ in 0..80 {
            b.slot(t0).acks += 1;
        }
        b.update_ack_rate(t0);
        assert!((b.ack_rate - 90.0 / 100.0).abs() < 1e-9, "{}", b.ack_rate);
        b.on_congestion_event(t0, t0, false, 1200 * 100);
        assert_eq!(b.ack_rate, MIN_ACK_RATE);
        // Five seconds on, the old slots no longer count.
        b.update_ack_rate(t0 + std::time::Duration::from_secs(6));
        assert_eq!(b.ack_rate, 1.0);
    }
}
