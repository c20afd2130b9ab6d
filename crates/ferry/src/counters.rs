//! Where inbounds, outbounds and users get their traffic counters: made once, when one is added
//! (as the stats policy asks), never looked up per connection.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::app::policy::Policy;
use crate::session::{Traffic, User};
use crate::stats::{name, Stats};

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
        (on && !tag.is_empty()).then(|| st.counter(&name(kind, tag, dir)))
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
        let make = |on: bool, dir: &str| on.then(|| st.unlisted_counter(&name("user", email, dir)));
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
