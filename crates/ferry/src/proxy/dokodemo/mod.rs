//! `tunnel` (Xray's current name; also `dokodemo-door`): forwards everything arriving on a port
//! to one address. Xray's fields: `rewriteAddress`/`rewritePort`/`allowedNetwork`, with the
//! older `address`/`port`/`network` taking precedence when both are given. Without an address
//! the target is the loopback address of the connection's family, without a port the port the
//! connection arrived on; `portMap` picks the target by that port. With `followRedirect` the
//! target is where the connection or datagram was going before a transparent-proxy rule sent
//! it here (`sockopt.tproxy`: `SO_ORIGINAL_DST` after `REDIRECT`, the local address after
//! `TPROXY`; for UDP each datagram's original destination, and replies sent from it).

pub mod api;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::net::UdpSocket;

use super::{Accepted, Endpoint, InboundBuild, InboundCtx, InboundHandler};
use crate::common::own;
use crate::common::{Address, Destination, Network};
use crate::config::reader::{as_str, ConfigError, Obj, Result};
use crate::proxy::udp::{NatKey, UdpReply, MAX_DATAGRAM};
use crate::transport::udp::{self, Forged};
use crate::transport::BoxStream;

/// dokodemo's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build),
    api: api::API,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["dokodemo-door", "tunnel"])
};

/// An address and port where either may be left to the connection.
type Target = (Option<Address>, Option<u16>);

pub struct Dokodemo {
    target: Target,
    /// `portMap`: local port -> target, overriding `target` for connections on that port.
    port_map: HashMap<u16, Target>,
    networks: Vec<Network>,
    /// `userLevel`: the policy level of its sessions.
    level: u32,
    /// `followRedirect`: the target is the original destination.
    follow: bool,
}

/// Reads `"host:port"`, where either side may be empty (`":80"`, `"10.0.0.1:"`), as Xray's
/// `portMap` values.
fn parse_host_port(s: &str, path: &str) -> Result<Target> {
    let bad = || ConfigError::new(path, format!("{s:?} is not host:port"));
    let (h, p) = s.rsplit_once(':').ok_or_else(bad)?;
    let h = h.trim_start_matches('[').trim_end_matches(']');
    let port = match p {
        "" => None,
        p => Some(p.parse::<u16>().map_err(|_| bad())?).filter(|p| *p != 0),
    };
    Ok(((!h.is_empty()).then(|| Address::parse(h)), port))
}

pub fn build(o: &Obj<'_>, _b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    Ok(Arc::new(parse(o)?))
}

fn parse(o: &Obj<'_>) -> Result<Dokodemo> {
    // Both spellings are read (so neither is reported unknown); the older one wins, as in Xray.
    let rewrite_addr = o.str("rewriteAddress")?;
    let rewrite_port = o.u64("rewritePort")?;
    let rewrite_nets = o.str_list("allowedNetwork")?;
    let addr = o.str("address")?.or(rewrite_addr).filter(|a| !a.is_empty());
    let port_key = if o.has("port") { "port" } else { "rewritePort" };
    let port = match o.u64("port")?.filter(|p| *p != 0).or(rewrite_port) {
        None | Some(0) => None,
        Some(p) => Some(u16::try_from(p).map_err(|_| {
            ConfigError::new(
                o.key_path(port_key),
                format!("port must be 1-65535, found {p}"),
            )
        })?),
    };
    let net_key = if o.has("network") {
        "network"
    } else {
        "allowedNetwork"
    };
    let mut networks = Vec::new();
    let nets = o.str_list("network")?.or(rewrite_nets);
    for n in nets.unwrap_or_else(|| vec!["tcp".into()]) {
        match n.to_ascii_lowercase().as_str() {
            "tcp" => networks.push(Network::Tcp),
            "udp" => networks.push(Network::Udp),
            other => {
                return Err(ConfigError::new(
                    o.key_path(net_key),
                    format!("unknown network {other:?}"),
                ))
            }
        }
    }
    if networks.is_empty() {
        return Err(ConfigError::new(o.key_path(net_key), "no network given"));
    }
    let follow = o.bool("followRedirect")?.unwrap_or(false);
    let mut port_map = HashMap::new();
    if let Some((p, v)) = o.get("portMap") {
        let Some(m) = v.as_object() else {
            return Err(ConfigError::new(
                p,
                "expected an object of local ports to \"host:port\"",
            ));
        };
        for (k, v) in m {
            let path = format!("{p}.{k}");
            let local = k
                .trim()
                .parse::<u16>()
                .map_err(|_| ConfigError::new(path.as_str(), format!("{k:?} is not a port")))?;
            let t = parse_host_port(as_str(v, &path)?, &path)?;
            if t.0.is_some() || t.1.is_some() {
                port_map.insert(local, t);
            }
        }
    }
    let level = super::socks::user_level(o)?;
    o.ignore(&["timeout"]);
    Ok(Dokodemo {
        target: (addr.as_deref().map(Address::parse), port),
        port_map,
        networks,
        level,
        follow,
    })
}

impl Dokodemo {
    /// A session to `dest`, at `userLevel`'s policy (an anonymous user carries the level, as
    /// on the SOCKS inbound).
    fn session(&self, ctx: &InboundCtx, dest: Destination, net: Network) -> crate::proxy::Session {
        let mut s = ctx.session(dest, net, "dokodemo-door");
        if self.level != 0 {
            s.user = Some(crate::proxy::User::new("", self.level));
        }
        s
    }

    /// Where a connection that arrived on `local` goes (Xray's rules for absent fields).
    fn dest(&self, local: &Endpoint) -> io::Result<Destination> {
        let (lip, lport) = match local {
            Endpoint::Ip(a) => (Some(a.ip()), Some(a.port())),
            Endpoint::Unix(_) => (None, None),
        };
        let (mut addr, mut port) = self.target.clone();
        if let Some((a, p)) = lport.and_then(|p| self.port_map.get(&p)) {
            addr = a.clone().or(addr);
            port = p.or(port);
        }
        let addr = addr.unwrap_or_else(|| match lip {
            Some(ip) if ip.is_ipv4() => Address::Ip([127, 0, 0, 1].into()),
            Some(_) => Address::Ip(std::net::Ipv6Addr::LOCALHOST.into()),
            None => Address::Domain("localhost".into()),
        });
        // A unix listener without rewritePort has no port: port 0, as in Xray, which routing
        // can still send somewhere that needs none (the API's tag: Remnawave's node listens
        // for its API this way); a dial to it fails.
        let port = port.or(lport).unwrap_or(0);
        Ok(Destination::new(addr, port))
    }
}

struct Reply(Arc<UdpSocket>);

#[async_trait]
impl UdpReply for Reply {
    async fn reply(&self, client: SocketAddr, data: &[u8], _from: &Destination) -> io::Result<()> {
        self.0.send_to(data, client).await.map(|_| ())
    }
}

/// A transparent inbound's replies: each from the address that answered (the original
/// destination, or another host's for a full-cone reply).
struct ForgedReply(Forged);

#[async_trait]
impl UdpReply for ForgedReply {
    async fn reply(&self, client: SocketAddr, data: &[u8], from: &Destination) -> io::Result<()> {
        let src = match from.addr {
            Address::Ip(ip) => SocketAddr::new(ip, from.port),
            Address::Domain(_) => udp::unspecified_for(client, from.port),
        };
        self.0.send(src, client, data).await
    }
}

/// The original destination of a transparent connection or datagram, refused when it is one
/// of this process's own listeners (a client asking the router's proxy port, or a rule that
/// sends the proxy's own traffic back to it: Xray's "loopback connection detected").
fn original(orig: Option<SocketAddr>, net: Network) -> io::Result<Destination> {
    let Some(a) = orig else {
        return Err(io::Error::other(
            "followRedirect: unable to get the original destination (is a REDIRECT or TPROXY rule sending traffic here?)",
        ));
    };
    let a = SocketAddr::new(a.ip().to_canonical(), a.port());
    if own::is_own(net, a) {
        return Err(io::Error::other(format!(
            "followRedirect: loopback connection detected ({net} {a} is this process's own listener)"
        )));
    }
    Ok(a.into())
}

#[async_trait]
impl InboundHandler for Dokodemo {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        if !self.networks.contains(&Network::Tcp) {
            return Ok(Accepted::Done);
        }
        let dest = if self.follow {
            original(ctx.info.original, Network::Tcp)?
        } else {
            self.dest(&ctx.info.local)?
        };
        let s = self.session(ctx, dest, Network::Tcp);
        Ok(Accepted::Stream(s, stream))
    }

    fn networks(&self) -> &[Network] {
        &self.networks
    }

    fn follows_redirect(&self) -> bool {
        self.follow
    }

    async fn serve_udp(&self, socket: Arc<UdpSocket>, ctx: InboundCtx) -> io::Result<()> {
        if self.follow {
            return self.serve_transparent_udp(socket, ctx).await;
        }
        let idle = ctx.services.level(self.level).conn_idle;
        let dest = self.dest(&Endpoint::Ip(socket.local_addr()?))?;
        let nat = ctx
            .services
            .clone()
            .udp_sessions(Arc::new(Reply(socket.clone())), idle, &ctx);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let (n, from) = socket.recv_from(&mut buf).await?;
            let mut s = self.session(&ctx, dest.clone(), Network::Udp);
            s.source = from.into();
            nat.send(from, s, Bytes::copy_from_slice(&buf[..n]));
        }
    }
}

impl Dokodemo {
    /// `followRedirect` on UDP: the listener is transparent (TPROXY rules), each datagram goes
    /// to its original destination as a flow of its own, and replies are sent from the
    /// address that answered, marked as the listener is.
    async fn serve_transparent_udp(
        &self,
        socket: Arc<UdpSocket>,
        ctx: InboundCtx,
    ) -> io::Result<()> {
        let idle = ctx.services.level(self.level).conn_idle;
        let mark = socket2::SockRef::from(&*socket).mark().unwrap_or(0);
        let reply = Arc::new(ForgedReply(Forged::new(mark)));
        let nat = ctx.services.clone().udp_sessions(reply, idle, &ctx);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut refused = 0u64;
        loop {
            let (n, from, orig) = udp::recv_orig(&socket, &mut buf).await?;
            let dest = match original(orig, Network::Udp) {
                Ok(d) => d,
                Err(e) => {
                    // Logged once per 64, as a flood of them is a client's doing.
                    if refused.is_multiple_of(64) {
                        tracing::warn!("[{}] udp from {from}: {e} ({refused} before)", ctx.tag);
                    }
                    refused += 1;
                    continue;
                }
            };
            let key = NatKey::Flow(from, orig.unwrap_or(from));
            let mut s = self.session(&ctx, dest, Network::Udp);
            s.source = from.into();
            nat.send_keyed(key, from, s, Bytes::copy_from_slice(&buf[..n]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    fn parsed(v: serde_json::Value) -> Result<Dokodemo> {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "inbounds[0].settings", &d)?;
        let r = parse(&o)?;
        o.finish();
        assert_eq!(d.take(), Vec::<String>::new(), "unknown fields in {v}");
        Ok(r)
    }

    fn dest(v: serde_json::Value, local: &str) -> String {
        let local = Endpoint::Ip(local.parse().unwrap());
        parsed(v).unwrap().dest(&local).unwrap().to_string()
    }

    #[test]
    fn both_spellings_and_the_older_one_wins() {
        let v =
            json!({"rewriteAddress": "10.0.0.1", "rewritePort": 53, "allowedNetwork": "tcp,udp"});
        assert_eq!(dest(v.clone(), "127.0.0.1:1000"), "10.0.0.1:53");
        assert_eq!(parsed(v).unwrap().networks, [Network::Tcp, Network::Udp]);
        let v = json!({"address": "1.1.1.1", "port": 80, "network": "udp",
            "rewriteAddress": "10.0.0.1", "rewritePort": 53, "allowedNetwork": "tcp"});
        assert_eq!(dest(v.clone(), "127.0.0.1:1000"), "1.1.1.1:80");
        assert_eq!(parsed(v).unwrap().networks, [Network::Udp]);
        assert_eq!(parsed(json!({"userLevel": 2})).unwrap().level, 2);
    }

    #[test]
    fn absent_address_and_port_come_from_the_connection() {
        // 3x-ui's API inbound: no port, so the port the connection arrived on.
        assert_eq!(
            dest(json!({"rewriteAddress": "127.0.0.1"}), "10.1.2.3:62789"),
            "127.0.0.1:62789"
        );
        assert_eq!(dest(json!({"port": 22}), "10.1.2.3:5000"), "127.0.0.1:22");
        assert_eq!(dest(json!({}), "[2001:db8::1]:5000"), "[::1]:5000");
        let unix = Endpoint::Unix("/run/x.sock".into());
        // A unix listener without rewritePort: port 0, as in Xray (routable to the API's tag).
        assert_eq!(parsed(json!({})).unwrap().dest(&unix).unwrap().port, 0);
        assert_eq!(
            parsed(json!({"rewritePort": 8080}))
                .unwrap()
                .dest(&unix)
                .unwrap()
                .to_string(),
            "localhost:8080"
        );
    }

    #[test]
    fn port_map_picks_by_local_port() {
        let v = json!({"address": "10.0.0.9", "portMap": {"5000": "1.2.3.4:80", "5001": ":81", "5002": "host.example:"}});
        assert_eq!(dest(v.clone(), "127.0.0.1:5000"), "1.2.3.4:80");
        assert_eq!(dest(v.clone(), "127.0.0.1:5001"), "10.0.0.9:81");
        assert_eq!(dest(v.clone(), "127.0.0.1:5002"), "host.example:5002");
        assert_eq!(dest(v, "127.0.0.1:5003"), "10.0.0.9:5003");
    }

    #[test]
    fn follow_redirect_goes_to_the_original_destination_but_never_back_to_a_listener() {
        let d = parsed(json!({"network": "tcp,udp", "followRedirect": true})).unwrap();
        assert!(d.follows_redirect());
        assert!(!parsed(json!({})).unwrap().follows_redirect());
        let to = |a: &str| original(Some(a.parse().unwrap()), Network::Tcp);
        assert_eq!(
            to("10.231.2.2:7001").unwrap().to_string(),
            "10.231.2.2:7001"
        );
        // A dual-stack listener sees IPv4 as mapped: the destination is the IPv4 address.
        assert_eq!(
            to("[::ffff:10.1.2.3]:443").unwrap().to_string(),
            "10.1.2.3:443"
        );
        let e = original(None, Network::Udp).unwrap_err().to_string();
        assert!(e.contains("unable to get the original destination"), "{e}");
        // A connection whose original destination is one of this process's listeners loops.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let _own = own::register(Network::Tcp, at);
        let e = original(Some(at), Network::Tcp).unwrap_err().to_string();
        assert!(e.contains("loopback connection detected"), "{e}");
        // The same port over UDP is another socket.
        assert!(original(Some(at), Network::Udp).is_ok());
    }

    #[test]
    fn refusals_name_their_path() {
        let err = |v| parsed(v).err().unwrap().to_string();
        assert_eq!(
            err(json!({"allowedNetwork": "sctp"})),
            "inbounds[0].settings.allowedNetwork: unknown network \"sctp\""
        );
        assert_eq!(
            err(json!({"rewritePort": 70000})),
            "inbounds[0].settings.rewritePort: port must be 1-65535, found 70000"
        );
        assert!(
            err(json!({"portMap": {"80": "nope"}})).starts_with("inbounds[0].settings.portMap.80:")
        );
    }
}
