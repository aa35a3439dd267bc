//! Pyodide's wasm module with the machine code V8 made for it, carried over from an earlier
//! process (V8's wasm code cache), so a process does not compile CPython's interpreter loop
//! again.
//!
//! Booting Pyodide runs CPython's interpreter loop (`_PyEval_EvalFrameDefault`) at once, and V8
//! optimizes it with TurboFan there: ~140 ms, synchronously where V8 runs single-threaded (the
//! zygote). A module V8 serialized after that holds the optimized code (TurboFan code only; the
//! rest stays lazy); one deserialized from it starts with it. The build makes it (see
//! `zygote::make_compiled_code`) and the binary embeds it.
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

/// Makes Pyodide's module for this process from `cache` (V8's serialization, see [`serialize`])
/// and Pyodide's wire bytes, in `isolate` (any isolate of this process: V8 shares a compiled
/// module between them). False where V8 refuses the cache (another V8, other flags, another
/// CPU): the module is then compiled from its wire bytes as usual, when Pyodide loads.
pub(crate) fn deserialize(
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
