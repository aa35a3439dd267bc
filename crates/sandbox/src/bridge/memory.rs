//! The sandbox's memory budget: one counter that every route to host memory draws from.
//!
//! V8 caps its own JS heap; everything else a script can make the process hold is counted here:
//! ArrayBuffers and typed arrays (the isolate's array-buffer allocator charges every allocation and
//! credits every free), wasm linear memory and tables, resizable buffers (charged by js/host_deno.js
//! through `op_memory_charge` before V8 commits them), and the host-side copies ops make of their
//! arguments (reserved for as long as the copy lives). Past the budget an allocation is refused:
//! JS sees a RangeError, Python a `MemoryError`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    /// Set when a charge was refused: the outcome then says which limit the script hit.
    refused: std::sync::atomic::AtomicBool,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            refused: Default::default(),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// Whether any allocation was refused for lack of budget.
    pub fn was_exhausted(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }

    /// Takes `bytes` from the budget if they fit; never over-commits, even under races.
    pub fn try_charge(&self, bytes: usize) -> bool {
        let fits = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok();
        if !fits {
            self.refused.store(true, Ordering::SeqCst);
        }
        fits
    }

    pub fn release(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Holds `bytes` of the budget until the returned guard is dropped (a host-side copy).
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        self.try_charge(bytes).then(|| Reservation {
            budget: self.clone(),
            bytes,
        })
    }
}

/// Budget held for a host-side copy; returned when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_up_to_the_limit_and_no_further() {
        let budget = MemoryBudget::new(100);
        assert!(budget.try_charge(60));
        assert!(!budget.try_charge(41));
        assert!(!budget.try_charge(usize::MAX));
        assert!(budget.was_exhausted());
        {
            let _held = budget.reserve(40).expect("fits exactly");
            assert_eq!(budget.used(), 100);
        }
        assert_eq!(budget.used(), 60);
        budget.release(1000);
        assert_eq!(budget.used(), 0);
    }
}
