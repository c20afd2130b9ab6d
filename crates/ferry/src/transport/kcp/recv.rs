//! mKCP's receiving side, as Xray's `ReceivingWorker` and `AckList` run it: segments held by
//! number inside the receive window (anything outside it is dropped unacknowledged), the
//! numbers to acknowledge (each again every half RTO until the sender's `una` passes it), and
//! the in-order bytes the reader takes. Bounded: the window holds at most `window` segments,
//! every number once, and the bytes held count against a budget shared by a listener's
//! sessions (a segment that would pass it is dropped, and comes again later).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::segment::{put_ack, ACK_LIMIT, ACK_OVERHEAD};
use super::Out;

/// Bytes the receive windows of one listener's (or one client connection's) sessions may
/// hold together.
#[derive(Debug)]
pub struct Budget {
    held: AtomicUsize,
    limit: usize,
}

impl Budget {
    pub fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget {
            held: AtomicUsize::new(0),
            limit,
        })
    }

    fn take(&self, n: usize) -> bool {
        let mut cur = self.held.load(Ordering::Relaxed);
        loop {
            if cur + n > self.limit {
                return false;
            }
            match self.held.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }

    fn give(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

struct Ack {
    sn: u32,
    ts: u32,
    next_flush: u32,
}

pub(super) struct Receiver {
    window_size: u32,
    /// Slot i holds segment `next + i`.
    window: VecDeque<Option<Vec<u8>>>,
    pub next: u32,
    /// What the reader has not taken of a segment it read in part.
    leftover: Vec<u8>,
    left_at: usize,
    acks: Vec<Ack>,
    dirty: bool,
    /// Numbers per Ack segment: `(mtu - 17) / 4`, 1 to 128.
    ack_limit: usize,
    budget: Arc<Budget>,
}

impl Receiver {
    pub fn new(window_size: u32, mtu: u32, budget: Arc<Budget>) -> Receiver {
        let limit = (mtu as usize).saturating_sub(ACK_OVERHEAD) / 4;
        Receiver {
            window_size,
            window: VecDeque::new(),
            next: 0,
            leftover: Vec::new(),
            left_at: 0,
            acks: Vec::new(),
            dirty: false,
            ack_limit: limit.clamp(1, ACK_LIMIT),
            budget,
        }
    }

    /// A data segment from the peer.
    pub fn on_data(&mut self, sn: u32, ts: u32, una: u32, data: &[u8]) {
        let idx = sn.wrapping_sub(self.next);
        if idx >= self.window_size {
            return;
        }
        let idx = idx as usize;
        let have = self.window.get(idx).is_some_and(Option::is_some);
        if !have && !self.budget.take(data.len()) {
            // Over the budget: neither kept nor acknowledged, so the sender sends it again.
            return;
        }
        self.clear_acks(una);
        match self.acks.iter_mut().find(|a| a.sn == sn) {
            // Already listed: acknowledged again at the next flush, with this timestamp.
            Some(a) => {
                a.ts = ts;
                a.next_flush = 0;
            }
            None => self.acks.push(Ack {
                sn,
                ts,
                next_flush: 0,
            }),
        }
        self.dirty = true;
        if have {
            return;
        }
        if self.window.len() <= idx {
            self.window.resize(idx + 1, None);
        }
        self.window[idx] = Some(data.to_vec());
    }

    /// The peer's first unacknowledged number: numbers before it need no more Acks.
    pub fn clear_acks(&mut self, una: u32) {
        let before = self.acks.len();
        self.acks.retain(|a| a.sn >= una);
        if self.acks.len() < before {
            self.dirty = true;
        }
    }

    /// Whether the next segment in order is here.
    pub fn readable(&self) -> bool {
        self.left_at < self.leftover.len() || self.window.front().is_some_and(Option::is_some)
    }

    /// Copies in-order bytes into `buf`; the number copied (0: nothing in order yet).
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            if self.left_at < self.leftover.len() {
                let k = (self.leftover.len() - self.left_at).min(buf.len() - n);
                buf[n..n + k].copy_from_slice(&self.leftover[self.left_at..self.left_at + k]);
                self.left_at += k;
                n += k;
                if self.left_at == self.leftover.len() {
                    self.budget.give(self.leftover.len());
                    self.leftover = Vec::new();
                    self.left_at = 0;
                }
                continue;
            }
            match self.window.front_mut().and_then(Option::take) {
                Some(seg) => {
                    self.window.pop_front();
                    self.next = self.next.wrapping_add(1);
                    self.leftover = seg;
                    self.left_at = 0;
                    if self.leftover.is_empty() {
                        // An empty segment still moves the window on.
                        self.leftover = Vec::new();
                    }
                }
                None => break,
            }
        }
        n
    }

    /// Acks are pending (Xray keeps its data updater running while there are).
    pub fn has_acks(&self) -> bool {
        !self.acks.is_empty()
    }

    /// Writes the Acks due (Xray's `AckList.Flush`): every number not acknowledged within
    /// half an RTO (at least 20 ms), filled up with the others, and an Ack anyway when the
    /// list changed.
    pub fn flush(&mut self, now: u32, rto: u32, conv: u16, opt: u8, out: &mut Out) {
        let window = self.next.wrapping_add(self.window_size);
        let mut batch: Vec<u32> = Vec::with_capacity(self.ack_limit);
        let mut ts = 0u32;
        let mut waiting: Vec<u32> = Vec::new();
        let again = (rto / 2).max(20);
        for a in self.acks.iter_mut() {
            if a.next_flush > now {
                if waiting.len() < ACK_LIMIT {
                    waiting.push(a.sn);
                }
                continue;
            }
            batch.push(a.sn);
            if a.ts.wrapping_sub(ts) < 0x7FFF_FFFF {
                ts = a.ts;
            }
            a.next_flush = now.wrapping_add(again);
            if batch.len() == self.ack_limit {
                put_ack(&mut out.buf, conv, opt, window, self.next, ts, &batch);
                out.end();
                batch.clear();
                ts = 0;
                self.dirty = false;
            }
        }
        if self.dirty || !batch.is_empty() {
            for sn in waiting {
                if batch.len() == self.ack_limit {
                    break;
                }
                batch.push(sn);
            }
            put_ack(&mut out.buf, conv, opt, window, self.next, ts, &batch);
            out.end();
            self.dirty = false;
        }
    }

    /// The connection is gone: what it held goes back to the budget.
    pub fn release(&mut self) {
        let held: usize =
            self.window.iter().flatten().map(Vec::len).sum::<usize>() + self.leftover.len();
        self.budget.give(held);
        self.window = VecDeque::new();
        self.leftover = Vec::new();
        self.left_at = 0;
        self.acks = Vec::new();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::super::segment::{segments, Segment};
    use super::*;

    fn acked(out: &Out) -> Vec<u32> {
        out.datagrams()
            .flat_map(segments)
            .flat_map(|s| match s {
                Segment::Ack { numbers, .. } => Segment::ack_numbers(numbers).collect::<Vec<_>>(),
                s => panic!("{s:?}"),
            })
            .collect()
    }

    #[test]
    fn out_of_order_segments_wait_for_the_gap_and_are_acked_once_each() {
        let b = Budget::new(1 << 20);
        let mut r = Receiver::new(4, 1350, b.clone());
        r.on_data(1, 5, 0, b"world");
        r.on_data(1, 6, 0, b"world");
        assert!(!r.readable());
        // Outside the window: dropped without an Ack.
        r.on_data(9, 5, 0, b"far");
        let mut out = Out::default();
        r.flush(10, 100, 1, 0, &mut out);
        assert_eq!(acked(&out), [1]);
        r.on_data(0, 7, 0, b"hello ");
        let mut buf = [0u8; 64];
        let n = r.read(&mut buf);
        assert_eq!(&buf[..n], b"hello world");
        assert_eq!(r.next, 2);
        assert_eq!(b.held(), 0);
        // Numbers are acknowledged again after half an RTO, until the sender's una passes.
        out.clear();
        r.flush(30, 100, 1, 0, &mut out);
        assert_eq!(acked(&out), [0, 1]);
        r.clear_acks(2);
        assert!(!r.has_acks());
    }

    #[test]
    fn the_budget_bounds_what_all_sessions_hold() {
        let b = Budget::new(10);
        let mut r = Receiver::new(100, 1350, b.clone());
        r.on_data(1, 0, 0, &[0; 8]);
        r.on_data(2, 0, 0, &[0; 8]);
        assert_eq!(b.held(), 8);
        let mut out = Out::default();
        r.flush(0, 100, 1, 0, &mut out);
        assert_eq!(acked(&out), [1]);
        drop(r);
        assert_eq!(b.held(), 0);
    }
}
