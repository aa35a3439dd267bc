//! Pyodide's wasm module with the machine code V8 made for it, carried over from an earlier
//! process (V8's wasm code cache), so a process does not compile CPython's interpreter loop
//! again.
//!
//! Booting Pyodide runs CPython's interpreter loop (`_PyEval_EvalFrameDefault`) at once, and V8
//! optimizes it with TurboFan there: ~140 ms, synchronously where V8 runs single-threaded (the
//! zygote). A module V8 serialized after that holds the optimized code (TurboFan code only; the
//! rest stays lazy) and every function's tiering budget; one deserialized from it starts with
//! both. The build makes it in two passes, rewriting the budgets between them and after (see
//! [`rewrite_budgets`] and `zygote::make_compiled_code`), and the binary embeds it.
//!
//! V8 checks a serialization's header (its version, flags and CPU features) and refuses one that
//! does not match, but trusts the rest: only bytes V8 itself wrote, whole, may be offered.

use deno_core::{v8, JsRuntime};
use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::rc::Rc;

/// `v8::OwnedBuffer`: a `std::unique_ptr<const uint8_t[]>` and its size. The libc++ the v8
/// crate's V8 is built with gives `unique_ptr` the trivial ABI (as Chromium's does), so this
/// struct is returned in two registers, as a C struct of two words is (checked in v8 150.4's
/// `Serialize`: `this` comes in the first argument register, the result leaves in rax:rdx).
#[repr(C)]
struct OwnedBuffer {
    bytes: *mut u8,
    len: usize,
}

unsafe extern "C" {
    /// `v8::CompiledWasmModule::Serialize()`, which the v8 crate does not bind: a plain member
    /// function, so `this` is its one argument.
    #[link_name = "_ZN2v818CompiledWasmModule9SerializeEv"]
    fn compiled_wasm_module_serialize(this: *mut c_void) -> OwnedBuffer;
    /// `operator delete[]`, which frees what `Serialize` allocated.
    #[link_name = "_ZdaPv"]
    fn operator_delete_array(bytes: *mut u8);
    /// The v8 crate's own bindings (what its `WasmModuleObject::get_compiled_module` calls),
    /// for the raw `v8::CompiledWasmModule*` that the crate's wrapper keeps private.
    fn v8__WasmModuleObject__GetCompiledModule(this: *const v8::WasmModuleObject) -> *mut c_void;
    fn v8__CompiledWasmModule__DELETE(this: *mut c_void);
}

/// V8's serialization of Pyodide's compiled module in this process (None: not compiled yet).
pub(crate) fn serialize(js: &mut JsRuntime) -> Option<Vec<u8>> {
    let compiled = crate::bridge::pyodide_module()?;
    deno_core::scope!(scope, js);
    let module = v8::WasmModuleObject::from_compiled_module(scope, compiled)?;
    // SAFETY: `module` is a live handle; the compiled module the binding allocates is deleted
    // below, and the serialized buffer is copied out before it is freed.
    unsafe {
        let raw = v8__WasmModuleObject__GetCompiledModule(&*module);
        let serialized = compiled_wasm_module_serialize(raw);
        let copy = if serialized.bytes.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(serialized.bytes, serialized.len).to_vec()
        };
        operator_delete_array(serialized.bytes);
        v8__CompiledWasmModule__DELETE(raw);
        (!copy.is_empty()).then_some(copy)
    }
}

thread_local! {
    /// What [`deserialize`] offers V8, and whether V8 took it: V8's caching callback is a plain
    /// function, called on this thread within `finish`.
    static OFFERED: Cell<&'static [u8]> = const { Cell::new(&[]) };
    static TAKEN: Cell<bool> = const { Cell::new(false) };
}

/// Makes Pyodide's module for this process from `cache` (see [`deserialize`]), in an isolate of
/// its own, and says how it went. False where there is no cache or V8 refuses it.
pub(crate) fn take(platform: &v8::SharedRef<v8::Platform>, cache: &'static [u8]) -> bool {
    if cache.is_empty() {
        return false;
    }
    let started = std::time::Instant::now();
    let mut isolate = v8::Isolate::new(v8::CreateParams::default());
    let taken = deserialize(&mut isolate, platform, cache);
    if taken {
        tracing::debug!(
            "Pyodide's compiled code from the build taken ({} KiB in {} ms)",
            cache.len() >> 10,
            started.elapsed().as_millis()
        );
    } else {
        tracing::info!(
            "V8 did not take the compiled code the build made (another CPU or V8?); compiling Pyodide's interpreter loop again, ~0.2 s"
        );
    }
    taken
}

/// Makes Pyodide's module for this process from `cache` (V8's serialization, see [`serialize`])
/// and Pyodide's wire bytes, in `isolate` (any isolate of this process: V8 shares a compiled
/// module between them). False where V8 refuses the cache (another V8, other flags, another
/// CPU): the module is then compiled from its wire bytes as usual, when Pyodide loads.
fn deserialize(
    isolate: &mut v8::Isolate,
    platform: &v8::SharedRef<v8::Platform>,
    cache: &'static [u8],
) -> bool {
    if cache.is_empty() || crate::bridge::pyodide_module().is_some() {
        return false;
    }
    // Inflated for this call only: V8 copies the bytes it receives.
    let Some(wire) = crate::assets::pyodide_file("pyodide.asm.wasm") else {
        return false;
    };
    OFFERED.with(|offered| offered.set(cache));
    TAKEN.with(|taken| taken.set(false));
    let made: Rc<RefCell<Option<Option<v8::CompiledWasmModule>>>> = Rc::default();
    {
        let mut compilation = v8::WasmModuleCompilation::new();
        compilation.set_has_compiled_module_bytes();
        compilation.on_bytes_received(&wire);
        let made = made.clone();
        v8::scope!(scope, isolate);
        let context = v8::Context::new(scope, Default::default());
        let scope = &mut v8::ContextScope::new(scope, context);
        compilation.finish(
            scope,
            Some(offer_cache as unsafe extern "C" fn(*mut v8::ModuleCachingInterface)),
            move |_, result| {
                *made.borrow_mut() = Some(result.ok().map(|module| module.get_compiled_module()));
            },
        );
    }
    // V8 answers in a task of its own (or at once): run what it posted, never wait.
    while made.borrow().is_none() && v8::Platform::pump_message_loop(platform, isolate, false) {}
    let taken = TAKEN.with(|taken| taken.get());
    let Some(Some(compiled)) = made.borrow_mut().take() else {
        return false;
    };
    if !taken {
        // V8 compiled the wire bytes instead, with what it enables by default: let Pyodide's
        // loader compile them as it always does.
        return false;
    }
    crate::bridge::set_pyodide_module(compiled);
    true
}

unsafe extern "C" fn offer_cache(caching: *mut v8::ModuleCachingInterface) {
    // SAFETY: V8 passes its caching interface for the duration of this call.
    let caching = unsafe { &mut *caching };
    let taken = OFFERED.with(|offered| caching.set_cached_compiled_module_bytes(offered.get()));
    TAKEN.with(|t| t.set(taken));
}

/// V8's tiering budget for a wasm function in a forkable process (`--wasm-tiering-budget`, see
/// `zygote::process::init_v8_forkable`): what a function's Liftoff code spends as it runs, and
/// when it is spent, V8 optimizes the function with TurboFan.
pub(crate) const TIERING_BUDGET: u32 = 52_000_000;

/// What [`rewrite_budgets`] gives every function that has not been optimized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budgets {
    /// A function that ran (its budget partly spent) is optimized the next time it runs: the
    /// build's first pass hands its code to the second this way, so the second optimizes all
    /// that its job runs (see `zygote::make_compiled_code`).
    RanToSpent,
    /// Every budget full: no process starts with a budget another left nearly spent, which
    /// would have every child optimize the same functions (and throw the work away) as soon as
    /// its job runs them a little.
    Full,
}

/// Rewrites the tiering budgets that a serialization of Pyodide's module (see [`serialize`])
/// carries, and V8 restores as the module's: one little-endian u32 per function the module
/// declares, last in the serialization (`NativeModuleSerializer::WriteTieringBudget` in V8's
/// src/wasm/wasm-serialization.cc). A budget is a count V8 spends and refills, any value safe.
/// Errs, naming what it found, where the tail is not such budgets.
pub(crate) fn rewrite_budgets(code: &mut [u8], budgets: Budgets) -> Result<(), String> {
    let wire = crate::assets::pyodide_file("pyodide.asm.wasm")
        .ok_or("Pyodide's module is not embedded")?;
    let declared = declared_functions(&wire)?;
    let tail = code
        .len()
        .checked_sub(declared * 4)
        .ok_or("the serialization is shorter than its functions' budgets")?;
    for bytes in code[tail..].chunks_exact_mut(4) {
        let budget = u32::from_le_bytes(bytes.try_into().expect("four bytes"));
        if budget > TIERING_BUDGET {
            return Err(format!(
                "a function's budget in the serialization is {budget}, over the flag's {TIERING_BUDGET}: not V8's layout as expected"
            ));
        }
        let new = match budgets {
            Budgets::RanToSpent if budget < TIERING_BUDGET => 1,
            Budgets::RanToSpent => budget,
            Budgets::Full => TIERING_BUDGET,
        };
        bytes.copy_from_slice(&new.to_le_bytes());
    }
    Ok(())
}

/// How many functions a wasm module declares (its function section's count; imports aside).
fn declared_functions(wire: &[u8]) -> Result<usize, String> {
    for payload in wasmparser::Parser::new(0).parse_all(wire) {
        match payload {
            Ok(wasmparser::Payload::FunctionSection(functions)) => {
                return Ok(functions.count() as usize)
            }
            Ok(_) => {}
            Err(e) => return Err(format!("Pyodide's module does not parse: {e}")),
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A serialization's shape as far as [`rewrite_budgets`] knows it: code, then one budget per
    /// declared function.
    fn serialization(budgets: &[u32]) -> Vec<u8> {
        let mut bytes = b"code V8 wrote".to_vec();
        bytes.extend(budgets.iter().flat_map(|b| b.to_le_bytes()));
        bytes
    }

    fn budgets(code: &[u8], n: usize) -> Vec<u32> {
        code[code.len() - 4 * n..]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn budgets_are_rewritten_in_the_tail_and_nothing_else() {
        let wire = crate::assets::pyodide_file("pyodide.asm.wasm").unwrap();
        let n = declared_functions(&wire).unwrap();
        assert!(n > 10_000, "Pyodide's module declares {n} functions");
        let mut given = vec![TIERING_BUDGET; n];
        (given[0], given[1], given[n - 1]) = (0, 17, TIERING_BUDGET - 1);

        let mut code = serialization(&given);
        rewrite_budgets(&mut code, Budgets::RanToSpent).unwrap();
        assert!(code.starts_with(b"code V8 wrote"));
        let mut spent = vec![TIERING_BUDGET; n];
        (spent[0], spent[1], spent[n - 1]) = (1, 1, 1);
        assert_eq!(budgets(&code, n), spent);

        rewrite_budgets(&mut code, Budgets::Full).unwrap();
        assert!(code.starts_with(b"code V8 wrote"));
        assert_eq!(budgets(&code, n), vec![TIERING_BUDGET; n]);
    }

    #[test]
    fn a_tail_that_is_not_budgets_is_refused() {
        let wire = crate::assets::pyodide_file("pyodide.asm.wasm").unwrap();
        let n = declared_functions(&wire).unwrap();
        let mut over = serialization(&vec![TIERING_BUDGET + 1; n]);
        let error = rewrite_budgets(&mut over, Budgets::Full).unwrap_err();
        assert!(error.contains("not V8's layout"), "{error}");
        let mut short = vec![0; 4 * n - 1];
        let error = rewrite_budgets(&mut short, Budgets::Full).unwrap_err();
        assert!(error.contains("shorter"), "{error}");
    }
}
