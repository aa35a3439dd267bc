//! The sandbox thread: a current-thread tokio runtime, a deno_core `JsRuntime`, and the modules
//! main_deno.js imports, all served from memory.

use super::memory::{self, MemoryShares};
use super::{EngineError, Fate, Sandbox, SandboxConfig};
use crate::assets;
use crate::bridge::memory::MemoryBudget;
use crate::bridge::{
    self, Clock, Entropy, Lifecycle, Memory, SharedOutput, SnapshotIo, ToolBridge,
};
use deno_core::{
    v8, JsRuntime, ModuleLoadResponse, ModuleLoader, ModuleSource, ModuleSourceCode,
    ModuleSpecifier, ModuleType, ResolutionKind, RuntimeOptions,
};
use rand_chacha::ChaCha20Rng;
use std::rc::Rc;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

const MAIN_MODULE: &str = "file:///codemode/main_deno.js";
/// A boot that has not finished by then is stuck, not slow.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// The largest single allocation V8 makes: a max-length two-byte string (2^29 - 24 characters).
/// An allocation that crosses the heap limit must still fit, or V8 aborts the whole process.
const LARGEST_V8_ALLOCATION: usize = 1 << 30;

/// Process-wide V8 flags, set before the first isolate exists (V8 freezes them then: anything
/// else that creates an isolate in this process must call this first).
pub fn init_v8() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Closes the `Function("...")` / eval route from Python into arbitrary host JS.
        let _unrecognized = deno_core::v8_set_flags(vec![
            "".into(),
            "--disallow-code-generation-from-strings".into(),
        ]);
    });
}

/// Starts a sandbox thread and waits until Pyodide is ready. With `make_snapshot`, the thread
/// instead sends a memory snapshot of the booted Pyodide and ends.
pub(super) async fn spawn(
    config: SandboxConfig,
    make_snapshot: Option<oneshot::Sender<Vec<u8>>>,
) -> Result<Sandbox, EngineError> {
    init_v8();
    let limits = config.limits;
    let output = SharedOutput::new(limits.max_output, config.live_output);
    let tools = ToolBridge::new(config.tools);
    let bridge = tools.clone();
    let fate = Arc::new(Fate::default());
    let (ready_tx, ready_rx) = oneshot::channel();
    let (job_tx, job_rx) = oneshot::channel();
    let (outcome_tx, outcome_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel();
    let (handle_tx, handle_rx) = oneshot::channel();

    let entropy = super::entropy_source(config.seed)?;
    let mut settings = super::boot_settings(
        &limits,
        config.seed,
        config.snapshot.is_some(),
        make_snapshot.is_some(),
    );
    settings["warmUp"] = config.warm_up.into();
    let settings_json = settings.to_string();
    let lifecycle = Lifecycle::new(settings_json, ready_tx, job_rx, outcome_tx);

    let snapshot = config.snapshot;
    let thread_output = output.clone();
    let thread_fate = fate.clone();
    let shares = MemoryShares::of(limits.memory_mb);
    let budget = MemoryBudget::new(shares.counted);
    let thread_budget = budget.clone();
    std::thread::Builder::new()
        .name("sandbox".into())
        .spawn(move || {
            let state = SandboxState {
                snapshot: SnapshotIo {
                    restore: snapshot,
                    made: make_snapshot,
                },
                lifecycle,
                output: thread_output,
                tools,
                entropy,
                js_heap: shares.js_heap,
                budget: thread_budget,
            };
            let result = run_thread(state, handle_tx, stop_rx, thread_fate.clone());
            thread_fate.finish(result.err());
        })
        .map_err(|e| EngineError::Boot(format!("cannot start a sandbox thread: {e}")))?;

    let isolate = handle_rx.await.map_err(|_| {
        EngineError::Boot(exit_reason(
            &fate,
            "the sandbox thread ended before creating V8",
        ))
    })?;
    let sandbox = Sandbox {
        limits,
        job_tx: Some(job_tx),
        outcome_rx: Some(outcome_rx),
        isolate,
        stop_tx: Some(stop_tx),
        output,
        tools: bridge,
        fate: fate.clone(),
        budget,
    };
    match tokio::time::timeout(BOOT_TIMEOUT, ready_rx).await {
        Ok(Ok(Ok(()))) => Ok(sandbox),
        Ok(Ok(Err(message))) => Err(EngineError::Boot(message)),
        Ok(Err(_)) => Err(EngineError::Boot(exit_reason(
            &fate,
            "the sandbox ended while booting",
        ))),
        Err(_) => Err(EngineError::Boot(format!(
            "Pyodide did not boot within {} s",
            BOOT_TIMEOUT.as_secs()
        ))),
    }
}

fn exit_reason(fate: &Fate, fallback: &str) -> String {
    fate.exit_reason
        .lock()
        .clone()
        .unwrap_or_else(|| fallback.to_owned())
}

struct SandboxState {
    snapshot: SnapshotIo,
    lifecycle: Lifecycle,
    output: SharedOutput,
    tools: ToolBridge,
    entropy: ChaCha20Rng,
    js_heap: usize,
    budget: Arc<MemoryBudget>,
}

fn run_thread(
    state: SandboxState,
    handle_tx: oneshot::Sender<v8::IsolateHandle>,
    stop_rx: oneshot::Receiver<()>,
    fate: Arc<Fate>,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the sandbox's tokio runtime: {e}"))?;
    // V8 posts delayed tasks through tokio: the runtime must exist when the isolate is created.
    let _guard = rt.enter();
    let mut js = JsRuntime::new(RuntimeOptions {
        module_loader: Some(Rc::new(EmbeddedModules)),
        extensions: vec![bridge::codemode_bridge::init()],
        create_params: Some(
            v8::CreateParams::default()
                .heap_limits(0, state.js_heap)
                .array_buffer_allocator(memory::counting_allocator(state.budget.clone())),
        ),
        ..Default::default()
    });
    memory::gate_wasm_compilation(js.v8_isolate());
    {
        let op_state = js.op_state();
        let mut op_state = op_state.borrow_mut();
        op_state.put(state.lifecycle);
        op_state.put(state.snapshot);
        op_state.put(state.output);
        op_state.put(state.tools);
        op_state.put(Entropy(state.entropy));
        op_state.put(Clock(Instant::now()));
        op_state.put(Memory(state.budget));
    }
    let handle = js.v8_isolate().thread_safe_handle();
    let heap_handle = handle.clone();
    let heap_fate = fate.clone();
    js.add_near_heap_limit_callback(move |current, _initial| {
        // Stop the script instead of letting V8 abort the process: grant room for the allocation
        // in progress (whatever its size) and terminate at the next interrupt check.
        heap_fate
            .heap_exhausted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        heap_handle.terminate_execution();
        current.saturating_add(LARGEST_V8_ALLOCATION)
    });
    if handle_tx.send(handle).is_err() {
        return Ok(()); // the handle was dropped: nobody wants this sandbox any more
    }
    rt.block_on(async move {
        let main = ModuleSpecifier::parse(MAIN_MODULE).expect("valid specifier");
        let run = async {
            let id = js
                .load_main_es_module(&main)
                .await
                .map_err(|e| e.to_string())?;
            let evaluated = js.mod_evaluate(id);
            js.run_event_loop(Default::default())
                .await
                .map_err(|e| e.to_string())?;
            evaluated.await.map_err(|e| e.to_string())
        };
        tokio::select! {
            result = run => result,
            _ = stop_rx => Ok(()),
        }
    })
}

/// Serves main_deno.js and everything it imports from the binary. Any other specifier is an error.
struct EmbeddedModules;

impl ModuleLoader for EmbeddedModules {
    fn resolve(
        &self,
        specifier: &str,
        referrer: &str,
        _kind: ResolutionKind,
    ) -> Result<ModuleSpecifier, deno_core::error::ModuleLoaderError> {
        deno_core::resolve_import(specifier, referrer).map_err(deno_error::JsErrorBox::from_err)
    }

    fn load(
        &self,
        specifier: &ModuleSpecifier,
        _maybe_referrer: Option<&deno_core::ModuleLoadReferrer>,
        _options: deno_core::ModuleLoadOptions,
    ) -> ModuleLoadResponse {
        let path = specifier.path();
        let code = if specifier.scheme() != "file" {
            None
        } else if let Some(name) = path.strip_prefix("/codemode/") {
            assets::js_file(name).filter(|_| name.ends_with(".js"))
        } else if let Some(name) = path.strip_prefix("/pyodide/") {
            assets::pyodide_module(name)
        } else {
            None
        };
        ModuleLoadResponse::Sync(match code {
            Some(code) => Ok(ModuleSource::new(
                ModuleType::JavaScript,
                ModuleSourceCode::String(deno_core::ModuleCodeString::from_static(code)),
                specifier,
                None,
            )),
            None => Err(deno_error::JsErrorBox::generic(format!(
                "module not found: {specifier} (the sandbox imports only its embedded modules)"
            ))),
        })
    }
}
