//! XTLS Vision (`flow: "xtls-rprx-vision"`, Xray's `proxy/proxy.go`): the VLESS payload
//! is cut into padded blocks while the tunnelled connection shakes hands, so the outer TLS
//! record sizes do not show a TLS handshake inside; once the inner connection is TLS 1.3 and
//! sends application data, each side tells the other ("direct") and from then on writes the
//! inner records on the bare socket, and the relay splices.
//!
//! This module is the socket-free core, driven buffer by buffer: the [`TlsFilter`] that
//! recognises the inner TLS, the [`Unpadder`] that reads blocks and the [`Padder`] that writes
//! them. [`stream::VisionStream`] puts them on a connection. The buffer boundaries follow
//! Xray's: its reads deliver at most [`BUFFER`] bytes, and its filter counts buffers.

pub mod stream;

pub use stream::VisionStream;

/// The flow as it travels in the request addons.
pub const FLOW: &str = "xtls-rprx-vision";
/// The outbound flow that also lets UDP to port 443 through.
pub const FLOW_UDP443: &str = "xtls-rprx-vision-udp443";

/// Xray's buffer size: reads and the filter work on pieces this large.
pub const BUFFER: usize = 8192;
/// UUID (16) + block header (5).
const OVERHEAD: usize = 21;
/// How many buffers (both directions together) the filter looks at.
const PACKETS_TO_FILTER: i32 = 8;
/// The padding seeds (`testseed`): long padding below `[0]` bytes of content is
/// `rand[0, [1]) + [2] - content`; otherwise `rand[0, [3])`.
pub const DEFAULT_SEEDS: [u32; 4] = [900, 500, 900, 256];

const APP_DATA: [u8; 3] = [0x17, 0x03, 0x03];
const TLS13_SUPPORTED_VERSIONS: [u8; 6] = [0x00, 0x2b, 0x00, 0x02, 0x03, 0x04];

/// The command that ends each block's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Another block follows.
    Continue,
    /// Padding is over: the rest goes through the outer TLS as it is.
    End,
    /// Padding is over and the sender writes on the bare socket from its next write.
    Direct,
    /// A byte Xray does not know: the blocks end, and the reader stays in padding mode.
    Other(u8),
}

impl Command {
    pub fn from_byte(b: u8) -> Command {
        match b {
            0 => Command::Continue,
            1 => Command::End,
            2 => Command::Direct,
            b => Command::Other(b),
        }
    }

    pub fn byte(self) -> u8 {
        match self {
            Command::Continue => 0,
            Command::End => 1,
            Command::Direct => 2,
            Command::Other(b) => b,
        }
    }
}

/// What the first buffers of both directions told about the tunnelled connection
/// (Xray's `XtlsFilterTls`). Shared by a connection's reader and writer.
#[derive(Clone, Debug)]
pub struct TlsFilter {
    packets_left: i32,
    /// A ClientHello or ServerHello went by.
    pub is_tls: bool,
    /// A ServerHello went by.
    pub is_tls12_or_above: bool,
    /// The inner TLS is 1.3 with a cipher suite that allows the direct mode.
    pub enable_xtls: bool,
    pub cipher: u16,
    server_hello_left: i32,
}

impl Default for TlsFilter {
    fn default() -> Self {
        TlsFilter {
            packets_left: PACKETS_TO_FILTER,
            is_tls: false,
            is_tls12_or_above: false,
            enable_xtls: false,
            cipher: 0,
            server_hello_left: -1,
        }
    }
}

impl TlsFilter {
    /// Still looking.
    pub fn active(&self) -> bool {
        self.packets_left > 0
    }

    /// Buffers it may still look at.
    pub fn packets_left(&self) -> i32 {
        self.packets_left
    }

    /// Looks at a batch of buffers, in order; stops once the ServerHello told the version.
    pub fn inspect<'a>(&mut self, batch: impl IntoIterator<Item = &'a [u8]>) {
        for b in batch {
            self.packets_left -= 1;
            if b.len() >= 6 {
                if b[..3] == [0x16, 0x03, 0x03] && b[5] == 0x02 {
                    // ServerHello: record length + header, then (past the 2-byte version, the
                    // 32-byte random and the session id) the cipher suite.
                    self.server_hello_left = i32::from(u16::from_be_bytes([b[3], b[4]])) + 5;
                    self.is_tls12_or_above = true;
                    self.is_tls = true;
                    if b.len() >= 79 && self.server_hello_left >= 79 {
                        let sid = b[43] as usize;
                        if let Some(c) = b.get(44 + sid..46 + sid) {
                            self.cipher = u16::from_be_bytes([c[0], c[1]]);
                        }
                    }
                } else if b[..2] == [0x16, 0x03] && b[5] == 0x01 {
                    self.is_tls = true;
                }
            }
            if self.server_hello_left > 0 {
                let end = (self.server_hello_left as usize).min(b.len());
                self.server_hello_left -= b.len() as i32;
                if contains(&b[..end], &TLS13_SUPPORTED_VERSIONS) {
                    // TLS_AES_128_CCM_8_SHA256 (0x1305) and pre-1.3 suites stay in TLS.
                    self.enable_xtls = matches!(self.cipher, 0x1301..=0x1304);
                    self.packets_left = 0;
                    return;
                } else if self.server_hello_left <= 0 {
                    self.packets_left = 0;
                    return;
                }
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Where the block reader is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// Between block sequences: a buffer of 21 bytes or more that starts with the UUID starts
    /// one; anything else passes as it is.
    Idle,
    /// Reading the 5-byte header (`got` bytes of it so far).
    Header {
        got: u8,
        bytes: [u8; 5],
    },
    Content {
        left: u16,
        padding: u16,
    },
    Padding {
        left: u16,
    },
}

/// What the reader should do after a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadState {
    /// Still inside padded blocks.
    Padded,
    /// Padding ended: read the outer TLS as it is.
    Plain,
    /// The peer writes on the bare socket from here.
    Direct,
}

/// Reads blocks (Xray's `XtlsUnpadding`), one buffer at a time, keeping its place across
/// buffers.
#[derive(Clone, Debug)]
pub struct Unpadder {
    uuid: [u8; 16],
    block: Block,
    /// The command of the current (or last) block.
    cmd: Command,
    state: ReadState,
}

impl Unpadder {
    pub fn new(uuid: [u8; 16]) -> Self {
        Unpadder {
            uuid,
            block: Block::Idle,
            cmd: Command::Continue,
            state: ReadState::Padded,
        }
    }

    /// Where the reader stands after the buffers given so far.
    pub fn state(&self) -> ReadState {
        self.state
    }

    /// Unpads one buffer, appending its content to `out`.
    pub fn unpad(&mut self, mut b: &[u8], out: &mut Vec<u8>) {
        if self.block == Block::Idle {
            if b.len() >= OVERHEAD && b[..16] == self.uuid {
                b = &b[16..];
                self.block = Block::Header {
                    got: 0,
                    bytes: [0; 5],
                };
            } else {
                out.extend_from_slice(b);
                return;
            }
        }
        while !b.is_empty() {
            match &mut self.block {
                Block::Idle => unreachable!("a block is being read"),
                Block::Header { got, bytes } => {
                    bytes[*got as usize] = b[0];
                    b = &b[1..];
                    *got += 1;
                    if *got == 1 {
                        self.cmd = Command::from_byte(bytes[0]);
                    }
                    if *got < 5 {
                        continue;
                    }
                    let content = u16::from_be_bytes([bytes[1], bytes[2]]);
                    let padding = u16::from_be_bytes([bytes[3], bytes[4]]);
                    self.block = Block::Content {
                        left: content,
                        padding,
                    };
                }
                Block::Content { left, padding } => {
                    let n = (*left as usize).min(b.len());
                    out.extend_from_slice(&b[..n]);
                    b = &b[n..];
                    *left -= n as u16;
                    if *left == 0 {
                        self.block = Block::Padding { left: *padding };
                    }
                }
                Block::Padding { left } => {
                    let n = (*left as usize).min(b.len());
                    b = &b[n..];
                    *left -= n as u16;
                }
            }
            // Empty content and padding finish a block as soon as they are reached.
            if let Block::Content { left: 0, padding } = self.block {
                self.block = Block::Padding { left: padding };
            }
            if self.block == (Block::Padding { left: 0 }) {
                if self.cmd == Command::Continue {
                    self.block = Block::Header {
                        got: 0,
                        bytes: [0; 5],
                    };
                } else {
                    // The sequence ended: whatever follows in this buffer is plain.
                    self.block = Block::Idle;
                    out.extend_from_slice(b);
                    break;
                }
            }
        }
    }

    /// Ends a batch of buffers: works out whether padding goes on (Xray decides this once per
    /// batch, from the last block's command).
    pub fn end_batch(&mut self) -> ReadState {
        let in_block = !matches!(self.block, Block::Idle)
            && self.block
                != (Block::Header {
                    got: 0,
                    bytes: [0; 5],
                });
        self.state = if in_block {
            ReadState::Padded
        } else {
            match self.cmd {
                Command::Continue => ReadState::Padded,
                Command::End => ReadState::Plain,
                Command::Direct => ReadState::Direct,
                // Xray logs the unknown command and leaves the state as it was.
                Command::Other(_) => self.state,
            }
        };
        self.state
    }
}

/// What the writer does with the next batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteState {
    /// Frames batches into padded blocks.
    Padding,
    /// Padding ended: writes through the outer TLS as they are.
    Plain,
    /// A Direct block went out: the next write goes on the bare socket.
    DirectNext,
}

/// Follows the inner TLS records of one direction from its first byte, to know where they
/// begin inside a batch.
#[derive(Clone, Debug, Default)]
struct Records {
    hdr: [u8; 5],
    got: usize,
    /// Bytes left of the current record's body.
    left: usize,
    /// The bytes stopped looking like TLS records: no longer followed.
    lost: bool,
}

impl Records {
    /// Follows `data`: pushes the offsets where a record header starts, and says whether
    /// `data` ends exactly at the end of a record.
    fn follow(&mut self, data: &[u8], starts: &mut Vec<usize>) -> bool {
        let mut i = 0;
        while i < data.len() && !self.lost {
            if self.left > 0 {
                let n = self.left.min(data.len() - i);
                i += n;
                self.left -= n;
                continue;
            }
            if self.got == 0 {
                starts.push(i);
            }
            self.hdr[self.got] = data[i];
            self.got += 1;
            i += 1;
            if self.got == 5 {
                let len = u16::from_be_bytes([self.hdr[3], self.hdr[4]]) as usize;
                let tls = (20..=23).contains(&self.hdr[0]) && self.hdr[1] == 3;
                self.lost = !tls || len == 0 || len > 16384 + 2048;
                self.left = len;
                self.got = 0;
            }
        }
        !self.lost && self.got == 0 && self.left == 0
    }
}

/// Writes blocks (Xray's `VisionWriter`).
///
/// One thing differs from Xray, on purpose: Xray ends padding only with a batch that is
/// nothing but whole application-data records, so a direction whose reads never end on a
/// record boundary (a bulk upload) stays padded for good. This writer follows the inner
/// records and, once the inner ServerHello went by, ends padding at the last run of whole
/// application-data records in a batch: what comes before goes in padded blocks, the run ends
/// with the End or Direct block, and what comes after goes plain (after Direct, on the bare
/// socket). The receiver sees nothing it would not see from Xray.
#[derive(Clone, Debug)]
pub struct Padder {
    /// Sent once, in front of the first block.
    uuid: Option<[u8; 16]>,
    seeds: [u32; 4],
    state: WriteState,
    records: Records,
}

impl Padder {
    pub fn new(uuid: [u8; 16], seeds: [u32; 4]) -> Self {
        Padder {
            uuid: Some(uuid),
            seeds,
            state: WriteState::Padding,
            records: Records::default(),
        }
    }

    pub fn state(&self) -> WriteState {
        self.state
    }

    /// The Direct block was flushed and the writer now writes on the bare socket.
    pub fn direct_done(&mut self) {
        debug_assert_eq!(self.state, WriteState::DirectNext);
        self.state = WriteState::Plain;
    }

    /// A content-less block with long padding (the client's first flight when the
    /// application has not spoken yet: it hides the VLESS header's length).
    pub fn write_empty(&mut self, out: &mut Vec<u8>) {
        self.block(&[], Command::Continue, true, out);
    }

    /// Frames one batch read from the local side (only while [`WriteState::Padding`]).
    /// `filter` is the connection's, shared with its reader. Returns where in `data` the bytes
    /// to write on the bare socket begin, once the Direct block is out (`data.len()` when
    /// there are none).
    pub fn write(&mut self, data: &[u8], filter: &mut TlsFilter, out: &mut Vec<u8>) -> usize {
        debug_assert_eq!(self.state, WriteState::Padding);
        // Xray reads its local side into buffers of BUFFER bytes: the filter counts those.
        if filter.active() {
            filter.inspect(data.chunks(BUFFER));
        }
        let mut starts = Vec::new();
        let aligned = self.records.follow(data, &mut starts);
        if is_complete_record(data) || !filter.is_tls12_or_above {
            self.frame(data, true, filter, out);
            return data.len();
        }
        let Some((from, to)) = app_data_run(data, &starts, aligned) else {
            self.frame(data, false, filter, out);
            return data.len();
        };
        self.frame(&data[..from], false, filter, out);
        self.frame(&data[from..to], true, filter, out);
        match self.state {
            WriteState::DirectNext => to,
            _ => {
                out.extend_from_slice(&data[to..]);
                data.len()
            }
        }
    }

    /// Xray's framing of one batch; `complete`: the batch is whole application-data records.
    fn frame(&mut self, data: &[u8], complete: bool, filter: &TlsFilter, out: &mut Vec<u8>) {
        if data.is_empty() {
            return;
        }
        let complete = complete && is_complete_record(data);
        let pieces = reshape(data);
        let mut long = filter.is_tls;
        let mut padding = true;
        let mut direct = false;
        let last = pieces.len().saturating_sub(1);
        let end_cmd = |enable_xtls: bool| match enable_xtls {
            true => Command::Direct,
            false => Command::End,
        };
        for (i, b) in pieces.iter().enumerate() {
            if filter.is_tls && b.len() >= 6 && b[..3] == APP_DATA && complete {
                // The inner TLS sends application data: padding ends with this batch.
                direct |= filter.enable_xtls;
                let cmd = match i == last {
                    true => end_cmd(filter.enable_xtls),
                    false => Command::Continue,
                };
                self.block(b, cmd, true, out);
                padding = false;
                long = false;
                continue;
            } else if !filter.is_tls12_or_above && filter.packets_left() <= 1 {
                // Not TLS (or TLS without a ServerHello yet) and the filter is done: end here;
                // the rest of the batch goes out as it is (as Xray, one packet early for older
                // receivers).
                padding = false;
                self.block(b, Command::End, long, out);
                for rest in &pieces[i + 1..] {
                    out.extend_from_slice(rest);
                }
                break;
            }
            let cmd = match i == last && !padding {
                true => end_cmd(filter.enable_xtls),
                false => Command::Continue,
            };
            self.block(b, cmd, long, out);
        }
        if !padding {
            self.state = match direct {
                true => WriteState::DirectNext,
                false => WriteState::Plain,
            };
        }
    }

    /// One block: `[UUID] cmd content_len padding_len content zeros`.
    fn block(&mut self, content: &[u8], cmd: Command, long: bool, out: &mut Vec<u8>) {
        let s = self.seeds;
        let len = content.len() as u32;
        let mut padding = if long && len < s[0] {
            random_below(s[1]) + s[2] - len.min(s[2])
        } else {
            random_below(s[3])
        };
        padding = padding.min((BUFFER - OVERHEAD) as u32 - len.min((BUFFER - OVERHEAD) as u32));
        if let Some(uuid) = self.uuid.take() {
            out.extend_from_slice(&uuid);
        }
        out.push(cmd.byte());
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out.extend_from_slice(&(padding as u16).to_be_bytes());
        out.extend_from_slice(content);
        out.resize(out.len() + padding as usize, 0);
    }
}

/// The last run of whole application-data records in a batch, `(from, to)`: `starts` are
/// the record starts found in it, `aligned` says the batch ends at a record end.
fn app_data_run(data: &[u8], starts: &[usize], aligned: bool) -> Option<(usize, usize)> {
    // Whole records lie between consecutive bounds; the last start begins an incomplete
    // record unless the batch is aligned.
    let mut bounds = starts.to_vec();
    if aligned {
        bounds.push(data.len());
    }
    let to = *bounds.last()?;
    let mut from = to;
    for w in bounds.windows(2).rev() {
        if !data[w[0]..w[1]].starts_with(&APP_DATA) {
            break;
        }
        from = w[0];
    }
    (from < to).then_some((from, to))
}

/// A uniform number in `[0, n)` (0 when `n` is 0).
fn random_below(n: u32) -> u32 {
    if n == 0 {
        return 0;
    }
    let mut b = [0u8; 8];
    if aws_lc_rs::rand::fill(&mut b).is_err() {
        return 0;
    }
    (u64::from_le_bytes(b) % u64::from(n)) as u32
}

/// The batch is a non-empty run of whole application-data records (Xray's
/// `IsCompleteRecord`).
pub fn is_complete_record(mut b: &[u8]) -> bool {
    if b.is_empty() {
        return false;
    }
    while !b.is_empty() {
        if b.len() < 5 || b[..3] != APP_DATA {
            return false;
        }
        let len = u16::from_be_bytes([b[3], b[4]]) as usize;
        if len == 0 || b.len() < 5 + len {
            return false;
        }
        b = &b[5 + len..];
    }
    true
}

/// Cuts a batch into Xray's buffers (at most [`BUFFER`] bytes each, as its reads deliver them),
/// then splits every buffer too long for one block: at its last application-data record start
/// if that is in `[21, 8171]`, otherwise in the middle (Xray's `ReshapeMultiBuffer`).
fn reshape(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(data.len() / BUFFER + 2);
    for b in data.chunks(BUFFER) {
        if b.len() < BUFFER - OVERHEAD {
            out.push(b);
            continue;
        }
        let at = match b.windows(3).rposition(|w| w == APP_DATA) {
            Some(i) if (OVERHEAD..=BUFFER - OVERHEAD).contains(&i) => i,
            _ => BUFFER / 2,
        };
        out.push(&b[..at]);
        out.push(&b[at..]);
    }
    if out.is_empty() {
        out.push(data);
    }
    out
}

#[cfg(test)]
mod tests;
