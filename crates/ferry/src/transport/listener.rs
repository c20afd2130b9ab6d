//! Listening sockets: TCP addresses and unix sockets (a path, `@abstract`, or `@@padded`, the
//! abstract name padded with zeros to the full `sun_path` as Xray and HAProxy do), behind one
//! [`Listener`] that accepts either kind.

use std::io;
use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener, UnixStream};

use super::{tcp, BoxStream};
use crate::common::own;
use crate::common::Network;
use crate::session::{ConnInfo, Endpoint};

/// Length of `sun_path` on Linux: a padded abstract name fills all of it.
const SUN_PATH_LEN: usize = 108;

/// A unix socket address as Xray writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnixPath {
    /// A file system path.
    File(String),
    /// `@name`: an abstract socket named exactly `name`.
    Abstract(String),
    /// `@@name`: an abstract socket whose name is padded with zeros to the whole `sun_path`.
    Padded(String),
}

impl UnixPath {
    /// Reads `/path`, `@name` or `@@name`; anything else is not a unix address.
    pub fn parse(s: &str) -> Option<UnixPath> {
        if let Some(n) = s.strip_prefix("@@") {
            Some(UnixPath::Padded(n.to_string()))
        } else if let Some(n) = s.strip_prefix('@') {
            Some(UnixPath::Abstract(n.to_string()))
        } else if s.starts_with('/') {
            Some(UnixPath::File(s.to_string()))
        } else {
            None
        }
    }

    /// The text form (`/path`, `@name`, `@@name`).
    pub fn text(&self) -> String {
        match self {
            UnixPath::File(p) => p.clone(),
            UnixPath::Abstract(n) => format!("@{n}"),
            UnixPath::Padded(n) => format!("@@{n}"),
        }
    }

    fn addr(&self) -> io::Result<std::os::unix::net::SocketAddr> {
        match self {
            UnixPath::File(p) => std::os::unix::net::SocketAddr::from_pathname(split_mode(p).0),
            UnixPath::Abstract(n) => std::os::unix::net::SocketAddr::from_abstract_name(n),
            UnixPath::Padded(n) => {
                // sun_path = NUL + name + NULs up to its full length.
                let mut name = n.as_bytes().to_vec();
                if name.len() > SUN_PATH_LEN - 1 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "abstract socket name too long",
                    ));
                }
                name.resize(SUN_PATH_LEN - 1, 0);
                std::os::unix::net::SocketAddr::from_abstract_name(name)
            }
        }
    }

    /// Binds a listening socket (a stale file at a path is removed first, as Xray does).
    pub fn bind(&self) -> io::Result<UnixListener> {
        let mut mode = None;
        if let UnixPath::File(p) = self {
            let (p, m) = split_mode(p);
            mode = m;
            if std::fs::symlink_metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::FileTypeExt;
                m.file_type().is_socket()
            }) {
                std::fs::remove_file(p)?;
            }
        }
        let l = std::os::unix::net::UnixListener::bind_addr(&self.addr()?)?;
        if let (Some(m), UnixPath::File(p)) = (mode, self) {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(split_mode(p).0, std::fs::Permissions::from_mode(m))?;
        }
        l.set_nonblocking(true)?;
        UnixListener::from_std(l)
    }

    /// Connects to this socket.
    pub async fn connect(&self) -> io::Result<UnixStream> {
        let addr = self.addr()?;
        // std connects blocking; a local unix connect does not wait on the network.
        let s = std::os::unix::net::UnixStream::connect_addr(&addr)?;
        s.set_nonblocking(true)?;
        UnixStream::from_std(s)
    }
}

/// A unix listener's text (`/path,0666`, `@name`, `@@name`) without its file mode: what a dialer
/// names it by.
pub fn unix_text_without_mode(text: &str) -> &str {
    if text.starts_with('@') {
        text
    } else {
        split_mode(text).0
    }
}

/// `/path/x.sock,0666`: the path and the file mode Xray sets on the socket (octal).
fn split_mode(p: &str) -> (&str, Option<u32>) {
    if let Some((path, m)) = p.rsplit_once(',') {
        if (3..=4).contains(&m.len()) {
            if let Ok(mode) = u32::from_str_radix(m, 8) {
                return (path, Some(mode));
            }
        }
    }
    (p, None)
}

/// A bound inbound socket of either kind.
pub enum Listener {
    /// The registration marks the socket as this process's own while it is bound.
    Tcp(TcpListener, tcp::SockOpts, own::Registration),
    Unix(UnixListener, Arc<str>),
    /// mKCP sessions on a UDP socket.
    Kcp(super::kcp::KcpListener, own::Registration),
}

impl Listener {
    /// Binds a TCP listener.
    pub fn tcp(addr: SocketAddr, opts: tcp::SockOpts) -> io::Result<Listener> {
        let l = tcp::listen_with(addr, &opts)?;
        let own = own::register(Network::Tcp, l.local_addr()?);
        Ok(Listener::Tcp(l, opts, own))
    }

    /// Serves mKCP on a bound UDP socket, under `masks`.
    pub fn kcp(
        socket: tokio::net::UdpSocket,
        settings: Arc<super::kcp::KcpSettings>,
        masks: super::udpmask::UdpMasks,
    ) -> io::Result<Listener> {
        let own = own::register(Network::Udp, socket.local_addr()?);
        Ok(Listener::Kcp(
            super::kcp::KcpListener::new(socket, settings, masks)?,
            own,
        ))
    }

    /// Binds a unix listener.
    pub fn unix(path: &UnixPath) -> io::Result<Listener> {
        Ok(Listener::Unix(path.bind()?, path.text().into()))
    }

    /// Where it listens.
    pub fn local(&self) -> io::Result<Endpoint> {
        match self {
            Listener::Tcp(l, _, _) => Ok(Endpoint::Ip(l.local_addr()?)),
            Listener::Unix(_, p) => Ok(Endpoint::Unix(p.clone())),
            Listener::Kcp(l, _) => Ok(Endpoint::Ip(l.local_addr())),
        }
    }

    /// Accepts one connection: the stream, and what is known of it (its source, the local
    /// endpoint it arrived on, and on a transparent listener its original destination).
    pub async fn accept(&self) -> io::Result<(BoxStream, ConnInfo)> {
        match self {
            Listener::Tcp(l, opts, _) => {
                let (s, peer) = l.accept().await?;
                if let Err(e) = tcp::accepted(&s, opts) {
                    tracing::debug!("socket options on {peer}: {e}");
                }
                // The address this connection arrived on (the listener's may be unspecified).
                let local = s.local_addr().or_else(|_| l.local_addr())?;
                let mut info = ConnInfo::new(Endpoint::Ip(peer), Endpoint::Ip(local));
                info.original = tcp::original_dst(&s, opts.tproxy);
                Ok((Box::new(s), info))
            }
            Listener::Unix(l, p) => {
                let (s, _) = l.accept().await?;
                let e = Endpoint::Unix(p.clone());
                Ok((Box::new(s), ConnInfo::new(e.clone(), e)))
            }
            Listener::Kcp(l, _) => l.accept().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn parses_xray_spellings() {
        assert_eq!(
            UnixPath::parse("/run/x.sock"),
            Some(UnixPath::File("/run/x.sock".into()))
        );
        assert_eq!(UnixPath::parse("@a"), Some(UnixPath::Abstract("a".into())));
        assert_eq!(UnixPath::parse("@@a"), Some(UnixPath::Padded("a".into())));
        assert_eq!(UnixPath::parse("127.0.0.1"), None);
    }

    #[tokio::test]
    async fn padded_and_plain_abstract_names_are_different_sockets() {
        let name = format!("ferry-test-{}", std::process::id());
        let padded = UnixPath::Padded(name.clone());
        let plain = UnixPath::Abstract(name);
        let l = Listener::unix(&padded).unwrap();
        // The plain name is not the padded one: nothing listens there.
        assert!(plain.connect().await.is_err());
        let mut c = padded.connect().await.unwrap();
        let (mut s, info) = l.accept().await.unwrap();
        assert_eq!(info.local.to_string(), format!("unix:{}", padded.text()));
        assert_eq!(info.source.port(), 0);
        assert_eq!(info.original, None);
        c.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
    }

    #[tokio::test]
    async fn a_mode_suffix_sets_the_socket_file_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ferry-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.sock");
        let p = UnixPath::parse(&format!("{},0666", path.display())).unwrap();
        let _l = Listener::unix(&p).unwrap();
        let m = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(m, 0o666);
        assert!(p.connect().await.is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
