//! bridge — the ops between the sandbox (JS + Python) and Rust.
//!
//! Op families and the JS that uses them:
//!   assets   `op_assets_read`, `op_assets_text`          js/host_deno.js (Pyodide's loader)
//!   host     `op_entropy_fill`, `op_clock_now`, `op_text_decode`   js/host_deno.js
//!   output   `op_output_write`                            js/main_deno.js
//!   sandbox  `op_sandbox_settings|ready|next_job|report`  js/main_deno.js
//!   tools    `op_tools_catalog`, `op_tools_call`          js/main_deno.js -> codemode.py
//!   snapshot `op_snapshot_read`, `op_snapshot_save`      js/main_deno.js
//!   wasm     `op_wasm_cached_module`, `op_wasm_cache_module`   js/host_deno.js
//!
//! **Invariant:** every op validates its own arguments. Python reaches all of JS (and so every op)
//! whatever we hide, so an op never trusts its caller: asset reads serve only the pinned files.
//! Ops are thin: they take what they need from `OpState` and call plain Rust.

pub mod output;
pub mod signature;
pub mod tools;

use deno_core::{op2, v8, OpState};
use deno_error::JsErrorBox;
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use tokio::sync::oneshot;

pub use output::{LiveOutput, SharedOutput, Stream};
pub use tools::{
    NoTools, ServerCatalog, ToolBridge, ToolCallError, ToolCallRecord, ToolHost, ToolSpec,
};

/// The sandbox's only source of randomness: seeded (`--seed`) or from the OS.
pub struct Entropy(pub ChaCha20Rng);

/// Milliseconds for `performance.now()`, counted from the sandbox's creation.
pub struct Clock(pub Instant);

/// The lifecycle channels between the sandbox thread's JS and its `Sandbox` handle.
pub struct Lifecycle {
    /// JSON read once by main_deno.js: Pyodide's env, the memory cap, the Python prelude.
    pub settings_json: String,
    pub ready: Option<oneshot::Sender<Result<(), String>>>,
    pub job: Option<oneshot::Receiver<String>>,
    pub outcome: Option<oneshot::Sender<String>>,
}

/// The memory snapshot to restore, or where to send the one made (build time).
pub struct SnapshotIo {
    pub restore: Option<&'static [u8]>,
    pub made: Option<oneshot::Sender<Vec<u8>>>,
}

deno_core::extension!(
    codemode_bridge,
    ops = [
        op_assets_read,
        op_assets_text,
        op_entropy_fill,
        op_clock_now,
        op_text_decode,
        op_output_write,
        op_sandbox_settings,
        op_sandbox_ready,
        op_sandbox_next_job,
        op_sandbox_report,
        op_tools_catalog,
        op_tools_call,
        op_snapshot_read,
        op_snapshot_save,
        op_wasm_cached_module,
        op_wasm_cache_module,
    ],
);

fn no_such_asset(path: &str) -> JsErrorBox {
    JsErrorBox::type_error(format!(
        "no such file: '{path}' (the sandbox can read only Pyodide's pinned boot files)"
    ))
}

#[op2]
#[buffer]
fn op_assets_read(#[string] path: &str) -> Result<Vec<u8>, JsErrorBox> {
    crate::assets::pyodide_file(path)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| no_such_asset(path))
}

#[op2]
#[string]
fn op_assets_text(#[string] path: &str) -> Result<String, JsErrorBox> {
    let bytes = crate::assets::pyodide_file(path).ok_or_else(|| no_such_asset(path))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| no_such_asset(path))
}

#[op2(fast)]
fn op_entropy_fill(state: &mut OpState, #[buffer] buf: &mut [u8]) -> Result<(), JsErrorBox> {
    if buf.len() > 65536 {
        // Web Crypto's own limit; Emscripten asks in small chunks.
        return Err(JsErrorBox::range_error(
            "getRandomValues: at most 65536 bytes at a time",
        ));
    }
    state.borrow_mut::<Entropy>().0.fill_bytes(buf);
    Ok(())
}

#[op2(fast)]
fn op_clock_now(state: &mut OpState) -> f64 {
    state.borrow::<Clock>().0.elapsed().as_secs_f64() * 1000.0
}

#[op2]
#[string]
fn op_text_decode(
    #[buffer] bytes: &[u8],
    #[string] encoding: &str,
    fatal: bool,
) -> Result<String, JsErrorBox> {
    let invalid = || {
        JsErrorBox::type_error(format!(
            "The encoded data was not valid for encoding {encoding}"
        ))
    };
    match encoding {
        "utf-8" => {
            let bytes = bytes
                .strip_prefix(b"\xEF\xBB\xBF".as_slice())
                .unwrap_or(bytes);
            if fatal {
                std::str::from_utf8(bytes)
                    .map(str::to_owned)
                    .map_err(|_| invalid())
            } else {
                Ok(String::from_utf8_lossy(bytes).into_owned())
            }
        }
        "latin1" => Ok(bytes.iter().map(|&b| b as char).collect()),
        "utf-16le" => {
            let units = bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]));
            if fatal {
                char::decode_utf16(units)
                    .collect::<Result<String, _>>()
                    .map_err(|_| invalid())
            } else {
                Ok(char::decode_utf16(units)
                    .map(|c| c.unwrap_or('\u{FFFD}'))
                    .collect())
            }
        }
        other => Err(JsErrorBox::range_error(format!(
            "unsupported encoding '{other}'"
        ))),
    }
}

#[op2(fast)]
fn op_output_write(
    state: &mut OpState,
    stream: u32,
    #[buffer] bytes: &[u8],
) -> Result<(), JsErrorBox> {
    let stream = match stream {
        1 => Stream::Stdout,
        2 => Stream::Stderr,
        other => return Err(JsErrorBox::type_error(format!("no output stream {other}"))),
    };
    state.borrow::<SharedOutput>().write(stream, bytes);
    Ok(())
}

#[op2]
#[string]
fn op_sandbox_settings(state: &mut OpState) -> String {
    state.borrow::<Lifecycle>().settings_json.clone()
}

/// Called once by main_deno.js: an empty string when Pyodide is up, else why it is not.
#[op2(fast)]
fn op_sandbox_ready(state: &mut OpState, #[string] error: &str) {
    if let Some(tx) = state.borrow_mut::<Lifecycle>().ready.take() {
        let _ = tx.send(if error.is_empty() {
            Ok(())
        } else {
            Err(error.to_owned())
        });
    }
}

#[op2]
#[string]
async fn op_sandbox_next_job(state: Rc<RefCell<OpState>>) -> Result<String, JsErrorBox> {
    let job = state.borrow_mut().borrow_mut::<Lifecycle>().job.take();
    let job =
        job.ok_or_else(|| JsErrorBox::generic("this sandbox has already taken its one job"))?;
    job.await
        .map_err(|_| JsErrorBox::generic("the sandbox was discarded before it got a job"))
}

#[op2(fast)]
fn op_sandbox_report(state: &mut OpState, #[string] outcome_json: &str) {
    if let Some(tx) = state.borrow_mut::<Lifecycle>().outcome.take() {
        let _ = tx.send(outcome_json.to_owned());
    }
}

#[op2]
#[string]
fn op_tools_catalog(state: &mut OpState) -> String {
    signature::python_view(&state.borrow::<ToolBridge>().host().catalog()).to_string()
}

#[op2]
#[string]
async fn op_tools_call(
    state: Rc<RefCell<OpState>>,
    #[string] server: String,
    #[string] tool: String,
    #[string] arguments_json: String,
) -> String {
    let bridge = state.borrow().borrow::<ToolBridge>().clone();
    bridge.call_envelope(server, tool, &arguments_json).await
}

#[op2]
#[buffer]
fn op_snapshot_read(state: &mut OpState) -> Result<Vec<u8>, JsErrorBox> {
    let snapshot = state.borrow::<SnapshotIo>().restore;
    snapshot
        .map(<[u8]>::to_vec)
        .ok_or_else(|| JsErrorBox::generic("this sandbox has no snapshot to restore"))
}

#[op2(fast)]
fn op_snapshot_save(state: &mut OpState, #[buffer] bytes: &[u8]) {
    if let Some(tx) = state.borrow_mut::<SnapshotIo>().made.take() {
        let _ = tx.send(bytes.to_vec());
    }
}

/// Pyodide's wasm, compiled once per process and shared by every isolate (V8 shares the native
/// module, including code it later optimizes), instead of recompiled for each sandbox.
static PYODIDE_WASM: std::sync::OnceLock<v8::CompiledWasmModule> = std::sync::OnceLock::new();

#[op2]
fn op_wasm_cached_module<'s>(scope: &mut v8::PinScope<'s, '_>) -> v8::Local<'s, v8::Value> {
    match PYODIDE_WASM
        .get()
        .and_then(|compiled| v8::WasmModuleObject::from_compiled_module(scope, compiled))
    {
        Some(module) => module.into(),
        None => v8::undefined(scope).into(),
    }
}

#[op2(fast)]
fn op_wasm_cache_module(module: v8::Local<v8::Value>) -> Result<(), JsErrorBox> {
    let module: v8::Local<v8::WasmModuleObject> = module
        .try_into()
        .map_err(|_| JsErrorBox::type_error("expected a WebAssembly.Module"))?;
    let compiled = module.get_compiled_module();
    // Only Pyodide's pinned module may be shared with other sandboxes.
    if Some(compiled.get_wire_bytes_ref()) != crate::assets::pyodide_file("pyodide.asm.wasm") {
        return Err(JsErrorBox::type_error(
            "only Pyodide's pinned wasm module can be cached",
        ));
    }
    let _ = PYODIDE_WASM.set(compiled);
    Ok(())
}
