//! An inbound's users: a list behind a swappable handle (a connection keeps the snapshot it
//! took), with an email index for the API's adds, removes and lookups.

use std::sync::Arc;

use crate::common::swap::Swap;
use crate::session::User;

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
    /// The email the API names this user by (empty: none).
    fn email(&self) -> &str;
    /// The session user this entry authenticates as.
    fn user(&self) -> User;
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
                .map(|a| a.email())
                .filter(|e| !e.is_empty())
                .map(|e| e.to_lowercase().into_boxed_str())
                .collect()
        });
        f(set)
    }

    /// Adds `u` unless a user with its secret or its (non-empty) email is there; returns its
    /// session user, or `None` for a duplicate.
    pub fn add_user(&self, u: T) -> Option<User> {
        let user = u.user();
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

    /// Removes the users with this email, compared ignoring case as Xray's inbounds compare
    /// it; false when there was none.
    pub fn remove_email(&self, email: &str) -> bool {
        if email.is_empty() {
            return false;
        }
        self.with_emails(|emails| {
            emails.remove(email.to_lowercase().as_str());
            self.remove(|a| same_email(a.email(), email))
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
            .find(|a| !a.email().is_empty() && same_email(a.email(), email))
            .map(|a| a.user())
    }

    /// The session users now.
    pub fn list(&self) -> Vec<User> {
        self.load().iter().map(|a| a.user()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[derive(Clone)]
    struct Entry(User, u8);

    impl UserEntry for Entry {
        fn email(&self) -> &str {
            &self.0.email
        }
        fn user(&self) -> User {
            self.0.clone()
        }
        fn same_secret(&self, other: &Self) -> bool {
            self.1 == other.1
        }
    }

    #[test]
    fn emails_are_one_user_whatever_their_case_as_in_xray() {
        let u = Users::new(vec![Entry(User::new("Alice@x", 0), 1)]);
        // A second Alice in other case, or Alice's secret under another email: refused.
        assert!(u.add_user(Entry(User::new("alice@X", 0), 2)).is_none());
        assert!(u.add_user(Entry(User::new("bob@x", 0), 1)).is_none());
        assert_eq!(
            u.find_email("ALICE@x").map(|u| u.email),
            Some("Alice@x".into())
        );
        // Removing by another case removes her from the list and the index alike.
        assert!(u.remove_email("alice@x"));
        assert!(u.load().is_empty());
        assert!(u.find_email("Alice@x").is_none());
        assert!(u.add_user(Entry(User::new("ALICE@x", 0), 3)).is_some());
        assert_eq!(u.list().len(), 1);
    }
}
