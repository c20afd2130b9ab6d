//! QUIC, a transport family beside TCP and unix sockets: endpoints on quinn (rustls on
//! aws-lc-rs underneath), the settings Xray reads from `finalmask.quicParams`, the socket with
//! finalmask's UDP masks, and congestion control chosen per connection (BBR, NewReno, Brutal).
//! Hysteria 2 (`proxy::hysteria`) runs on it.

pub mod brutal;
pub mod hop;
pub mod hysteria;
pub mod socket;
pub mod stream;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Endpoint, EndpointConfig, TokioRuntime, TransportConfig, VarInt};

pub use brutal::{Base, Rate};
pub use hysteria::{FinalMask, HysteriaSettings, Masquerade};
pub use stream::QuicStream;

use crate::transport::udpmask::UdpMasks;

/// `finalmask.quicParams.congestion`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Congestion {
    /// `""` / `brutal`: Brutal at the rate both ends agree on, BBR without one.
    #[default]
    Negotiated,
    /// `force-brutal`: Brutal at `brutalUp` whatever the peer says.
    ForceBrutal,
    Bbr,
    /// quic-go's default (NewReno here).
    Reno,
}

/// `finalmask.quicParams`, read; `None` leaves the transport's default.
#[derive(Clone, Debug, Default)]
pub struct QuicParams {
    pub congestion: Congestion,
    /// Bytes/s this end sends at most (`brutalUp`), 0 = unset.
    pub brutal_up: u64,
    /// Bytes/s this end receives at most (`brutalDown`), 0 = unset.
    pub brutal_down: u64,
    pub stream_window: Option<u64>,
    pub conn_window: Option<u64>,
    pub max_idle: Option<Duration>,
    pub keep_alive: Option<Duration>,
    pub disable_mtu_discovery: bool,
    pub max_incoming_streams: Option<u64>,
    /// `udpHop` (clients).
    pub udp_hop: Option<hop::UdpHop>,
}

/// A transport's defaults where `quicParams` says nothing.
#[derive(Clone, Copy, Debug)]
pub struct Defaults {
    pub stream_window: u64,
    pub conn_window: u64,
    pub max_idle: Duration,
    pub keep_alive: Option<Duration>,
    pub max_incoming_streams: u64,
}

impl Defaults {
    /// Hysteria's (the official implementation's and Xray's): 8 MiB per stream, 20 MiB per
    /// connection, 30 s idle, 1024 streams; no keep-alive unless asked (Xray).
    pub const HYSTERIA: Defaults = Defaults {
        stream_window: 8 << 20,
        conn_window: 20 << 20,
        max_idle: Duration::from_secs(30),
        keep_alive: None,
        max_incoming_streams: 1024,
    };
}

/// The datagram receive buffer: also the `max_datagram_frame_size` quinn announces (capped at
/// 65535), which Go peers accept above their own 1200.
const DATAGRAM_BUFFER: usize = 1 << 20;

impl QuicParams {
    /// One connection's transport settings, its controller switching to Brutal when `rate`
    /// is set.
    pub fn transport(&self, d: &Defaults, rate: Arc<Rate>) -> TransportConfig {
        let mut t = TransportConfig::default();
        let var = |v: u64| VarInt::from_u64(v).unwrap_or(VarInt::MAX);
        t.stream_receive_window(var(self.stream_window.unwrap_or(d.stream_window)));
        let conn = self.conn_window.unwrap_or(d.conn_window);
        t.receive_window(var(conn));
        t.send_window(conn.max(d.conn_window));
        let idle = self.max_idle.unwrap_or(d.max_idle);
        t.max_idle_timeout(idle.try_into().ok());
        t.keep_alive_interval(self.keep_alive.or(d.keep_alive));
        t.max_concurrent_bidi_streams(var(self
            .max_incoming_streams
            .unwrap_or(d.max_incoming_streams)));
        t.max_concurrent_uni_streams(var(16));
        t.datagram_receive_buffer_size(Some(DATAGRAM_BUFFER));
        t.datagram_send_buffer_size(DATAGRAM_BUFFER);
        // quic-go's first packets are 1280 bytes (1252 of payload); 1350 leaves Salamander
        // and a tunnel room under a 1500-byte link while a 1197-byte Hysteria datagram goes
        // whole from the start (Xray v26.3.27 cannot put fragments back together).
        t.initial_mtu(1350);
        if self.disable_mtu_discovery {
            t.mtu_discovery_config(None);
        }
        let base = match self.congestion {
            Congestion::Reno => Base::Reno,
            _ => Base::Bbr,
        };
        t.congestion_controller_factory(Arc::new(brutal::SwitchFactory { rate, base }));
        t
    }
}

/// A server endpoint on `socket`, masked by `masks`, answering with `tls` (the transport
/// settings are given per connection when it is accepted).
pub fn server(
    socket: std::net::UdpSocket,
    masks: &UdpMasks,
    tls: Arc<QuicServerConfig>,
) -> io::Result<Endpoint> {
    let socket = socket::wrap(socket, masks)?;
    let cfg = quinn::ServerConfig::with_crypto(tls);
    let mut ep = EndpointConfig::default();
    // quic-go servers without a reset key (Xray's) send no stateless resets: strangers'
    // garbage gets one at most per hour here (quinn always has a key).
    ep.min_reset_interval(Duration::from_secs(3600));
    Endpoint::new_with_abstract_socket(ep, Some(cfg), socket, Arc::new(TokioRuntime))
}

/// A client endpoint on a fresh socket of the server's address family, masked, hopping over
/// the server's ports when `hop` says so.
pub fn client(
    server: SocketAddr,
    masks: &UdpMasks,
    hop: Option<&hop::UdpHop>,
) -> io::Result<Endpoint> {
    let socket = match hop {
        Some(h) => {
            let hopping = hop::Hopping::new(server, h.pick())?;
            hop::Hopping::run(Arc::downgrade(&hopping), h.clone());
            socket::wrap_socket(hopping, masks)
        }
        None => socket::wrap(socket::bind_for(server)?, masks)?,
    };
    Endpoint::new_with_abstract_socket(
        EndpointConfig::default(),
        None,
        socket,
        Arc::new(TokioRuntime),
    )
}

/// rustls's configs as QUIC's.
pub fn server_tls(c: rustls::ServerConfig) -> Result<Arc<QuicServerConfig>, String> {
    QuicServerConfig::try_from(c)
        .map(Arc::new)
        .map_err(|e| format!("TLS for QUIC: {e}"))
}

pub fn client_tls(c: rustls::ClientConfig) -> Result<Arc<QuicClientConfig>, String> {
    QuicClientConfig::try_from(c)
        .map(Arc::new)
        .map_err(|e| format!("TLS for QUIC: {e}"))
}

/// Reads a bandwidth as Xray's `brutalUp`/`brutalDown` do: a number is bits/s; a number with
/// a unit (`bps`, `kbps`, `mbps`, `gbps`, `tbps`, also `b`/`k`/`m`/`g`/`t` and `kb`..) is in
/// 1024 multiples of bits/s. Bytes/s, or `None` when it is not a bandwidth.
pub fn parse_bandwidth(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim() {
        "" | "b" | "bps" => 1.0,
        "k" | "kb" | "kbps" => 1024.0,
        "m" | "mb" | "mbps" => 1024.0 * 1024.0,
        "g" | "gb" | "gbps" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tbps" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bits = n * mult;
    if !bits.is_finite() || bits < 0.0 {
        return None;
    }
    Some((bits / 8.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_read_as_xray_reads_them() {
        assert_eq!(parse_bandwidth("100 mbps"), Some(13_107_200));
        assert_eq!(parse_bandwidth("200 mbps"), Some(26_214_400));
        assert_eq!(parse_bandwidth("1000000"), Some(125_000));
        assert_eq!(parse_bandwidth("1.5 gbps"), Some(201_326_592));
        assert_eq!(parse_bandwidth("10 furlongs"), None);
        assert_eq!(parse_bandwidth(""), None);
    }
}
