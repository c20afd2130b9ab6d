//! mKCP's sending side, as Xray's `SendingWorker` runs it: the window of segments not yet
//! acknowledged, their retransmission timers and fast resend, the peer's receive window, and
//! the loss-based control window when `congestion` is on. Sans-IO: [`Sender::flush`] writes
//! the segments due into an [`Out`] batch.

use std::collections::VecDeque;

use super::segment::{put_data, OPT_CLOSE};
use super::Out;

/// Wrap-aware "`a` is before `b`" as Xray writes it (`a - b > 0x7FFFFFFF`).
pub(super) fn before(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) > 0x7FFF_FFFF
}

struct Pending {
    sn: u32,
    /// When it is sent again (ms on the connection's clock), 0 before its first send.
    timeout: u32,
    transmit: u32,
    data: Vec<u8>,
}

/// What the sending side needs of the settings.
#[derive(Clone, Copy, Debug)]
pub(super) struct SendParams {
    /// Segments per flush the uplink capacity allows (`GetSendingInFlightSize`).
    pub in_flight: u32,
    /// Segments the write buffer holds (`GetSendingBufferSize`).
    pub buffer: u32,
    pub congestion: bool,
}

pub(super) struct Sender {
    p: SendParams,
    window: VecDeque<Pending>,
    /// Xray's `totalInFlightSize`: segments sent at least once and not removed by an Ack.
    total_in_flight: u32,
    pub una: u32,
    pub next: u32,
    /// The first number the peer's window does not take.
    remote_next: u32,
    control: u32,
    una_updated: bool,
    closed: bool,
}

impl Sender {
    pub fn new(p: SendParams) -> Sender {
        Sender {
            p,
            window: VecDeque::new(),
            total_in_flight: 0,
            una: 0,
            next: 0,
            remote_next: 32,
            control: p.in_flight,
            una_updated: false,
            closed: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    /// Room for one more segment (Xray takes one past the buffer size).
    pub fn has_room(&self) -> bool {
        !self.closed && self.window.len() as u32 <= self.p.buffer
    }

    /// Queues one segment's payload; false when the buffer is full or writing is over.
    pub fn push(&mut self, data: Vec<u8>) -> bool {
        if !self.has_room() {
            return false;
        }
        self.window.push_back(Pending {
            sn: self.next,
            timeout: 0,
            transmit: 0,
            data,
        });
        self.next = self.next.wrapping_add(1);
        true
    }

    /// Drops every segment before `next` (the peer has them all).
    pub fn receiving_next(&mut self, next: u32) {
        while self.window.front().is_some_and(|s| s.sn < next) {
            self.window.pop_front();
        }
        self.find_una();
    }

    fn find_una(&mut self) {
        let first = self.una;
        self.una = self.window.front().map_or(self.next, |s| s.sn);
        if first != self.una {
            self.una_updated = true;
        }
    }

    fn remove(&mut self, sn: u32) -> bool {
        for (i, s) in self.window.iter().enumerate() {
            if s.sn > sn {
                return false;
            }
            if s.sn == sn {
                self.total_in_flight = self.total_in_flight.saturating_sub(1);
                self.window.remove(i);
                return true;
            }
        }
        false
    }

    fn ack_one(&mut self, sn: u32) -> bool {
        if before(sn, self.una) || !before(sn, self.next) {
            return false;
        }
        let removed = self.remove(sn);
        if removed {
            self.find_una();
        }
        removed
    }

    /// An Ack segment: the peer's window and next number, then its numbers. Returns the
    /// round-trip sample to take (Xray takes one when the largest number acknowledged was
    /// removed by it).
    pub fn on_ack(
        &mut self,
        now: u32,
        window: u32,
        next: u32,
        ts: u32,
        numbers: impl Iterator<Item = u32>,
        rto: u32,
    ) -> Option<u32> {
        if self.closed {
            return None;
        }
        if self.remote_next < window {
            self.remote_next = window;
        }
        self.receiving_next(next);
        let (mut max, mut max_removed, mut any) = (0u32, false, false);
        for n in numbers {
            any = true;
            let removed = self.ack_one(n);
            if max < n {
                max = n;
                max_removed = removed;
            }
        }
        if !any || !max_removed {
            return None;
        }
        // Fast resend: every earlier segment already sent comes due a third of an RTO sooner.
        for s in self.window.iter_mut() {
            if s.sn == max || before(max, s.sn) {
                break;
            }
            if s.transmit > 0 && s.timeout > rto / 3 {
                s.timeout -= rto / 3;
            }
        }
        let rtt = now.wrapping_sub(ts);
        (rtt < 10_000).then_some(rtt)
    }

    /// Sends what is due: at most the window's worth of segments (Xray's limit times its
    /// "magic" 20), each retransmitted one counted lost. Returns true when `una` moved since
    /// the last flush with nothing left in the window (the caller pings then, as Xray does).
    pub fn flush(&mut self, now: u32, rto: u32, conv: u16, closing: bool, out: &mut Out) -> bool {
        if self.closed {
            return false;
        }
        let mut cwnd = self.p.in_flight;
        let room = self.remote_next.wrapping_sub(self.una);
        if cwnd > room {
            cwnd = room;
        }
        if self.p.congestion && cwnd > self.control {
            cwnd = self.control;
        }
        let max = cwnd.wrapping_mul(20);
        if !self.window.is_empty() {
            let (mut lost, mut sent) = (0u32, 0u32);
            let opt = if closing { OPT_CLOSE } else { 0 };
            for s in self.window.iter_mut() {
                if before(now, s.timeout) {
                    continue;
                }
                if s.transmit == 0 {
                    self.total_in_flight += 1;
                } else {
                    lost += 1;
                }
                s.timeout = now.wrapping_add(rto);
                s.transmit += 1;
                put_data(&mut out.buf, conv, opt, now, s.sn, self.una, &s.data);
                out.end();
                sent += 1;
                if sent >= max {
                    break;
                }
            }
            if sent > 0 && self.total_in_flight != 0 {
                self.on_loss(lost * 100 / self.total_in_flight, rto);
            }
            self.una_updated = false;
        }
        std::mem::take(&mut self.una_updated)
    }

    fn on_loss(&mut self, rate: u32, rto: u32) {
        if !self.p.congestion || rto == 0 {
            return;
        }
        if rate >= 15 {
            self.control = 3 * self.control / 4;
        } else if rate <= 5 {
            self.control += self.control / 4;
        }
        self.control = self.control.max(16).min(2 * self.p.in_flight);
    }

    /// The peer closed or the connection ends: nothing more is sent.
    pub fn close_write(&mut self) {
        self.receiving_next(u32::MAX);
    }

    /// The connection is gone.
    pub fn release(&mut self) {
        self.window = VecDeque::new();
        self.closed = true;
    }

    /// Payload bytes held.
    pub fn held(&self) -> usize {
        self.window.iter().map(|s| s.data.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::segment::{segments, Segment};
    use super::*;

    fn sender() -> Sender {
        Sender::new(SendParams {
            in_flight: 8,
            buffer: 4,
            congestion: false,
        })
    }

    #[test]
    fn acks_clear_and_late_segments_are_resent() {
        let mut s = sender();
        for i in 0..3u8 {
            assert!(s.push(vec![i]));
        }
        let mut out = Out::default();
        s.flush(0, 100, 7, false, &mut out);
        assert_eq!(out.count(), 3);
        // Nothing is due before the RTO.
        out.clear();
        s.flush(50, 100, 7, false, &mut out);
        assert_eq!(out.count(), 0);
        // sn 1 acknowledged: 0 and 2 remain, and sn 0 gets a fast-resend nudge.
        assert_eq!(s.on_ack(60, 100, 0, 0, [1].into_iter(), 99), Some(60));
        s.flush(100, 100, 7, false, &mut out);
        let sns: Vec<u32> = out
            .datagrams()
            .flat_map(segments)
            .map(|g| match g {
                Segment::Data { sn, una, .. } => {
                    assert_eq!(una, 0);
                    sn
                }
                g => panic!("{g:?}"),
            })
            .collect();
        assert_eq!(sns, [0, 2]);
        // The peer's next number clears the window; una moves on.
        s.on_ack(110, 100, 3, 100, std::iter::empty(), 100);
        assert!(s.is_empty());
        assert_eq!(s.una, 3);
    }

    #[test]
    fn the_buffer_bounds_what_a_writer_queues() {
        let mut s = sender();
        let n = (0..100).take_while(|_| s.push(vec![0; 10])).count();
        assert_eq!(n, 5);
        s.close_write();
        assert!(s.is_empty());
        s.release();
        assert!(!s.push(vec![1]));
    }
}
