//! What a running instance can change without a restart: the outbounds (a list with a tag
//! index), the router, the running inbounds, and each inbound's users, each behind a handle
//! whose contents are swapped whole ([`Swap`]): a connection takes a snapshot once and keeps
//! it, a change never touches live connections. Traffic counters are resolved here, when an
//! inbound, outbound or user is added, never per connection.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;

use crate::app::policy::Policy;
use crate::common::Destination;
use crate::session::{Traffic, User};
use crate::stats::{self, Stats};
use crate::transport::{BoxStream, Dialer, PacketConn};

/// A value that is read often and replaced whole now and then.
#[derive(Debug, Default)]
pub struct Swap<T>(RwLock<Arc<T>>);

impl<T> Swap<T> {
    pub fn new(v: T) -> Self {
        Swap(RwLock::new(Arc::new(v)))
    }

    /// The current value.
    pub fn load(&self) -> Arc<T> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value.
    pub fn store(&self, v: T) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(v);
    }

    /// Changes the value in place when no reader holds it (else on a copy that replaces it):
    /// writers are serialised, and a reader keeps the value it loaded.
    pub fn modify<R>(&self, f: impl FnOnce(&mut T) -> R) -> R
    where
        T: Clone,
    {
        let mut w = self.0.write().unwrap_or_else(|e| e.into_inner());
        f(Arc::make_mut(&mut w))
    }

    /// Replaces the value with `f(current)` (writers are serialised).
    pub fn update<R>(&self, f: impl FnOnce(&T) -> (T, R)) -> R {
        let mut w = self.0.write().unwrap_or_else(|e| e.into_inner());
        let (v, r) = f(&w);
        *w = Arc::new(v);
        r
    }
}

/// Creates the counters of inbounds, outbounds and users (empty when stats are off or the
/// policy does not ask for them).
#[derive(Clone, Default)]
pub struct CounterSource {
    pub stats: Option<Arc<Stats>>,
    pub policy: Policy,
}

impl CounterSource {
    fn counter(&self, on: bool, kind: &str, tag: &str, dir: &str) -> Option<Arc<AtomicU64>> {
        let st = self.stats.as_ref()?;
        (on && !tag.is_empty()).then(|| st.counter(&stats::name(kind, tag, dir)))
    }

    /// `inbound>>>TAG>>>traffic>>>uplink/downlink`.
    pub fn inbound(&self, tag: &str) -> Traffic {
        let s = &self.policy.system;
        Traffic {
            up: self.counter(s.stats_inbound_uplink, "inbound", tag, "uplink"),
            down: self.counter(s.stats_inbound_downlink, "inbound", tag, "downlink"),
            listing: None,
            revoked: Default::default(),
        }
    }

    /// `outbound>>>TAG>>>traffic>>>uplink/downlink`.
    pub fn outbound(&self, tag: &str) -> Traffic {
        let s = &self.policy.system;
        Traffic {
            up: self.counter(s.stats_outbound_uplink, "outbound", tag, "uplink"),
            down: self.counter(s.stats_outbound_downlink, "outbound", tag, "downlink"),
            listing: None,
            revoked: Default::default(),
        }
    }

    /// A user with the counters its level's policy asks for (made now, listed in the stats
    /// from the user's first connection on).
    pub fn user(&self, email: &str, level: u32) -> User {
        let lp = self.policy.level(level);
        let mut u = User::new(email, level);
        let Some(st) = &self.stats else { return u };
        if email.is_empty() {
            return u;
        }
        let make =
            |on: bool, dir: &str| on.then(|| st.unlisted_counter(&stats::name("user", email, dir)));
        let up = make(lp.stats_user_uplink, "uplink");
        let down = make(lp.stats_user_downlink, "downlink");
        u.traffic = Arc::new(Traffic {
            up,
            down,
            listing: Some(Arc::new(crate::session::Listing {
                stats: st.clone(),
                email: u.email.clone(),
                done: Default::default(),
            })),
            revoked: Default::default(),
        });
        u
    }
}

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

/// A list of users behind a swappable handle, for inbounds that keep their users as `T`.
pub struct Users<T> {
    list: Swap<Vec<T>>,
    /// The users' emails, case-folded (built on first use by the [`UserEntry`] methods, then
    /// kept by them): an API adding one user among thousands asks "is this email there?" in
    /// O(1), without walking the list.
    emails: std::sync::Mutex<Option<std::collections::HashSet<Box<str>>>>,
}

impl<T: Clone> Users<T> {
    pub fn new(v: Vec<T>) -> Self {
        Users {
            list: Swap::new(v),
            emails: std::sync::Mutex::new(None),
        }
    }

    /// The users now (a connection keeps this snapshot).
    pub fn load(&self) -> Arc<Vec<T>> {
        self.list.load()
    }

    /// Adds a user unless `same` finds one already there; false then. In place (no copy of
    /// the list) unless a connection holds the current list at that moment.
    pub fn add(&self, u: T, same: impl Fn(&T) -> bool) -> bool {
        self.list.modify(|v| {
            if v.iter().any(same) {
                return false;
            }
            v.push(u);
            true
        })
    }

    /// Removes the users `matches` picks; false when none did.
    pub fn remove(&self, matches: impl Fn(&T) -> bool) -> bool {
        self.list.modify(|v| {
            let before = v.len();
            v.retain(|u| !matches(u));
            if v.capacity() > 64 && v.len() < v.capacity() / 4 {
                v.shrink_to_fit();
            }
            v.len() != before
        })
    }
}

/// Whether two emails are the same user's: equal ignoring case (Unicode case for non-ASCII).
pub fn same_email(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        a.eq_ignore_ascii_case(b)
    } else {
        a.to_lowercase() == b.to_lowercase()
    }
}

/// What an inbound keeps per user: its session user and the secret that identifies it.
pub trait UserEntry: Clone + Send + Sync + 'static {
    fn user(&self) -> &User;
    /// Whether two entries authenticate alike (same id, key or password hash).
    fn same_secret(&self, other: &Self) -> bool;
}

impl<T: UserEntry> Users<T> {
    /// Runs `f` on the email index, building it from the list the first time.
    fn with_emails<R>(&self, f: impl FnOnce(&mut std::collections::HashSet<Box<str>>) -> R) -> R {
        let mut g = self.emails.lock().unwrap_or_else(|e| e.into_inner());
        let set = g.get_or_insert_with(|| {
            self.load()
                .iter()
                .map(|a| &a.user().email)
                .filter(|e| !e.is_empty())
                .map(|e| e.to_lowercase().into_boxed_str())
                .collect()
        });
        f(set)
    }

    /// Adds `u` unless a user with its secret or its (non-empty) email is there; returns its
    /// session user, or `None` for a duplicate.
    pub fn add_user(&self, u: T) -> Option<User> {
        let user = u.user().clone();
        let email = (!user.email.is_empty()).then(|| user.email.to_lowercase());
        self.with_emails(|emails| {
            if email.as_deref().is_some_and(|e| emails.contains(e)) {
                return None;
            }
            let fresh = u.clone();
            if !self.add(u, |x| x.same_secret(&fresh)) {
                return None;
            }
            if let Some(e) = email {
                emails.insert(e.into_boxed_str());
            }
            Some(user)
        })
    }

    /// Removes the users with this email; false when there was none.
    pub fn remove_email(&self, email: &str) -> bool {
        if email.is_empty() {
            return false;
        }
        self.with_emails(|emails| {
            emails.remove(email.to_lowercase().as_str());
            self.remove(|a| &*a.user().email == email)
        })
    }

    /// The user whose email is `email`, compared as the API compares them (case-insensitively):
    /// O(1) when there is none.
    pub fn find_email(&self, email: &str) -> Option<User> {
        if !self.with_emails(|emails| emails.contains(email.to_lowercase().as_str())) {
            return None;
        }
        self.load()
            .iter()
            .map(|a| a.user())
            .find(|u| !u.email.is_empty() && same_email(&u.email, email))
            .cloned()
    }

    /// The session users now.
    pub fn list(&self) -> Vec<User> {
        self.load().iter().map(|a| a.user().clone()).collect()
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

    #[test]
    fn users_add_and_remove_without_touching_snapshots() {
        let u = Users::new(vec![1, 2]);
        let snap = u.load();
        assert!(u.add(3, |x| *x == 3));
        assert!(!u.add(3, |x| *x == 3));
        assert!(u.remove(|x| *x == 1));
        assert!(!u.remove(|x| *x == 1));
        assert_eq!(*u.load(), vec![2, 3]);
        assert_eq!(*snap, vec![1, 2]);
    }
}
