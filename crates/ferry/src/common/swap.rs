//! A value read often and replaced whole now and then: readers take a snapshot (an `Arc`) and
//! keep it; a change never touches what a reader holds.

use std::sync::{Arc, RwLock};

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
