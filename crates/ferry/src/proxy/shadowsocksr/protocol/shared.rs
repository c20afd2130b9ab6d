//! What the connections of one inbound or outbound share: the server's users and replay
//! window, the client's id, connection counter and login (shadowsocksr.md §4.1).

use std::sync::Mutex;

use super::super::util::{now_u32, rand_u32, time_diff, Error, ReplayWindow, Result};
use crate::proxy::User;

/// One user of a multi-user server (the login a client sends as `uid:password`).
#[derive(Clone)]
pub struct SsrUser {
    pub uid: u32,
    pub password: Vec<u8>,
    pub user: User,
}

impl crate::registry::UserEntry for SsrUser {
    fn email(&self) -> &str {
        &self.user.email
    }
    fn user(&self) -> User {
        self.user.clone()
    }
    fn same_secret(&self, other: &Self) -> bool {
        self.uid == other.uid
    }
}

/// What every server connection of one inbound shares.
pub struct ServerShared {
    pub users: crate::registry::Users<SsrUser>,
    /// First packets seen (per uid, client id, connection id) within the time window.
    pub replay: Mutex<ReplayWindow>,
    /// Accepted clock difference in seconds.
    pub max_time_dif: u32,
    /// The user of a single-user server.
    pub default_user: User,
    /// Whether users log in by uid (users were configured or added): then an unknown uid is
    /// refused even when the last user has been removed.
    pub multi: std::sync::atomic::AtomicBool,
}

impl ServerShared {
    pub fn new(users: Vec<SsrUser>, default_user: User) -> ServerShared {
        ServerShared {
            multi: std::sync::atomic::AtomicBool::new(!users.is_empty()),
            users: crate::registry::Users::new(users),
            replay: Mutex::new(ReplayWindow::new(86400)),
            max_time_dif: 86400,
            default_user,
        }
    }

    /// Checks time and replay of a first packet; `id` names it (uid, client id, connection id).
    pub(super) fn admit(&self, utc: u32, id: &[u8]) -> Result<()> {
        if time_diff(utc, now_u32()) > self.max_time_dif as i64 {
            return Err(Error::Time);
        }
        let mut g = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        if !g.check_and_insert(id, utc) {
            return Err(Error::Replay);
        }
        Ok(())
    }

    /// The user key for `uid` (§1.4): the user's, this server's key when it has no users, or
    /// `None` for an unknown uid on a multi-user server.
    pub fn user_of(&self, uid: u32) -> Option<Option<SsrUser>> {
        if !self.multi.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(None);
        }
        let users = self.users.load();
        users.iter().find(|u| u.uid == uid).cloned().map(Some)
    }
}

/// What every client connection of one outbound shares: the client id and connection counter
/// (§4.1) and the login.
pub struct ClientShared {
    ids: Mutex<(Option<[u8; 4]>, u32)>,
    /// `protocolParam` `uid:password`.
    pub login: Option<(u32, Vec<u8>)>,
}

impl ClientShared {
    pub fn new(param: &str) -> ClientShared {
        let login = param.split_once(':').and_then(|(u, p)| {
            let uid = u.trim().parse::<u32>().ok()?;
            Some((uid, p.as_bytes().to_vec()))
        });
        ClientShared {
            ids: Mutex::new((None, 0)),
            login,
        }
    }

    /// `LE32 time ‖ client_id ‖ LE32 connection_id` for a new connection.
    pub(super) fn auth_data(&self) -> [u8; 12] {
        let mut g = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if g.1 > 0xFF00_0000 {
            g.0 = None;
        }
        if g.0.is_none() {
            g.0 = Some(rand_u32().to_le_bytes());
            g.1 = rand_u32() & 0xFF_FFFF;
        }
        g.1 += 1;
        let mut a = [0u8; 12];
        a[..4].copy_from_slice(&now_u32().to_le_bytes());
        a[4..8].copy_from_slice(&g.0.unwrap_or_default());
        a[8..].copy_from_slice(&g.1.to_le_bytes());
        a
    }
}
