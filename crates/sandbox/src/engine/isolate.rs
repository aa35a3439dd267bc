//! The sandbox thread: a current-thread tokio runtime, a deno_core `JsRuntime`, and the modules
//! main_deno.js imports, all served from memory.

use super::code_cache;
use super::memory::{self, MemoryShares};
use super::{EngineError, Fate, Limits, Sandbox, SandboxConfig, ThreadSandbox};
use crate::assets;
use crate::bridge::memory::MemoryBudget;
use crate::bridge::{
    self, Clock, Entropy, Lifecycle, Memory, SharedOutput, SnapshotIo, ToolBridge,
};
use deno_core::error::CoreError;
use deno_core::{
    v8, JsRuntime, ModuleLoadResponse, ModuleLoader, ModuleSource, ModuleSourceCode,
    ModuleSpecifier, ModuleType, ResolutionKind, RuntimeOptions,
};
use rand_chacha::ChaCha20Rng;
use std::rc::Rc;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

const MAIN_MODULE: &str = "file:///codemode/main_deno.js";
/// A boot that has not finished by then is stuck, not slow.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// The largest single allocation V8 makes: a max-length two-byte string (2^29 - 24 characters).
/// An allocation that crosses the heap limit must still fit, or V8 aborts the whole process.
const LARGEST_V8_ALLOCATION: usize = 1 << 30;

/// Process-wide V8 for thread sandboxes: the flags every sandbox process runs with (see
/// [`set_v8_flags`]) and deno_core's platform, before the first isolate exists (V8 freezes the
/// flags then: anything else that creates an isolate in this process must call this first).
/// With the flags a zygote has, V8 takes the build's compiled code here too (see
/// [`offer_compiled_code`]).
pub fn init_v8() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        set_v8_flags();
        JsRuntime::init_platform(None);
    });
}

/// Sets V8's flags for this process, the same in a zygote and in a process of thread sandboxes:
/// V8 takes compiled code (Pyodide's module, the JS modules' code caches) only under the flags
/// it was made with, and the build makes it under these.
///
/// `--disallow-code-generation-from-strings` closes the `Function("...")` / eval route from
/// Python into arbitrary host JS.
///
/// `--single-threaded`: no V8 work on worker threads. A fork then copies a whole, consistent
/// isolate, with no worker thread left behind holding a lock. In a process of thread sandboxes
/// it keeps compiles and GC on each sandbox's own thread: a background compile job that needs a
/// GC waits for its isolate's own thread, and a session's isolate is not driven between jobs
/// (`drive_jobs`), so two such jobs once held both workers for good and every other sandbox's
/// boot hung on them (seen with gdb: `CollectionBarrier::AwaitCollectionBackground` under
/// `ConcurrentBaselineCompiler`).
///
/// Single-threaded, V8 optimizes on the thread that runs the script, synchronously, when a
/// function's budget runs out, and in a child that work is thrown away with it. So the budgets
/// (wasm tiering, JS TurboFan) are four times V8's defaults (13,000,000 and 3,000 in this V8):
/// the zygote's warm-up rounds, which have the time, still get the job path optimized, and a
/// child's short job rarely crosses a budget it inherited half spent. No wasm deoptimization:
/// code the zygote optimized with its own call feedback was thrown out and re-optimized (a
/// quarter of a second for Python's interpreter loop) by every child whose calls differed —
/// any child with tools configured (measured: 336 ms → 26 ms for `print(1)`).
///
/// A floor of 64 MB under V8's heap limits (`--initial-old-space-size`, at most half the JS
/// heap's maximum): V8 then starts marking a heap only once its old generation passes it, or
/// all it holds (wasm memory counted as external memory) twice it. A child starts with the
/// limits V8 set for the zygote's small heap, so a job that grew Pyodide's memory by a few MB
/// (`import sympy`: 30 → 51 MB) had V8 mark and compact the whole heap in the middle of it:
/// ~28 ms of a child's CPU (perf, a build with symbols), which a sandbox that had grown before
/// had paid before. Bench row 11, one hour: forked `import sympy` 285 ms against 364 without
/// the floor (over its own import 13.6 ms against 70.4); idle memory, a child's, and
/// back-to-back `print(1)` unchanged (rows 8b-8g). Thread sandboxes, which mark on their own
/// thread too: `run --sandbox thread` of `import sympy` 0.29 s against 0.40–0.43 without it;
/// a server's idle memory with a pool of two unchanged (row 5).
pub(crate) fn set_v8_flags() {
    let flags = [
        String::new(),
        "--disallow-code-generation-from-strings".into(),
        "--single-threaded".into(),
        format!(
            "--wasm-tiering-budget={}",
            super::compiled_wasm::TIERING_BUDGET
        ),
        "--invocation-count-for-turbofan=12000".into(),
        "--no-wasm-deopt".into(),
        "--initial-old-space-size=64".into(),
    ];
    let unrecognized = deno_core::v8_set_flags(Vec::from(flags));
    debug_assert_eq!(unrecognized, vec![String::new()], "V8 flags not recognized");
}

/// The build's compiled code (see `zygote::make_compiled_code`) for this process's thread
/// sandboxes: Pyodide's module and the JS modules' code caches.
static COMPILED_CODE: std::sync::OnceLock<(&'static [u8], &'static [u8])> =
    std::sync::OnceLock::new();

/// Has this process's thread sandboxes start from `wasm` (Pyodide's module) and `js` (the JS
/// modules' code caches), made by the build under the same flags: none compiles CPython's
/// interpreter loop or what the build's imports ran again, nor parses the JS it boots. Call
/// before the first sandbox; where V8 refuses them (another CPU), sandboxes compile as before.
/// V8 checks only their headers and trusts the rest: offer only what the build wrote, whole.
pub fn offer_compiled_code(wasm: &'static [u8], js: &'static [u8]) {
    let _ = COMPILED_CODE.set((wasm, js));
}

/// The JS modules' code caches offered, after making Pyodide's module from the wasm offered
/// (once per process, in an isolate of its own, on the first sandbox thread that asks).
fn compiled_code_caches() -> &'static [u8] {
    static MODULE: Once = Once::new();
    let Some(&(wasm, js)) = COMPILED_CODE.get() else {
        return &[];
    };
    MODULE.call_once(|| {
        super::compiled_wasm::take(&v8::V8::get_current_platform(), wasm);
    });
    js
}

/// What a sandbox is made of before its isolate exists: the handle's half ([`Parts`]) and the
/// state its isolate's ops get ([`SandboxState`]).
pub(super) struct Prepared {
    pub parts: Parts,
    pub state: SandboxState,
    pub ready_rx: oneshot::Receiver<Result<(), String>>,
}

/// The driver's half of a sandbox: how it hands the runner jobs and learns what happened.
pub(super) struct Parts {
    pub limits: Limits,
    pub job_tx: mpsc::UnboundedSender<String>,
    pub outcome_rx: mpsc::UnboundedReceiver<String>,
    pub output: SharedOutput,
    pub tools: ToolBridge,
    pub fate: Arc<Fate>,
    pub budget: Arc<MemoryBudget>,
}

pub(super) fn prepare(
    config: SandboxConfig,
    make_snapshot: Option<oneshot::Sender<Vec<u8>>>,
) -> Result<Prepared, EngineError> {
    let limits = config.limits;
    let output = SharedOutput::new(limits.max_output, config.live_output);
    let tools = ToolBridge::new(config.tools);
    let (ready_tx, ready_rx) = oneshot::channel();
    let (job_tx, job_rx) = mpsc::unbounded_channel();
    let (outcome_tx, outcome_rx) = mpsc::unbounded_channel();
    let entropy = super::entropy_source(config.seed)?;
    let settings = super::BootSettings {
        warm_up: config.warm_up,
        ..super::BootSettings::new(
            &limits,
            config.seed,
            config.snapshot.is_some(),
            make_snapshot.is_some(),
        )
    };
    let lifecycle = Lifecycle::new(settings, ready_tx, job_rx, outcome_tx);
    let shares = MemoryShares::of(limits.memory_mb);
    let budget = MemoryBudget::new(shares.counted);
    Ok(Prepared {
        state: SandboxState {
            snapshot: SnapshotIo {
                restore: config.snapshot,
                made: make_snapshot,
            },
            lifecycle,
            output: output.clone(),
            tools: tools.clone(),
            entropy,
            js_heap: shares.js_heap,
            budget: budget.clone(),
        },
        parts: Parts {
            limits,
            job_tx,
            outcome_rx,
            output,
            tools,
            fate: Arc::new(Fate::default()),
            budget,
        },
        ready_rx,
    })
}

/// Starts a sandbox thread and waits until Pyodide is ready. With `make_snapshot`, the thread
/// instead sends a memory snapshot of the booted Pyodide and ends.
pub(super) async fn spawn(
    config: SandboxConfig,
    make_snapshot: Option<oneshot::Sender<Vec<u8>>>,
) -> Result<Sandbox, EngineError> {
    init_v8();
    let Prepared {
        parts,
        state,
        ready_rx,
    } = prepare(config, make_snapshot)?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let (handle_tx, handle_rx) = oneshot::channel();
    let thread_fate = parts.fate.clone();
    // The handle's jobs and outcomes pass through the thread's driver (see `drive_jobs`).
    let (job_tx, handle_jobs) = mpsc::unbounded_channel();
    let (handle_outcomes, outcome_rx) = mpsc::unbounded_channel();
    let relay = Relay {
        from_handle: handle_jobs,
        to_runner: parts.job_tx,
        from_runner: parts.outcome_rx,
        to_handle: handle_outcomes,
    };
    // Made here, not on the thread: the system's refusal is then this call's error, with its
    // cause, instead of the thread's last words.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| EngineError::System {
            what: "a runtime for its thread",
            source,
        })?;
    std::thread::Builder::new()
        .name("sandbox".into())
        .spawn(move || {
            let result = run_thread(rt, state, relay, handle_tx, stop_rx, thread_fate.clone());
            thread_fate.finish(result.err().map(|e| e.to_string()));
        })
        .map_err(|source| EngineError::System {
            what: "a thread",
            source,
        })?;

    let (fate, memory_mb) = (parts.fate.clone(), parts.limits.memory_mb);
    let isolate = handle_rx.await.map_err(|_| EngineError::Ended {
        reason: Some(
            fate.exit_reason
                .lock()
                .clone()
                .unwrap_or_else(|| "its thread ended before creating V8".to_owned()),
        ),
    })?;
    let sandbox = Sandbox::Thread(ThreadSandbox {
        limits: parts.limits,
        job_tx: Some(job_tx),
        outcome_rx,
        isolate,
        stop_tx: Some(stop_tx),
        output: parts.output,
        tools: parts.tools,
        fate: parts.fate,
        budget: parts.budget,
    });
    wait_ready(ready_rx, &fate, memory_mb)
        .await
        .map(|()| sandbox)
}

/// Waits until the sandbox's JS says Pyodide is up (or why it is not). `memory_mb` is the
/// sandbox's limit, which a boot that exhausts its heap is told against.
pub(super) async fn wait_ready(
    ready_rx: oneshot::Receiver<Result<(), String>>,
    fate: &Fate,
    memory_mb: u64,
) -> Result<(), EngineError> {
    wait_ready_within(BOOT_TIMEOUT, ready_rx, fate, memory_mb).await
}

async fn wait_ready_within(
    boot_timeout: Duration,
    ready_rx: oneshot::Receiver<Result<(), String>>,
    fate: &Fate,
    memory_mb: u64,
) -> Result<(), EngineError> {
    match tokio::time::timeout(boot_timeout, ready_rx).await {
        Ok(Ok(Ok(()))) => Ok(()),
        // The runner's words: JavaScript's or Python's error, which is all there is of it.
        Ok(Ok(Err(message))) => Err(EngineError::Pyodide(message)),
        Ok(Err(_))
            if fate
                .heap_exhausted
                .load(std::sync::atomic::Ordering::SeqCst) =>
        {
            Err(EngineError::heap_exhausted(memory_mb))
        }
        // The thread drops the runner (and this channel) before it records why it ended.
        Ok(Err(_)) => Err(EngineError::Ended {
            reason: fate.reason().await,
        }),
        Err(_) => Err(EngineError::BootTimeout(boot_timeout)),
    }
}

pub(super) struct SandboxState {
    snapshot: SnapshotIo,
    lifecycle: Lifecycle,
    output: SharedOutput,
    tools: ToolBridge,
    entropy: ChaCha20Rng,
    js_heap: usize,
    budget: Arc<MemoryBudget>,
}

/// Creates the sandbox's isolate with its limits and ops, and loads nothing yet. The calling
/// thread must be inside a tokio runtime: V8 posts delayed tasks through it.
/// `code_caches`: V8's code caches of the modules (see [`code_cache`]), for a runtime whose V8
/// flags are those they were made with (empty: none).
pub(super) fn create_runtime(
    state: SandboxState,
    fate: &Arc<Fate>,
    code_caches: &'static [u8],
) -> JsRuntime {
    let mut js = JsRuntime::new(RuntimeOptions {
        module_loader: Some(Rc::new(EmbeddedModules { code_caches })),
        extensions: vec![bridge::codemode_bridge::init()],
        create_params: Some(
            v8::CreateParams::default()
                .heap_limits(0, state.js_heap)
                .array_buffer_allocator(memory::counting_allocator(state.budget.clone())),
        ),
        ..Default::default()
    });
    memory::gate_wasm_compilation(js.v8_isolate());
    // deno_core asks V8 for a detailed stack trace of every error in case it goes uncaught, and
    // V8 then computes source positions (re-parsing the functions on the stack) for each error
    // made, caught or not. Pyodide's loader throws and catches hundreds while it boots; ours catch
    // their own errors and report `error.stack`, which V8 still captures.
    js.v8_isolate()
        .set_capture_stack_trace_for_uncaught_exceptions(false, 0);
    {
        let op_state = js.op_state();
        let mut op_state = op_state.borrow_mut();
        op_state.put(state.lifecycle);
        op_state.put(state.snapshot);
        op_state.put(state.output);
        op_state.put(bridge::Tools(Rc::new(state.tools)));
        op_state.put(Entropy(state.entropy));
        op_state.put(Clock(Instant::now()));
        op_state.put(Memory(state.budget));
    }
    let heap_handle = js.v8_isolate().thread_safe_handle();
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
    js
}

/// Starts evaluating main_deno.js; the returned future resolves when the module has finished
/// (after its one job), as the event loop drives it.
pub(super) async fn load_main(
    js: &mut JsRuntime,
) -> Result<impl std::future::Future<Output = Result<(), CoreError>>, CoreError> {
    let main = ModuleSpecifier::parse(MAIN_MODULE).expect("valid specifier");
    let id = js.load_main_es_module(&main).await?;
    Ok(js.mod_evaluate(id))
}

/// One turn of the event loop. With `platform` (a forked sandbox's single-threaded V8 platform,
/// whose foreground tasks nobody else runs), its tasks run too, those the turn posted included.
pub(super) fn poll_js(
    js: &mut JsRuntime,
    platform: Option<&v8::SharedRef<v8::Platform>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Result<(), CoreError>> {
    let pump = |js: &mut JsRuntime| {
        let mut ran = false;
        if let Some(platform) = platform {
            while v8::Platform::pump_message_loop(platform, js.v8_isolate(), false) {
                ran = true;
            }
        }
        ran
    };
    pump(js);
    let polled = js.poll_event_loop(cx, Default::default());
    // Once the outcome is reported, V8's housekeeping (GC steps, tier-up) must not delay it.
    let reported = js
        .op_state()
        .borrow()
        .borrow::<Lifecycle>()
        .report_token
        .is_empty();
    if !reported && pump(js) {
        cx.waker().wake_by_ref();
        if polled.is_ready() {
            return std::task::Poll::Pending;
        }
    }
    polled
}

/// The channels a sandbox thread's driver passes jobs and outcomes through.
struct Relay {
    from_handle: mpsc::UnboundedReceiver<String>,
    to_runner: mpsc::UnboundedSender<String>,
    from_runner: mpsc::UnboundedReceiver<String>,
    to_handle: mpsc::UnboundedSender<String>,
}

fn run_thread(
    rt: tokio::runtime::Runtime,
    state: SandboxState,
    relay: Relay,
    handle_tx: oneshot::Sender<v8::IsolateHandle>,
    stop_rx: oneshot::Receiver<()>,
    fate: Arc<Fate>,
) -> Result<(), CoreError> {
    let _guard = rt.enter();
    let mut js = create_runtime(state, &fate, compiled_code_caches());
    if handle_tx
        .send(js.v8_isolate().thread_safe_handle())
        .is_err()
    {
        return Ok(()); // the handle was dropped: nobody wants this sandbox any more
    }
    rt.block_on(async move {
        let run = async {
            let evaluated = load_main(&mut js).await?;
            let js = &mut js;
            drive_jobs(
                std::future::poll_fn(|cx| poll_js(js, None, cx)),
                evaluated,
                relay,
            )
            .await
        };
        tokio::select! {
            result = run => result,
            _ = stop_rx => Ok(()),
        }
    })
}

/// Drives the isolate while it boots and waits for its first job, and while a job runs; not at
/// all between a session's jobs, so nothing a script left behind (a timer, a task) runs outside
/// a job's time limit. A job arriving wakes the runner, waiting in `op_sandbox_next_job`.
async fn drive_jobs(
    event_loop: impl std::future::Future<Output = Result<(), CoreError>>,
    evaluated: impl std::future::Future<Output = Result<(), CoreError>>,
    mut relay: Relay,
) -> Result<(), CoreError> {
    let run = async {
        event_loop.await?;
        evaluated.await
    };
    let mut run = std::pin::pin!(run);
    let mut phase = Phase::Boot;
    loop {
        tokio::select! {
            biased;
            outcome = relay.from_runner.recv() => {
                let Some(outcome) = outcome else { return Ok(()) };
                phase = Phase::Idle;
                if relay.to_handle.send(outcome).is_err() {
                    return Ok(());
                }
            }
            ended = &mut run, if phase != Phase::Idle => return ended,
            job = relay.from_handle.recv(), if phase != Phase::Running => {
                let Some(job) = job else { return Ok(()) }; // no more jobs: the sandbox ends
                phase = Phase::Running;
                let _ = relay.to_runner.send(job);
            }
        }
    }
}

/// Where a sandbox's driver is (see [`drive_jobs`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Booting, or booted and waiting for its first job: driven.
    Boot,
    /// A job runs: driven.
    Running,
    /// Between a session's jobs: not driven.
    Idle,
}

/// The source of the embedded module at `path` (of a `file:` specifier), if there is one.
pub(super) fn embedded_module(path: &str) -> Option<&'static str> {
    if let Some(name) = path.strip_prefix("/codemode/") {
        assets::js_file(name).filter(|_| name.ends_with(".js"))
    } else if let Some(name) = path.strip_prefix("/pyodide/") {
        assets::pyodide_module(name)
    } else {
        None
    }
}

/// Serves main_deno.js and everything it imports from the binary, each with its code cache
/// where it has one. Any other specifier is an error.
struct EmbeddedModules {
    code_caches: &'static [u8],
}

impl ModuleLoader for EmbeddedModules {
    fn resolve(
        &self,
        specifier: &str,
        referrer: &str,
        _kind: ResolutionKind,
    ) -> Result<ModuleSpecifier, deno_core::error::ModuleLoaderError> {
        deno_core::resolve_import(specifier, referrer).map_err(deno_error::JsErrorBox::from_err)
    }

    /// deno_core calls this only for a module whose cache V8 refused (it offers V8's own new
    /// cache, which nothing keeps: the next process would refuse it too).
    fn code_cache_ready(
        &self,
        specifier: ModuleSpecifier,
        _hash: u64,
        _code_cache: &[u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
        tracing::info!(
            "V8 did not take the build's code cache for {specifier} (another V8 or other flags?); compiled from its source"
        );
        Box::pin(std::future::ready(()))
    }

    fn load(
        &self,
        specifier: &ModuleSpecifier,
        _maybe_referrer: Option<&deno_core::ModuleLoadReferrer>,
        _options: deno_core::ModuleLoadOptions,
    ) -> ModuleLoadResponse {
        let path = specifier.path();
        let code = (specifier.scheme() == "file")
            .then(|| embedded_module(path))
            .flatten();
        ModuleLoadResponse::Sync(match code {
            Some(code) => Ok(ModuleSource::new(
                ModuleType::JavaScript,
                ModuleSourceCode::String(deno_core::ModuleCodeString::from_static(code)),
                specifier,
                code_cache::find(self.code_caches, path, code).map(|(hash, cache)| {
                    tracing::debug!("{specifier}: offered to V8 with the build's code cache");
                    deno_core::SourceCodeCacheInfo {
                        hash,
                        data: Some(std::borrow::Cow::Borrowed(cache)),
                    }
                }),
            )),
            None => Err(deno_error::JsErrorBox::generic(format!(
                "module not found: {specifier} (the sandbox imports only its embedded modules)"
            ))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_way_a_boot_ends_short_of_ready_has_its_kind() {
        let soon = Duration::from_millis(50);
        let (tx, rx) = oneshot::channel();
        tx.send(Err("SyntaxError: boom".to_owned())).unwrap();
        let said = wait_ready_within(soon, rx, &Fate::default(), 512).await;
        assert!(
            matches!(&said, Err(EngineError::Pyodide(m)) if m == "SyntaxError: boom"),
            "{said:?}"
        );

        let (tx, rx) = oneshot::channel::<Result<(), String>>();
        let fate = Fate::default();
        fate.heap_exhausted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        drop(tx);
        let heap = wait_ready_within(soon, rx, &fate, 512).await;
        let js_heap_mib = MemoryShares::of(512).js_heap >> 20;
        assert!(
            matches!(&heap, Err(EngineError::HeapExhausted { js_heap_mib: j, memory_mb: 512 }) if *j == js_heap_mib),
            "{heap:?}"
        );

        let (tx, rx) = oneshot::channel::<Result<(), String>>();
        let fate = Fate::default();
        fate.finish(Some("Uncaught Error: lost".into()));
        drop(tx);
        let ended = wait_ready_within(soon, rx, &fate, 512).await;
        assert!(
            matches!(&ended, Err(EngineError::Ended { reason: Some(r) }) if r == "Uncaught Error: lost"),
            "{ended:?}"
        );

        let (_tx, rx) = oneshot::channel::<Result<(), String>>();
        let stuck = wait_ready_within(soon, rx, &Fate::default(), 512).await;
        assert!(
            matches!(&stuck, Err(EngineError::BootTimeout(d)) if *d == soon),
            "{stuck:?}"
        );
    }
}
