//! One mKCP connection's state machine, sans-IO, as Xray's `Connection` runs it: the round
//! trip estimate, the close states, pings, and the two workers ([`Sender`], [`Receiver`]).
//! The clock is milliseconds since the connection began (what its segments carry); every
//! segment goes out through an [`Out`] batch, one per datagram, as Xray writes them.

use std::sync::Arc;

use super::recv::{Budget, Receiver};
use super::segment::{self, Segment, CMD_PING, CMD_TERMINATE, OPT_CLOSE};
use super::send::{SendParams, Sender};
use super::{KcpSettings, Out};

/// Xray's connection states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Active,
    /// Closed here; the last data still goes out, every segment says Close.
    ReadyToClose,
    /// The peer said Close: nothing more is sent.
    PeerClosed,
    /// Terminate is sent until the peer's comes (or 8 s).
    Terminating,
    /// The peer sent Terminate: reads end once the data is taken.
    PeerTerminating,
    Terminated,
}

/// RFC 6298 as Xray applies it (srtt floor = tti, RTO 5/4 of srtt plus the variation term,
/// at most 10 s before the 5/4), with the peer's RTO taken at most every 3 s.
#[derive(Debug)]
struct RoundTrip {
    variation: u32,
    srtt: u32,
    rto: u32,
    min_rtt: u32,
    updated: u32,
}

impl RoundTrip {
    fn update(&mut self, rtt: u32, now: u32) {
        if rtt > 0x7FFF_FFFF {
            return;
        }
        if self.srtt == 0 {
            self.srtt = rtt;
            self.variation = rtt / 2;
        } else {
            let delta = rtt.abs_diff(self.srtt);
            self.variation = (3 * self.variation + delta) / 4;
            self.srtt = ((7 * self.srtt as u64 + rtt as u64) / 8) as u32;
            self.srtt = self.srtt.max(self.min_rtt);
        }
        let rto = if self.min_rtt < 4 * self.variation {
            self.srtt + 4 * self.variation
        } else {
            self.srtt + self.variation
        };
        self.rto = rto.min(10_000) * 5 / 4;
        self.updated = now;
    }

    fn peer_rto(&mut self, rto: u32, now: u32) {
        if now.wrapping_sub(self.updated) < 3000 {
            return;
        }
        self.updated = now;
        self.rto = rto;
    }
}

/// What an input or a flush asks of the connection's owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    pub reader: bool,
    pub writer: bool,
    /// The data updater should run (Xray's `dataUpdater.WakeUp`).
    pub update: bool,
}

pub struct Kcp {
    conv: u16,
    tti: u32,
    mss: usize,
    state: State,
    state_since: u32,
    last_input: u32,
    last_ping: u32,
    rtt: RoundTrip,
    snd: Sender,
    rcv: Receiver,
}

impl Kcp {
    pub fn new(conv: u16, s: &KcpSettings, budget: Arc<Budget>) -> Kcp {
        Kcp {
            conv,
            tti: s.tti,
            mss: s.mss(),
            state: State::Active,
            state_since: 0,
            last_input: 0,
            last_ping: 0,
            rtt: RoundTrip {
                variation: 0,
                srtt: 0,
                rto: 100,
                min_rtt: s.tti,
                updated: 0,
            },
            snd: Sender::new(SendParams {
                in_flight: s.sending_in_flight(),
                buffer: s.sending_buffer(),
                congestion: s.congestion,
            }),
            rcv: Receiver::new(s.receiving_in_flight(), s.mtu, budget),
        }
    }

    pub fn conv(&self) -> u16 {
        self.conv
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn tti(&self) -> u32 {
        self.tti
    }

    /// Payload bytes per data segment.
    pub fn mss(&self) -> usize {
        self.mss
    }

    fn terminating(&self) -> bool {
        matches!(self.state, State::Terminating | State::Terminated)
    }

    fn set_state(&mut self, state: State, now: u32) {
        tracing::trace!("mKCP #{}: {:?} at {now}", self.conv, state);
        self.state = state;
        self.state_since = now;
        match state {
            State::PeerClosed | State::Terminating | State::PeerTerminating => {
                self.snd.close_write()
            }
            State::Terminated => {
                self.snd.close_write();
                self.snd.release();
                self.rcv.release();
            }
            State::Active | State::ReadyToClose => {}
        }
    }

    /// Closed here (the stream was dropped); false if it already was.
    pub fn close(&mut self, now: u32) -> bool {
        match self.state {
            State::ReadyToClose | State::Terminating | State::Terminated => return false,
            State::Active => self.set_state(State::ReadyToClose, now),
            State::PeerClosed => self.set_state(State::Terminating, now),
            State::PeerTerminating => self.set_state(State::Terminated, now),
        }
        true
    }

    /// Ends the connection at once (its listener went away).
    pub fn terminate(&mut self, now: u32) {
        if self.state != State::Terminated {
            self.set_state(State::Terminated, now);
        }
    }

    fn on_option(&mut self, opt: u8, now: u32) {
        if opt & OPT_CLOSE != 0 {
            match self.state {
                State::ReadyToClose => self.set_state(State::Terminating, now),
                State::Active => self.set_state(State::PeerClosed, now),
                _ => {}
            }
        }
    }

    /// One datagram's segments (already unmasked); those after a segment of another
    /// conversation are ignored, as Xray does.
    pub fn input(&mut self, now: u32, datagram: &[u8]) -> Wake {
        self.last_input = now;
        let mut wake = Wake::default();
        for seg in segment::segments(datagram) {
            if seg.conv() != self.conv {
                break;
            }
            match seg {
                Segment::Data {
                    opt,
                    ts,
                    sn,
                    una,
                    data,
                    ..
                } => {
                    self.on_option(opt, now);
                    if !self.terminating() || self.state == State::Terminating {
                        self.rcv.on_data(sn, ts, una, data);
                    }
                    wake.reader |= self.rcv.readable();
                    wake.update = true;
                }
                Segment::Ack {
                    opt,
                    window,
                    next,
                    ts,
                    numbers,
                    ..
                } => {
                    self.on_option(opt, now);
                    let rto = self.rtt.rto;
                    let nums = Segment::ack_numbers(numbers);
                    if let Some(rtt) = self.snd.on_ack(now, window, next, ts, nums, rto) {
                        self.rtt.update(rtt, now);
                    }
                    wake.writer = true;
                    wake.update = true;
                }
                Segment::Cmd {
                    cmd,
                    opt,
                    una,
                    next,
                    rto,
                    ..
                } => {
                    self.on_option(opt, now);
                    if cmd == CMD_TERMINATE {
                        match self.state {
                            State::Active | State::PeerClosed => {
                                self.set_state(State::PeerTerminating, now)
                            }
                            State::ReadyToClose => self.set_state(State::Terminating, now),
                            State::Terminating => self.set_state(State::Terminated, now),
                            _ => {}
                        }
                    }
                    if opt == OPT_CLOSE || cmd == CMD_TERMINATE {
                        wake.reader = true;
                        wake.writer = true;
                    }
                    self.snd.receiving_next(next);
                    self.rcv.clear_acks(una);
                    self.rtt.peer_rto(rto, now);
                }
            }
        }
        if self.state == State::Terminated {
            wake.update = true;
        }
        wake
    }

    /// Whether the data updater keeps running (Xray: not terminating, and segments or
    /// acknowledgements pending).
    pub fn update_necessary(&self) -> bool {
        !self.terminating() && (!self.snd.is_empty() || self.rcv.has_acks())
    }

    /// Whether the data updater may start at all.
    pub fn may_update(&self) -> bool {
        !self.terminating()
    }

    fn ping(&mut self, now: u32, cmd: u8, out: &mut Out) {
        let opt = if self.state == State::ReadyToClose {
            OPT_CLOSE
        } else {
            0
        };
        segment::put_cmd(
            &mut out.buf,
            self.conv,
            cmd,
            opt,
            self.snd.una,
            self.rcv.next,
            self.rtt.rto,
        );
        out.end();
        self.last_ping = now;
    }

    /// Xray's `flush`: the close timers, Acks, data due, and a Ping every 3 s. Returns what
    /// the owner should wake (a writer, once segments left the window).
    pub fn flush(&mut self, now: u32, out: &mut Out) -> Wake {
        let mut wake = Wake::default();
        if self.state == State::Terminated {
            return wake;
        }
        if self.state == State::Active && now.wrapping_sub(self.last_input) >= 30_000 {
            self.close(now);
            wake.reader = true;
            wake.writer = true;
        }
        if self.state == State::ReadyToClose && self.snd.is_empty() {
            self.set_state(State::Terminating, now);
        }
        if self.state == State::Terminating {
            self.ping(now, CMD_TERMINATE, out);
            if now.wrapping_sub(self.state_since) > 8000 {
                self.set_state(State::Terminated, now);
            }
            wake.reader = true;
            return wake;
        }
        if self.state == State::PeerTerminating && now.wrapping_sub(self.state_since) > 4000 {
            self.set_state(State::Terminating, now);
            wake.reader = true;
        }
        if self.state == State::ReadyToClose && now.wrapping_sub(self.state_since) > 15_000 {
            self.set_state(State::Terminating, now);
        }
        let opt = if self.state == State::ReadyToClose {
            OPT_CLOSE
        } else {
            0
        };
        let rto = self.rtt.rto;
        self.rcv.flush(now, rto, self.conv, opt, out);
        let before = self.snd.una;
        let closing = self.state == State::ReadyToClose;
        if self.snd.flush(now, rto, self.conv, closing, out) {
            self.ping(now, CMD_PING, out);
        }
        wake.writer = self.snd.una != before || self.snd.has_room();
        if now.wrapping_sub(self.last_ping) >= 3000 {
            self.ping(now, CMD_PING, out);
        }
        wake
    }

    /// Queues bytes to send, up to what the buffer takes: the number taken (0: full, or the
    /// connection no longer writes).
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.state != State::Active {
            return 0;
        }
        let mut n = 0;
        while n < data.len() && self.snd.has_room() {
            let k = (data.len() - n).min(self.mss);
            self.snd.push(data[n..n + k].to_vec());
            n += k;
        }
        n
    }

    /// Whether a write would be refused for good (the connection no longer writes).
    pub fn write_closed(&self) -> bool {
        self.state != State::Active
    }

    /// Reads in-order bytes: `Some(n)` with n > 0, `Some(0)` at the end, `None` when the
    /// reader must wait.
    pub fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        if matches!(
            self.state,
            State::ReadyToClose | State::Terminating | State::Terminated
        ) {
            return Some(0);
        }
        let n = self.rcv.read(buf);
        if n > 0 {
            return Some(n);
        }
        if self.state == State::PeerTerminating {
            return Some(0);
        }
        None
    }

    /// Payload bytes this connection holds (both windows).
    pub fn held(&self) -> usize {
        self.snd.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Kcp, Kcp) {
        let s = KcpSettings::default();
        let b = Budget::new(1 << 24);
        (Kcp::new(9, &s, b.clone()), Kcp::new(9, &s, b))
    }

    /// Delivers every datagram of `out` to `to`.
    fn deliver(out: &mut Out, to: &mut Kcp, now: u32) {
        for d in out.datagrams() {
            to.input(now, d);
        }
        out.clear();
    }

    #[test]
    fn data_flows_and_both_ends_close_as_xray_closes() {
        let (mut a, mut b) = pair();
        let msg = vec![7u8; 5000];
        assert_eq!(a.write(&msg), 5000);
        let mut out = Out::default();
        a.flush(10, &mut out);
        assert_eq!(
            out.count(),
            4,
            "{} data segments of at most mss",
            5000usize.div_ceil(a.mss())
        );
        deliver(&mut out, &mut b, 12);
        let mut got = vec![0u8; 8000];
        assert_eq!(b.read(&mut got), Some(5000));
        assert_eq!(b.read(&mut got), None);
        b.flush(20, &mut out);
        deliver(&mut out, &mut a, 22);
        a.flush(30, &mut out);
        assert!(!a.update_necessary() || out.count() > 0);
        // a closes: its segments say Close, b stops sending, then Terminate both ways.
        assert!(a.close(40));
        assert_eq!(a.state(), State::ReadyToClose);
        out.clear();
        a.flush(50, &mut out);
        assert_eq!(a.state(), State::Terminating);
        deliver(&mut out, &mut b, 52);
        assert_eq!(b.state(), State::PeerTerminating);
        assert_eq!(b.read(&mut got), Some(0));
        assert_eq!(b.write(b"late"), 0);
        assert!(b.close(60));
        assert_eq!(b.state(), State::Terminated);
        a.flush(9000, &mut out);
        assert_eq!(a.state(), State::Terminated);
    }

    #[test]
    fn a_silent_peer_closes_the_connection_after_30_seconds() {
        let (mut a, _) = pair();
        let mut out = Out::default();
        a.flush(29_999, &mut out);
        assert_eq!(a.state(), State::Active);
        a.flush(30_000, &mut out);
        assert_eq!(a.state(), State::Terminating);
    }

    #[test]
    fn rtt_follows_rfc6298_with_xrays_floor() {
        let mut r = RoundTrip {
            variation: 0,
            srtt: 0,
            rto: 100,
            min_rtt: 50,
            updated: 0,
        };
        r.update(40, 0);
        assert_eq!((r.srtt, r.variation, r.rto), (40, 20, (40 + 80) * 5 / 4));
        r.update(40, 10);
        assert_eq!(r.srtt, 50, "floored at tti");
        r.peer_rto(999, 100);
        assert_ne!(r.rto, 999, "the peer's RTO waits 3 s");
        r.peer_rto(999, 3100);
        assert_eq!(r.rto, 999);
    }
}
