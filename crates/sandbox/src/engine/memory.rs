//! How `--memory-mb` is enforced inside one isolate: V8's heap limit for JS objects, and the
//! bridge's [`MemoryBudget`] for everything else, which V8's array-buffer allocator charges.
//!
//! **Invariant:** the two shares add up to `--memory-mb`; no allocation a script can cause is
//! outside both (wasm memory, tables and resizable buffers are charged by js/host_deno.js's
//! wrappers, and no new wasm can be compiled once the sandbox is ready, so those wrappers are the
//! only way to grow them).

use crate::bridge::memory::MemoryBudget;
use deno_core::v8;
use std::ffi::c_void;
use std::sync::Arc;

const MIB: usize = 1 << 20;

/// `--memory-mb` split between V8's JS heap and the counted budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryShares {
    /// V8's heap limit: objects, strings, closures (Pyodide itself uses ~17 MiB of it).
    pub js_heap: usize,
    /// Wasm linear memory (Python's objects), ArrayBuffers, wasm tables, op copies.
    pub counted: usize,
    /// Of `counted`, what Pyodide's linear memory may grow to: both hosts refuse growth past it
    /// at the same size (js/runner.js), and buffers keep a quarter of the counted share.
    pub linear: usize,
}

impl MemoryShares {
    /// A quarter for the JS heap (at least 32 MiB), the rest counted; linear memory may take
    /// three quarters of the counted share.
    pub fn of(memory_mb: u64) -> Self {
        let total = usize::try_from(memory_mb)
            .unwrap_or(usize::MAX / MIB)
            .saturating_mul(MIB);
        let js_heap = (total / 4).max(32 * MIB).min(total);
        let counted = total - js_heap;
        Self {
            js_heap,
            counted,
            linear: counted / 4 * 3,
        }
    }
}

/// An array-buffer allocator that charges `budget` for every byte it hands out. A refused
/// allocation returns null, which V8 turns into a RangeError ("Array buffer allocation failed").
pub fn counting_allocator(budget: Arc<MemoryBudget>) -> v8::UniqueRef<v8::Allocator> {
    static VTABLE: v8::RustAllocatorVtable<MemoryBudget> = v8::RustAllocatorVtable {
        allocate,
        allocate_uninitialized,
        free,
        drop: drop_budget,
    };
    // SAFETY: the pointer comes from Arc::into_raw and is turned back into the Arc exactly once,
    // in `drop_budget`, when V8 drops the allocator.
    unsafe { v8::new_rust_allocator(Arc::into_raw(budget), &VTABLE) }
}

unsafe extern "C" fn allocate(budget: &MemoryBudget, len: usize) -> *mut c_void {
    charged(budget, len, || unsafe { libc::calloc(len.max(1), 1) })
}

unsafe extern "C" fn allocate_uninitialized(budget: &MemoryBudget, len: usize) -> *mut c_void {
    charged(budget, len, || unsafe { libc::malloc(len.max(1)) })
}

fn charged(budget: &MemoryBudget, len: usize, alloc: impl FnOnce() -> *mut c_void) -> *mut c_void {
    if !budget.try_charge(len) {
        return std::ptr::null_mut();
    }
    let data = alloc();
    if data.is_null() {
        budget.release(len);
    }
    data
}

unsafe extern "C" fn free(budget: &MemoryBudget, data: *mut c_void, len: usize) {
    unsafe { libc::free(data) };
    budget.release(len);
}

unsafe extern "C" fn drop_budget(budget: *const MemoryBudget) {
    drop(unsafe { Arc::from_raw(budget) });
}

/// Installs the check V8 asks before compiling any wasm module in this isolate: allowed only
/// while Pyodide boots, or for a wheelhouse module whose sha256 `op_wasm_compile_listed` checked,
/// so a script cannot bring its own module (with its own memories, or `memory.grow` on Pyodide's)
/// past the budget's wrappers.
pub fn gate_wasm_compilation(isolate: &mut v8::Isolate) {
    isolate.set_allow_wasm_code_generation_callback(allow_wasm_compile);
}

unsafe extern "C" fn allow_wasm_compile(
    _context: v8::Local<v8::Context>,
    _source: v8::Local<v8::String>,
) -> bool {
    crate::bridge::wasm_compile_allowed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_the_limit() {
        let s = MemoryShares::of(512);
        assert_eq!(
            (s.js_heap, s.counted, s.linear),
            (128 * MIB, 384 * MIB, 288 * MIB)
        );
        let s = MemoryShares::of(128);
        assert_eq!(
            (s.js_heap, s.counted, s.linear),
            (32 * MIB, 96 * MIB, 72 * MIB)
        );
    }
}
