//! bridge — the ops between the sandbox (JS + Python) and Rust.
//!
//! Op families and the JS that uses them:
//!   assets   `op_assets_read`, `op_assets_text`          js/host_deno.js (Pyodide's loader)
//!   host     `op_entropy_fill`, `op_clock_now`, `op_text_decode`   js/host_deno.js
//!   output   `op_output_write`                            js/main_deno.js
//!   sandbox  `op_sandbox_settings|ready|idle|next_job|report`  js/main_deno.js
//!   tools    `op_tools_catalog|server_catalog|call|server_ready`   js/main_deno.js -> codemode.py
//!   snapshot `op_snapshot_read`, `op_snapshot_save`      js/main_deno.js
//!   wasm     `op_wasm_cached_module`, `op_wasm_cache_module`   js/host_deno.js
//!   memory   `op_memory_charge`                           js/host_deno.js
//!   wheels   `op_wheels_lock|index|member_fill`, `op_wasm_compile_listed`   js/main_deno.js, js/host_deno.js
//!
//! **Invariant:** the sandbox's JS holds the ops in closures and deletes `globalThis.Deno` before
//! any script runs; even so, every op validates its own arguments as if a script called it, and
//! every deno_core built-in the sandbox does not use is disabled ([`KEPT_DENO_CORE_OPS`]).
//! **Invariant:** boot-only ops (asset reads, the snapshot, the wasm cache, settings) refuse once
//! the sandbox is ready; `op_sandbox_ready` acts once; a job is handed out only when none runs,
//! and its outcome is accepted only with the token handed to the runner with that job.
//! **Invariant:** every host-side copy an op makes of its arguments is charged to the sandbox's
//! [`memory::MemoryBudget`] before it is made, or refused.
//! Ops are thin: they take what they need from `OpState` and call plain Rust.

pub mod memory;
pub mod output;
pub mod signature;
pub mod tools;
pub mod view;

use deno_core::{op2, v8, JsBuffer, OpDecl, OpState};
use deno_error::JsErrorBox;
use memory::MemoryBudget;
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;
use std::cell::Cell;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

pub use output::{ForwardOutput, LiveOutput, SharedOutput, Stream};
pub use tools::{
    Approval, NoTools, ServerCatalog, ToolBridge, ToolCallError, ToolCallRecord, ToolHost,
    ToolPort, ToolSpec, Tools,
};

/// The sandbox's only source of randomness: seeded (`--seed`) or from the OS.
pub struct Entropy(pub ChaCha20Rng);

/// Milliseconds for `performance.now()`, counted from the sandbox's creation.
pub struct Clock(pub Instant);

/// The lifecycle channels between the sandbox's JS and the Rust that drives it.
pub struct Lifecycle {
    /// Read once by main_deno.js: Pyodide's env, the memory cap, the Python prelude.
    pub settings: Option<crate::engine::BootSettings>,
    pub ready: Option<oneshot::Sender<Result<(), String>>>,
    /// The jobs, in order: one for a sandbox that runs one job, several for a session's. Out of
    /// here while `op_sandbox_next_job` waits on it; closed when no job will come.
    pub jobs: Option<mpsc::UnboundedReceiver<String>>,
    pub outcomes: mpsc::UnboundedSender<String>,
    /// Drawn afresh for each job and handed to the runner with it; the outcome is accepted only
    /// with it, so a script cannot report an outcome of its own. Empty once the job reported.
    pub report_token: String,
    /// A job was handed to the runner and has not reported yet: no other job is handed out.
    pub job_running: bool,
    /// A job has been handed out (warm-up rounds are over for good).
    pub took_a_job: bool,
}

impl Lifecycle {
    pub fn new(
        settings: crate::engine::BootSettings,
        ready: oneshot::Sender<Result<(), String>>,
        jobs: mpsc::UnboundedReceiver<String>,
        outcomes: mpsc::UnboundedSender<String>,
    ) -> Self {
        Self {
            settings: Some(settings),
            ready: Some(ready),
            jobs: Some(jobs),
            outcomes,
            // Not empty until the first report: the driver pumps V8's tasks eagerly until then.
            report_token: Self::fresh_token(),
            job_running: false,
            took_a_job: false,
        }
    }

    /// Not from `Entropy`: the script's seeded stream must not depend on the token.
    pub fn fresh_token() -> String {
        let mut token = [0u8; 16];
        let _ = getrandom::fill(&mut token);
        token.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A zygote's sandbox goes on warming up between forks: with one of these in its `OpState`,
/// `op_sandbox_idle` waits for the zygote to say whether to run another warm-up step (V8 then
/// tiers up Python's hot wasm functions once, in the zygote, instead of in every child). Without
/// one (a thread sandbox) the runner goes straight to its job.
#[derive(Default)]
pub struct IdleWarmUp {
    go: tokio::sync::Notify,
    more: Cell<bool>,
    asked: Cell<u64>,
    rounds: Cell<u64>,
}

impl IdleWarmUp {
    /// How often the runner has asked: each ask after the first ends a step.
    pub fn asked(&self) -> u64 {
        self.asked.get()
    }

    /// How many of those steps ended a round (the runner's steps run a round's jobs in turn).
    pub fn rounds(&self) -> u64 {
        self.rounds.get()
    }

    /// Lets the waiting runner go on: another round (`true`), or on to its job (`false`).
    pub fn answer(&self, more: bool) {
        self.more.set(more);
        self.go.notify_one();
    }
}

/// The sandbox's memory budget, shared with its isolate's array-buffer allocator.
pub struct Memory(pub Arc<MemoryBudget>);

thread_local! {
    /// True until Pyodide is ready: boot-only ops work, and V8 may compile wasm. One isolate per
    /// thread, each on a fresh thread, so this is the isolate's own phase.
    static BOOTING: Cell<bool> = const { Cell::new(true) };
}

/// Whether this thread's sandbox is still booting (see [`BOOTING`]).
pub fn booting() -> bool {
    BOOTING.with(Cell::get)
}

thread_local! {
    /// True only while `op_wasm_compile_listed` compiles a module whose sha256 it checked.
    static COMPILING_LISTED: Cell<bool> = const { Cell::new(false) };
}

/// Whether V8 may compile wasm now: while the sandbox boots, or while `op_wasm_compile_listed`
/// compiles one of the wheelhouse's own modules.
pub fn wasm_compile_allowed() -> bool {
    booting() || COMPILING_LISTED.with(Cell::get)
}

fn boot_only(op: &'static str) -> Result<(), JsErrorBox> {
    if booting() {
        Ok(())
    } else {
        Err(JsErrorBox::type_error(format!(
            "{op} works only while the sandbox boots"
        )))
    }
}

/// deno_core's own ops the sandbox keeps: what its event loop, timers and promise machinery call,
/// and `op_void_async_deferred` (host_deno.js's zero-delay timers). Every other built-in
/// (`op_print`, `op_panic`, `op_eval_context`, file and resource ops, ...) is disabled.
pub const KEPT_DENO_CORE_OPS: &[&str] = &[
    "op_void_async_deferred",
    "op_timer_now",
    "op_timer_schedule",
    "op_timer_track",
    "op_timer_untrack",
    "op_encode",
    "op_run_microtasks",
    "op_dispatch_exception",
    "op_drain_pending_rejections",
    "op_immediate_check",
    "op_event_loop_has_more_work",
    "op_ref_op",
    "op_unref_op",
    "op_set_captured_bootstrap",
    "op_get_ext_import_meta_proto",
    "op_get_extras_binding_object",
];

/// The extension's op middleware: runs over every op in the isolate, deno_core's included.
fn only_sandbox_ops(op: OpDecl) -> OpDecl {
    static OURS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        codemode_bridge::init()
            .ops
            .iter()
            .map(|op| op.name)
            .collect()
    });
    if OURS.contains(&op.name) || KEPT_DENO_CORE_OPS.contains(&op.name) {
        op
    } else {
        op.disable()
    }
}

/// The memory snapshot to restore, or where to send the one made (build time).
pub struct SnapshotIo {
    pub restore: Option<crate::engine::Snapshot>,
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
        op_sandbox_idle,
        op_sandbox_next_job,
        op_sandbox_report,
        op_tools_catalog,
        op_tools_server_catalog,
        op_tools_call,
        op_tools_server_ready,
        op_snapshot_read,
        op_snapshot_save,
        op_wasm_cached_module,
        op_wasm_cache_module,
        op_memory_charge,
        op_wheels_lock,
        op_wheels_index,
        op_wheels_member_fill,
        op_wasm_compile_listed,
    ],
    middleware = only_sandbox_ops,
);

fn no_such_asset(path: &str) -> JsErrorBox {
    JsErrorBox::type_error(format!(
        "no such file: '{path}' (the sandbox can read only Pyodide's pinned boot files)"
    ))
}

#[op2]
#[buffer]
fn op_assets_read(#[string] path: &str) -> Result<Vec<u8>, JsErrorBox> {
    boot_only("op_assets_read")?;
    crate::assets::pyodide_file(path)
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| no_such_asset(path))
}

#[op2]
#[string]
fn op_assets_text(#[string] path: &str) -> Result<String, JsErrorBox> {
    boot_only("op_assets_text")?;
    let bytes = crate::assets::pyodide_file(path).ok_or_else(|| no_such_asset(path))?;
    String::from_utf8(bytes.into_owned()).map_err(|_| no_such_asset(path))
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
    state: &mut OpState,
    #[buffer] bytes: &[u8],
    #[string] encoding: &str,
    fatal: bool,
) -> Result<String, JsErrorBox> {
    // The decoded copy is at most 3 bytes of UTF-8 per input byte (latin1: 2).
    let _copy = state
        .borrow::<Memory>()
        .0
        .reserve(bytes.len().saturating_mul(3))
        .ok_or_else(|| JsErrorBox::range_error("TextDecoder: out of memory (--memory-mb)"))?;
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
#[serde]
fn op_sandbox_settings(state: &mut OpState) -> Result<crate::engine::BootSettings, JsErrorBox> {
    boot_only("op_sandbox_settings")?;
    state
        .borrow_mut::<Lifecycle>()
        .settings
        .take()
        .ok_or_else(|| JsErrorBox::generic("the sandbox's settings were already read"))
}

/// Called once by main_deno.js: an empty string when Pyodide is up, else why it is not. Ends the
/// boot phase either way.
#[op2(fast)]
fn op_sandbox_ready(state: &mut OpState, #[string] error: &str) {
    BOOTING.with(|booting| booting.set(false));
    if let Some(tx) = state.borrow_mut::<Lifecycle>().ready.take() {
        let _ = tx.send(if error.is_empty() {
            Ok(())
        } else {
            Err(error.to_owned())
        });
    }
}

/// Between ready and the job: whether to run one more warm-up step (see [`IdleWarmUp`]);
/// `round_done` says whether the step before ended a round. Answers `false` at once where there
/// is no zygote, and once a job has been taken.
#[op2]
async fn op_sandbox_idle(state: Rc<RefCell<OpState>>, round_done: bool) -> bool {
    let warm = {
        let state = state.borrow();
        if booting() || state.borrow::<Lifecycle>().took_a_job {
            return false;
        }
        state.try_borrow::<Rc<IdleWarmUp>>().cloned()
    };
    let Some(warm) = warm else {
        return false;
    };
    warm.asked.set(warm.asked.get() + 1);
    warm.rounds.set(warm.rounds.get() + u64::from(round_done));
    warm.go.notified().await;
    warm.more.get()
}

/// The next job, as `{"token": ..., "job": ...}` (the token is what `op_sandbox_report` wants),
/// or an empty string once no job will come. Refused while a job runs: only a runner that has
/// reported takes the next one (a session's jobs run one at a time).
#[op2]
#[string]
async fn op_sandbox_next_job(state: Rc<RefCell<OpState>>) -> Result<String, JsErrorBox> {
    let jobs = {
        let mut state = state.borrow_mut();
        let lifecycle = state.borrow_mut::<Lifecycle>();
        if lifecycle.job_running {
            return Err(JsErrorBox::generic(
                "a job is running: the runner takes the next one after reporting it",
            ));
        }
        lifecycle.jobs.take()
    };
    let mut jobs =
        jobs.ok_or_else(|| JsErrorBox::generic("the runner is already waiting for a job"))?;
    let job = jobs.recv().await;
    let mut state = state.borrow_mut();
    let lifecycle = state.borrow_mut::<Lifecycle>();
    lifecycle.jobs = Some(jobs);
    let Some(job) = job else {
        return Ok(String::new());
    };
    lifecycle.took_a_job = true;
    lifecycle.job_running = true;
    // Drawn here, after any fork: each child, and each job, has its own.
    lifecycle.report_token = Lifecycle::fresh_token();
    Ok(format!(
        r#"{{"token":"{}","job":{job}}}"#,
        lifecycle.report_token
    ))
}

#[op2(fast)]
fn op_sandbox_report(
    state: &mut OpState,
    #[string] token: &str,
    #[string] outcome_json: &str,
) -> Result<(), JsErrorBox> {
    let lifecycle = state.borrow_mut::<Lifecycle>();
    if !lifecycle.job_running || token != lifecycle.report_token {
        return Err(JsErrorBox::type_error(
            "only the sandbox's runner reports the outcome",
        ));
    }
    lifecycle.report_token.clear();
    lifecycle.job_running = false;
    let _ = lifecycle.outcomes.send(outcome_json.to_owned());
    Ok(())
}

/// The catalogue index the job reads at its start (see [`view::PythonView::index`]).
#[op2]
#[string]
fn op_tools_catalog(state: &mut OpState) -> String {
    state.borrow::<Tools>().0.catalog_index()
}

/// One server's tools, in the version `op_tools_catalog` last read: read when the script first
/// touches `tools.<server>`.
#[op2]
#[string]
fn op_tools_server_catalog(state: &mut OpState, #[buffer] server: &[u8]) -> String {
    state.borrow::<Tools>().0.server_tools(server)
}

/// Waits until a server that was starting when the job began is up (or failed), bounded by the
/// server's timeout_s: "" when it runs (Python then reads the catalogue again), else why not.
/// Names arrive as bytes (counted buffers), so nothing is copied before it is checked.
#[op2]
#[string]
async fn op_tools_server_ready(state: Rc<RefCell<OpState>>, #[buffer] server: JsBuffer) -> String {
    let port = state.borrow().borrow::<Tools>().0.clone();
    port.wait_ready(server).await
}

#[op2]
#[string]
async fn op_tools_call(
    state: Rc<RefCell<OpState>>,
    #[buffer] server: JsBuffer,
    #[buffer] tool: JsBuffer,
    #[buffer] arguments_json: JsBuffer,
) -> String {
    let (port, budget) = {
        let state = state.borrow();
        (
            state.borrow::<Tools>().0.clone(),
            state.borrow::<Memory>().0.clone(),
        )
    };
    port.call(server, tool, arguments_json, budget).await
}

/// The snapshot to restore, handed out once: the bytes themselves if this sandbox holds the
/// last reference (a zygote), else a 31 MB copy (a pool's sandboxes share one).
#[op2]
#[buffer]
fn op_snapshot_read(state: &mut OpState) -> Result<Vec<u8>, JsErrorBox> {
    boot_only("op_snapshot_read")?;
    let snapshot = state.borrow_mut::<SnapshotIo>().restore.take();
    snapshot
        .map(|shared| Arc::try_unwrap(shared).unwrap_or_else(|shared| shared.to_vec()))
        .ok_or_else(|| JsErrorBox::generic("this sandbox has no snapshot to restore"))
}

#[op2(fast)]
fn op_snapshot_save(state: &mut OpState, #[buffer] bytes: &[u8]) {
    if !booting() {
        return;
    }
    if let Some(tx) = state.borrow_mut::<SnapshotIo>().made.take() {
        let _ = tx.send(bytes.to_vec());
    }
}

/// Pyodide's wasm, compiled once per process and shared by every isolate (V8 shares the native
/// module, including code it later optimizes), instead of recompiled for each sandbox.
static PYODIDE_WASM: std::sync::OnceLock<v8::CompiledWasmModule> = std::sync::OnceLock::new();

/// Pyodide's module as this process compiled it, once it has.
pub(crate) fn pyodide_module() -> Option<&'static v8::CompiledWasmModule> {
    PYODIDE_WASM.get()
}

/// Sets Pyodide's module for this process (made from the engine's code cache); the first wins.
pub(crate) fn set_pyodide_module(compiled: v8::CompiledWasmModule) {
    let _ = PYODIDE_WASM.set(compiled);
}

#[op2]
fn op_wasm_cached_module<'s>(scope: &mut v8::PinScope<'s, '_>) -> v8::Local<'s, v8::Value> {
    match PYODIDE_WASM
        .get()
        .filter(|_| booting())
        .and_then(|compiled| v8::WasmModuleObject::from_compiled_module(scope, compiled))
    {
        Some(module) => module.into(),
        None => v8::undefined(scope).into(),
    }
}

#[op2(fast)]
fn op_wasm_cache_module(module: v8::Local<v8::Value>) -> Result<(), JsErrorBox> {
    boot_only("op_wasm_cache_module")?;
    let module: v8::Local<v8::WasmModuleObject> = module
        .try_into()
        .map_err(|_| JsErrorBox::type_error("expected a WebAssembly.Module"))?;
    let compiled = module.get_compiled_module();
    // Only Pyodide's pinned module may be shared with other sandboxes.
    if Some(compiled.get_wire_bytes_ref())
        != crate::assets::pyodide_file("pyodide.asm.wasm").as_deref()
    {
        return Err(JsErrorBox::type_error(
            "only Pyodide's pinned wasm module can be cached",
        ));
    }
    let _ = PYODIDE_WASM.set(compiled);
    Ok(())
}

/// Charges memory V8 commits outside the array-buffer allocator (wasm memories and tables,
/// resizable buffers) before host_deno.js lets it happen. False: over budget, refuse.
///
/// Dead ArrayBuffers still hold budget until V8 collects them, so a charge that does not fit runs
/// a full GC and tries once more: whether a script gets `MemoryError` then depends on what it
/// keeps, not on when the GC last ran (V8 does the same for its own buffer allocations).
#[op2(fast)]
fn op_memory_charge(scope: &mut v8::PinScope<'_, '_>, state: &mut OpState, bytes: f64) -> bool {
    if !(bytes.is_finite() && bytes >= 0.0) {
        return false;
    }
    // f64 -> usize saturates, so an absurd request is simply refused.
    let bytes = bytes as usize;
    let budget = state.borrow::<Memory>().0.clone();
    if budget.try_charge(bytes) {
        return true;
    }
    if bytes > budget.limit() {
        return false;
    }
    scope.low_memory_notification();
    budget.try_charge(bytes)
}

/// The wheelhouse's lock (Pyodide's format), for the import hook in codemode.py.
#[op2]
#[string]
fn op_wheels_lock() -> String {
    crate::wheels::wheelhouse().lock_json().to_owned()
}

fn utf8(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// The files of a wheel (or of its bytecode zip) as JSON `[[path, size], …]`, "" if the wheelhouse
/// has no such file. js/runner.js lays them out in the sandbox's filesystem unread.
#[op2]
#[string]
fn op_wheels_index(#[buffer] name: &[u8]) -> String {
    crate::wheels::wheelhouse()
        .directory(utf8(name))
        .map(|d| d.index_json().to_owned())
        .unwrap_or_default()
}

/// Unpacks the `i`-th file of a wheel's index into `dest`, which the sandbox allocated (charged to
/// its memory budget) at the size the index gave; false if there is no such file or it is not
/// that size.
#[op2(fast)]
fn op_wheels_member_fill(#[buffer] name: &[u8], i: f64, #[buffer] dest: &mut [u8]) -> bool {
    if !(i.is_finite() && i >= 0.0 && i.fract() == 0.0) {
        return false;
    }
    crate::wheels::wheelhouse().read_member(utf8(name), i as usize, dest)
}

/// Compiles `bytes` if they are exactly one of the wheelhouse's wasm modules (its sha256 is
/// listed); anything else is undefined, and V8 refuses to compile it (the sandbox is ready). The
/// module is checked and compiled from one host-side copy, so nothing can change the bytes between
/// the check and the compile. Each listed module is compiled at most once per sandbox and the same
/// module object handed out again (a module is stateless; instances are charged as they are made),
/// its size charged to the budget for good: a script that asks for it a thousand times holds one
/// compiled module, not a thousand the budget would not see.
#[op2]
fn op_wasm_compile_listed<'s>(
    scope: &mut v8::PinScope<'s, '_>,
    state: &mut OpState,
    #[anybuffer] bytes: &[u8],
) -> v8::Local<'s, v8::Value> {
    use sha2::Digest;
    let hash: [u8; 32] = sha2::Sha256::digest(bytes).into();
    if let Some(module) = state
        .try_borrow::<ListedModules>()
        .and_then(|m| m.0.get(&hash))
    {
        return v8::Local::new(scope, module).into();
    }
    let budget = state.borrow::<Memory>().0.clone();
    if !budget.try_charge(bytes.len()) {
        return v8::undefined(scope).into();
    }
    let copy = bytes.to_vec();
    if !crate::wheels::wheelhouse().wasm_listed(&copy) {
        budget.release(copy.len());
        return v8::undefined(scope).into();
    }
    COMPILING_LISTED.with(|c| c.set(true));
    let module = v8::WasmModuleObject::compile(scope, &copy);
    COMPILING_LISTED.with(|c| c.set(false));
    let Some(module) = module else {
        budget.release(copy.len());
        return v8::undefined(scope).into();
    };
    if !state.has::<ListedModules>() {
        state.put(ListedModules::default());
    }
    state
        .borrow_mut::<ListedModules>()
        .0
        .insert(hash, v8::Global::new(scope, module));
    module.into()
}

/// The wheelhouse modules a sandbox has compiled, by sha256 (see `op_wasm_compile_listed`).
#[derive(Default)]
struct ListedModules(std::collections::HashMap<[u8; 32], v8::Global<v8::WasmModuleObject>>);

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// Names of the ops the sandbox's JS calls (`ops.op_…`), in every file it loads.
    fn called_from_js() -> BTreeSet<String> {
        crate::assets::JS_FILES
            .iter()
            .flat_map(|(_, text)| names_after(text, "ops.op_"))
            .map(|rest| format!("op_{rest}"))
            .collect()
    }

    /// What follows each `marker` in `text`: the longest run of `[a-z_|]`.
    fn names_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
        text.match_indices(marker)
            .map(|(at, _)| {
                let rest = &text[at + marker.len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == '|'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }

    /// The ops this module's doc table names: `op_tools_catalog|call` is `op_tools_catalog`
    /// and `op_tools_call`.
    fn documented() -> BTreeSet<String> {
        let doc: String = include_str!("mod.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut ops = BTreeSet::new();
        for named in names_after(&doc, "`op_") {
            let mut names = named.split('|');
            let first = format!("op_{}", names.next().unwrap());
            let family = &first[..3 + first[3..].find('_').unwrap() + 1]; // "op_tools_"
            ops.extend(names.map(|rest| format!("{family}{rest}")));
            ops.insert(first);
        }
        ops
    }

    /// The op list has one copy, the extension's: the doc table and the JS are checked against it.
    #[test]
    fn the_ops_the_js_calls_are_the_extensions_and_documented() {
        let ours: BTreeSet<String> = super::codemode_bridge::init()
            .ops
            .iter()
            .map(|op| op.name.to_owned())
            .collect();
        let kept: BTreeSet<String> = super::KEPT_DENO_CORE_OPS
            .iter()
            .map(|s| s.to_string())
            .collect();
        let called = called_from_js();
        let unused: Vec<_> = ours.difference(&called).collect();
        assert!(unused.is_empty(), "ops no JS calls: {unused:?}");
        let unknown: Vec<_> = called
            .difference(&ours)
            .filter(|op| !kept.contains(*op))
            .collect();
        assert!(
            unknown.is_empty(),
            "the JS calls ops that are disabled: {unknown:?}"
        );
        assert_eq!(documented(), ours, "bridge/mod.rs's table of op families");
    }
}
