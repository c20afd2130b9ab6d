//! What a running instance can change without a restart: the outbounds (a list with a tag
//! index, here), the router, the running inbounds, and each inbound's users ([`Users`]), each
//! behind a handle whose contents are swapped whole ([`Swap`]): a connection takes a snapshot
//! once and keeps it, a change never touches live connections. Traffic counters are resolved
//! when an inbound, outbound or user is added ([`CounterSource`]), never per connection.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use async_trait::async_trait;

use crate::common::Destination;
use crate::session::Traffic;
use crate::transport::{BoxStream, Dialer, PacketConn};

pub use crate::common::swap::Swap;
pub use crate::counters::CounterSource;
pub use crate::users::{same_email, UserEntry, Users};

/// One outbound in the registry.
pub struct OutboundEntry {
    pub tag: Arc<str>,
    pub protocol: String,
    pub handler: Arc<dyn Dialer>,
    pub traffic: Traffic,
}

/// The outbounds in config order, with a tag index. The first is the default, as in Xray.
#[derive(Default)]
pub struct OutboundTable {
    list: Vec<Arc<OutboundEntry>>,
    index: HashMap<Arc<str>, usize>,
}

impl OutboundTable {
    pub fn new(list: Vec<Arc<OutboundEntry>>) -> Self {
        let mut index = HashMap::new();
        for (i, e) in list.iter().enumerate() {
            if !e.tag.is_empty() {
                index.entry(e.tag.clone()).or_insert(i);
            }
        }
        OutboundTable { list, index }
    }

    /// The default outbound: the first one.
    pub fn default_outbound(&self) -> Option<&Arc<OutboundEntry>> {
        self.list.first()
    }

    pub fn get(&self, tag: &str) -> Option<&Arc<OutboundEntry>> {
        self.index.get(tag).and_then(|&i| self.list.get(i))
    }

    pub fn list(&self) -> &[Arc<OutboundEntry>] {
        &self.list
    }
}

/// The live outbound registry.
pub type Outbounds = Swap<OutboundTable>;

impl Swap<OutboundTable> {
    /// Adds an outbound (a tagged one replaces the outbound with its tag, as Xray's
    /// AddOutbound after RemoveOutbound; otherwise it goes last).
    pub fn add(&self, e: OutboundEntry) {
        self.update(|t| {
            let mut list = t.list.clone();
            match list
                .iter()
                .position(|o| !e.tag.is_empty() && o.tag == e.tag)
            {
                Some(i) => list[i] = Arc::new(e),
                None => list.push(Arc::new(e)),
            }
            (OutboundTable::new(list), ())
        })
    }

    /// Removes the outbound with this tag; false when there was none.
    pub fn remove(&self, tag: &str) -> bool {
        self.update(|t| {
            let list: Vec<_> = t.list.iter().filter(|o| &*o.tag != tag).cloned().collect();
            let removed = list.len() != t.list.len();
            (OutboundTable::new(list), removed)
        })
    }
}

/// Dials through the outbound tagged `tag`, looked up at each dial (so chains may name
/// outbounds defined later, and follow them when they are replaced at run time).
pub struct OutboundRef {
    pub tag: String,
    pub table: Arc<Outbounds>,
}

impl OutboundRef {
    fn get(&self) -> io::Result<Arc<dyn Dialer>> {
        self.table
            .load()
            .get(&self.tag)
            .map(|e| e.handler.clone())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("dialer proxy: no outbound tagged {:?}", self.tag),
                )
            })
    }
}

#[async_trait]
impl Dialer for OutboundRef {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        self.get()?.dial_tcp(dest).await
    }
    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        self.get()?.dial_udp(dest).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nop;
    #[async_trait]
    impl Dialer for Nop {
        async fn dial_tcp(&self, _d: &Destination) -> io::Result<BoxStream> {
            Err(io::ErrorKind::Unsupported.into())
        }
        async fn dial_udp(&self, _d: &Destination) -> io::Result<Box<dyn PacketConn>> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    fn entry(tag: &str, protocol: &str) -> Arc<OutboundEntry> {
        Arc::new(OutboundEntry {
            tag: tag.into(),
            protocol: protocol.into(),
            handler: Arc::new(Nop),
            traffic: Traffic::default(),
        })
    }

    #[test]
    fn the_first_outbound_is_the_default_even_among_untagged_ones() {
        let t = OutboundTable::new(vec![
            entry("", "first"),
            entry("", "second"),
            entry("x", "x"),
        ]);
        assert_eq!(t.default_outbound().unwrap().protocol, "first");
        assert_eq!(t.get("x").unwrap().protocol, "x");
        assert!(t.get("").is_none());
    }

    #[test]
    fn outbounds_are_added_replaced_and_removed() {
        let o = Outbounds::new(OutboundTable::new(vec![entry("a", "1")]));
        let before = o.load();
        o.add(OutboundEntry {
            tag: "b".into(),
            protocol: "2".into(),
            handler: Arc::new(Nop),
            traffic: Traffic::default(),
        });
        o.add(OutboundEntry {
            tag: "a".into(),
            protocol: "3".into(),
            handler: Arc::new(Nop),
            traffic: Traffic::default(),
        });
        let now = o.load();
        assert_eq!(now.get("a").unwrap().protocol, "3");
        assert_eq!(now.list().len(), 2);
        // A snapshot taken earlier is untouched.
        assert_eq!(before.get("a").unwrap().protocol, "1");
        assert!(o.remove("a"));
        assert!(!o.remove("a"));
        assert_eq!(o.load().default_outbound().unwrap().protocol, "2");
    }
}
