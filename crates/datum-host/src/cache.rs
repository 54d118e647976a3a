//! A per-pass store of provider-owned caches, one slot per type.
//!
//! A [`crate::Host`] lives for one pass, so a cache kept here is dropped with
//! it and never serves a later pass. The store knows nothing about what is
//! cached or when it goes stale: the owner of each type decides that (the
//! Package provider, for instance, re-reads the package database when the
//! status file's inode or mtime changed during the pass).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Caches keyed by their type. Clones share the store.
#[derive(Clone, Default)]
pub struct PassCache {
    slots: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
}

impl PassCache {
    /// The cache of type `T`, created with `T::default()` on first use.
    pub fn get_or_default<T>(&self) -> Arc<T>
    where
        T: Any + Send + Sync + Default,
    {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = slots
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()) as Arc<dyn Any + Send + Sync>)
            .clone();
        drop(slots);
        match slot.downcast::<T>() {
            Ok(cache) => cache,
            // Unreachable: the slot for T's TypeId only ever holds a T. A
            // fresh value keeps this total without a panic path.
            Err(_) => Arc::new(T::default()),
        }
    }
}

impl fmt::Debug for PassCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slots = self.slots.lock().map(|s| s.len()).unwrap_or(0);
        write!(f, "PassCache({slots} slots)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counter(AtomicUsize);

    #[derive(Default)]
    struct Other(AtomicUsize);

    #[test]
    fn one_slot_per_type_shared_by_clones() {
        let cache = PassCache::default();
        cache
            .get_or_default::<Counter>()
            .0
            .fetch_add(2, Ordering::SeqCst);
        let clone = cache.clone();
        assert_eq!(
            clone.get_or_default::<Counter>().0.load(Ordering::SeqCst),
            2
        );
        assert_eq!(clone.get_or_default::<Other>().0.load(Ordering::SeqCst), 0);
        assert_eq!(format!("{cache:?}"), "PassCache(2 slots)");
        // A new cache (a new pass) starts empty.
        let next = PassCache::default();
        assert_eq!(next.get_or_default::<Counter>().0.load(Ordering::SeqCst), 0);
    }
}
