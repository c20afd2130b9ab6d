//! random_head (shadowsocksr.md §5.2): one random, CRC-closed head each way, then raw bytes.

use super::super::util::{crc32, rand_u8, random_bytes, Error, Result};

#[derive(Default)]
pub struct RandomHead {
    sent_head: bool,
    raw_sent: bool,
    raw_recv: bool,
    recv_head: bool,
    queue: Vec<u8>,
}

impl RandomHead {
    fn head(out: &mut Vec<u8>) {
        let d = random_bytes(rand_u8() as usize % 96 + 4);
        let crc = 0xffff_ffffu32.wrapping_sub(crc32(&[&d]));
        out.extend_from_slice(&d);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    pub(super) fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.raw_sent {
            out.extend_from_slice(data);
            return;
        }
        self.queue.extend_from_slice(data);
        if !self.sent_head {
            self.sent_head = true;
            Self::head(out);
            return;
        }
        if self.raw_recv {
            out.append(&mut self.queue);
            self.raw_sent = true;
        }
    }

    pub(super) fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> bool {
        if self.raw_recv {
            out.extend_from_slice(data);
            return false;
        }
        self.raw_recv = true;
        true
    }

    pub(super) fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_head {
            self.sent_head = true;
            out.extend_from_slice(&random_bytes(rand_u8() as usize % 96 + 4));
        }
        out.extend_from_slice(data);
    }

    pub(super) fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_head {
            out.extend_from_slice(data);
            return Ok(false);
        }
        self.recv_head = true;
        if crc32(&[data]) != 0xffff_ffff {
            return Err(Error::Obfs);
        }
        Ok(true)
    }
}
