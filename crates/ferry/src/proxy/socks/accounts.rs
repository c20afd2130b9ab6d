//! The accounts of a SOCKS or HTTP proxy inbound, which the management interface can change
//! while the inbound runs.
//!
//! Xray keeps these accounts fixed (its API answers "proxy is not a UserManager"); Ferry lets
//! an operator add and remove them like the users of the other inbounds, so a SOCKS or HTTP
//! inbound can start with nobody. Two rules keep that from opening a proxy by accident:
//! a SOCKS inbound with `auth: "password"` asks every client for a password even while it has
//! no account (then nobody gets in, as in Xray), and so does its HTTP half (Xray lets HTTP
//! requests through a `mixed` inbound whose account list is empty); an `http` inbound asks for
//! credentials once it has had an account, configured or added, and keeps asking when the last
//! one is removed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use super::Accounts;
use crate::common::ct;
use crate::config::reader::{ConfigError, Diagnostics, Obj, Result};
use crate::proxy::UserManager;
use crate::registry::CounterSource;
use crate::session::User;

struct Entry {
    pass: String,
    user: User,
}

/// User name -> password and session user (its counters resolved once; the user name is the
/// email the counters are named after, as in Xray).
pub struct AccountBook {
    /// Whether a client must authenticate.
    required: AtomicBool,
    /// Accounts can be added (false for a SOCKS inbound with `auth: "noauth"`).
    open_to_accounts: bool,
    level: u32,
    counters: CounterSource,
    map: RwLock<HashMap<String, Entry>>,
}

impl AccountBook {
    /// `required`: authentication is asked for from the start (SOCKS `auth: "password"`, or
    /// an `http` inbound with accounts). `None` accounts: a SOCKS `noauth` inbound, which
    /// takes none.
    pub fn new(
        accounts: Option<&Accounts>,
        required: bool,
        level: u32,
        counters: &CounterSource,
    ) -> Self {
        let map = accounts
            .into_iter()
            .flatten()
            .map(|(name, pass)| {
                let e = Entry {
                    pass: pass.clone(),
                    user: counters.user(name, level),
                };
                (name.clone(), e)
            })
            .collect();
        AccountBook {
            required: AtomicBool::new(required),
            open_to_accounts: accounts.is_some(),
            level,
            counters: counters.clone(),
            map: RwLock::new(map),
        }
    }

    /// Whether a client must authenticate now.
    pub fn required(&self) -> bool {
        self.required.load(Ordering::Relaxed)
    }

    /// The session user of `name` when `pass` is its password.
    pub fn check(&self, name: &str, pass: &[u8]) -> Option<User> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let e = map.get(name)?;
        ct::eq(e.pass.as_bytes(), pass).then(|| e.user.clone())
    }
}

impl UserManager for AccountBook {
    /// `{"user": NAME, "pass": PASSWORD}` as in the inbound's `accounts`; `email`, when
    /// given, must be the user name (the counters' name); `level` defaults to `userLevel`.
    fn add_user(&self, v: &serde_json::Value) -> Result<User> {
        if !self.open_to_accounts {
            return Err(ConfigError::new(
                "user",
                "this inbound has auth \"noauth\" and takes no accounts",
            ));
        }
        let diag = Diagnostics::default();
        let o = Obj::new(v, "user", &diag)?;
        let name = o.req_str("user")?;
        let pass = o.str("pass")?.unwrap_or_default();
        if name.is_empty() || name.len() > 255 || pass.len() > 255 {
            return Err(ConfigError::new(
                o.key_path("user"),
                "user and pass must be 1-255 bytes",
            ));
        }
        if let Some(email) = o.str("email")?.filter(|e| !e.is_empty()) {
            if email != name {
                return Err(ConfigError::new(
                    o.key_path("email"),
                    format!("an account's email is its user name ({name:?}), not {email:?}"),
                ));
            }
        }
        let level = match o.u64("level")? {
            Some(l) => u32::try_from(l)
                .map_err(|_| ConfigError::new(o.key_path("level"), "level is too large"))?,
            None => self.level,
        };
        o.finish();
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&name) {
            return Err(ConfigError::new(
                "user",
                "an account with this name exists already",
            ));
        }
        let user = self.counters.user(&name, level);
        map.insert(
            name,
            Entry {
                pass,
                user: user.clone(),
            },
        );
        self.required.store(true, Ordering::Relaxed);
        Ok(user)
    }

    fn remove_user(&self, email: &str) -> bool {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.remove(email).is_some()
    }

    fn list_users(&self) -> Vec<User> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values().map(|e| e.user.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn book(accounts: Option<&[(&str, &str)]>, required: bool) -> AccountBook {
        let a: Option<Accounts> = accounts.map(|a| {
            a.iter()
                .map(|(u, p)| (u.to_string(), p.to_string()))
                .collect()
        });
        AccountBook::new(a.as_ref(), required, 0, &CounterSource::default())
    }

    #[test]
    fn accounts_come_and_go_and_the_password_is_checked() {
        let b = book(Some(&[("a", "pa")]), true);
        assert!(b.check("a", b"pa").is_some());
        assert!(b.check("a", b"pb").is_none());
        assert!(b.check("b", b"pb").is_none());
        b.add_user(&json!({"user": "b", "pass": "pb", "email": "b"}))
            .unwrap();
        assert_eq!(b.check("b", b"pb").unwrap().email.as_ref(), "b");
        assert!(b.add_user(&json!({"user": "b", "pass": "x"})).is_err());
        assert!(b.remove_user("b"));
        assert!(!b.remove_user("b"));
        assert!(b.check("b", b"pb").is_none());
        assert_eq!(b.list_users().len(), 1);
    }

    #[test]
    fn an_http_inbound_asks_for_credentials_once_it_had_an_account() {
        let b = book(Some(&[]), false);
        assert!(!b.required());
        b.add_user(&json!({"user": "u", "pass": "p"})).unwrap();
        assert!(b.required());
        assert!(b.remove_user("u"));
        assert!(
            b.required(),
            "removing the last account does not open the proxy"
        );
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let noauth = book(None, false);
        let e = noauth
            .add_user(&json!({"user": "u", "pass": "p"}))
            .unwrap_err();
        assert!(e.to_string().contains("noauth"), "{e}");
        let b = book(Some(&[]), true);
        let e = b
            .add_user(&json!({"user": "u", "pass": "p", "email": "other"}))
            .unwrap_err();
        assert!(e.to_string().contains("user name"), "{e}");
        assert!(b.add_user(&json!({"user": "", "pass": "p"})).is_err());
        assert!(b.add_user(&json!({"pass": "p"})).is_err());
    }
}
