//! engine — one Python sandbox: a V8 isolate on its own thread running Pyodide, with limits.
//!
//! `Sandbox::new(config)` boots (or, later, restores) Pyodide and waits until it is ready;
//! `Sandbox::execute(job)` runs one script and returns its [`Outcome`], and the sandbox is then
//! destroyed, so nothing leaks from one script into the next. A session's sandbox instead runs
//! its jobs one after another with [`Sandbox::execute_kept`], each seeing what the previous left
//! (globals, imports, files), and is destroyed when the session ends.
//!
//! **Invariant:** V8 never leaves the sandbox thread; the handle talks to it through channels and
//! the isolate's thread-safe handle (used only to terminate it).
//! **Invariant:** a limit breach (timeout, V8 heap, MemoryError) ends the isolate; it is never
//! reused. Between a session's jobs the isolate is not driven at all (see `isolate::drive_jobs`).

mod code_cache;
mod compiled_wasm;
pub mod control;
pub mod files;
mod isolate;
mod memory;
pub mod pool;
pub mod zygote;

pub use control::RunControl;
pub use files::{InputFile, OutputFile, OutputLimits};
pub use isolate::{init_v8, offer_compiled_code};
pub use memory::MemoryShares;
pub use pool::Pool;
pub use zygote::{ForkedSandbox, PagesAhead, Zygote, ZygoteCommand};

use crate::bridge::output::LiveOutput;
use crate::bridge::{SharedOutput, ToolBridge, ToolCallRecord, ToolHost};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Limits every sandbox runs under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Wall-clock time for one script, from the job's start.
    pub timeout: Duration,
    /// Everything one sandbox may allocate: a quarter (at least 32 MiB) is V8's JS heap, the
    /// rest is shared by Python's memory, buffers and host copies ([`MemoryShares`]).
    pub memory_mb: u64,
    /// Bytes of stdout and of stderr kept; the rest is counted and reported.
    pub max_output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory_mb: 512,
            max_output: 1 << 20,
        }
    }
}

/// Everything a new sandbox needs.
pub struct SandboxConfig {
    pub limits: Limits,
    /// Derive all randomness (os.urandom, random, uuid4, hash seed) from this number.
    pub seed: Option<u64>,
    pub tools: Arc<dyn ToolHost>,
    /// Called with output as it is printed (after the cap is applied).
    pub live_output: Option<LiveOutput>,
    /// Restore this Pyodide memory snapshot instead of booting (the product embeds one, made by
    /// [`make_snapshot`]; None boots from scratch, ~10× slower, for comparison and debugging).
    pub snapshot: Option<Snapshot>,
    /// Run a silent job while booting, so the first real job skips first-time compilation
    /// (~10 ms). Worth it for sandboxes booted ahead of demand (the pool), not for one-off runs.
    pub warm_up: bool,
}

impl SandboxConfig {
    /// A sandbox with `limits`, restoring `snapshot` (or booting, with None), without tools.
    pub fn new(limits: Limits, snapshot: Option<Snapshot>) -> Self {
        Self {
            limits,
            seed: None,
            tools: Arc::new(crate::bridge::NoTools),
            live_output: None,
            snapshot,
            warm_up: false,
        }
    }
}

/// A Pyodide memory snapshot to restore (31 MB). Shared by the sandboxes a pool restores; a
/// holder that is the last one (a zygote, which restores once) hands the bytes to V8 without a
/// copy, and they are gone once restored.
pub type Snapshot = Arc<Vec<u8>>;

/// The seed a snapshot is made with: its hash seed and `random` state are then the same in every
/// build. A restored sandbox reseeds `random`; the hash seed stays (see README).
pub const SNAPSHOT_SEED: u64 = 0;

/// Boots Pyodide once, imports the modules scripts use most, and returns a memory snapshot that
/// later sandboxes restore instead of booting (the product's build.rs embeds it).
pub async fn make_snapshot() -> Result<Vec<u8>, EngineError> {
    let limits = Limits {
        memory_mb: 1024,
        ..Limits::default()
    };
    let mut config = SandboxConfig::new(limits, None);
    config.seed = Some(SNAPSHOT_SEED);
    let (tx, rx) = oneshot::channel();
    let _sandbox = isolate::spawn(config, Some(tx)).await?;
    rx.await.map_err(|_| EngineError::NoSnapshot)
}

/// Compiles every wheelhouse package's Python sources once, at build time, in a sandbox (so with
/// exactly the CPython that will load the bytecode): (wheel file name, zip of its
/// `__pycache__/*.pyc`, unchecked-hash pycs whose file names are site-packages' own, each
/// compressed with Zstandard). Wheels ship
/// sources only; without this every fresh sandbox compiles what it imports.
pub async fn make_bytecode(
    snapshot: Option<Snapshot>,
) -> Result<Vec<(String, Vec<u8>)>, EngineError> {
    const SCRIPT: &str = r#"
import codemode, compileall, io, os, py_compile, re, shutil, zipfile
site = codemode._site_packages()
for name, entry in sorted(codemode._WHEELHOUSE.packages().items()):
    root = f"/tmp/bytecode/{name}"
    codemode._host().install_wheel(entry["file_name"], root)
    # Test suites are left out: scripts do not import them, and they are half of sympy.
    compileall.compile_dir(root, ddir=site, quiet=2, rx=re.compile(r"/tests?/"), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for folder, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                if f.endswith(".pyc"):
                    z.write(os.path.join(folder, f), os.path.relpath(os.path.join(folder, f), root))
    shutil.rmtree(root)
    print(entry["file_name"], out.getvalue().hex())
"#;
    let limits = Limits {
        timeout: Duration::from_secs(900),
        memory_mb: 4096,
        max_output: 1 << 30,
    };
    let sandbox = Sandbox::new(SandboxConfig::new(limits, snapshot)).await?;
    let outcome = sandbox.execute(Job::new(SCRIPT)).await;
    match outcome.error {
        Some(e) => Err(BytecodeError::Script(e)),
        None => bytecode_zips(&outcome.stdout),
    }
    .map_err(EngineError::Bytecode)
}

/// The zips [`make_bytecode`]'s script printed, a `<wheel file> <hex>` line each.
fn bytecode_zips(stdout: &str) -> Result<Vec<(String, Vec<u8>)>, BytecodeError> {
    let mut zips = Vec::new();
    for line in stdout.lines() {
        let (file, hex) = line
            .split_once(' ')
            .ok_or_else(|| BytecodeError::Unreadable(line.to_owned()))?;
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|source| BytecodeError::Hex {
                wheel: file.to_owned(),
                source,
            })?;
        let zip =
            crate::wheels::repack_zstd(&bytes, 9).map_err(|reason| BytecodeError::Repack {
                wheel: file.to_owned(),
                reason,
            })?;
        zips.push((format!("{file}.pyc.zip"), zip));
    }
    Ok(zips)
}

/// The sandbox's randomness: ChaCha20 seeded from `seed`, else from the OS. Every host that must
/// match the V8 host byte for byte (the browser-parity host) draws from this same stream.
pub fn entropy_source(seed: Option<u64>) -> Result<rand_chacha::ChaCha20Rng, EngineError> {
    use rand_core::SeedableRng;
    Ok(match seed {
        Some(seed) => rand_chacha::ChaCha20Rng::seed_from_u64(seed),
        None => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| {
                EngineError::Entropy(match e.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::other(e.to_string()),
                })
            })?;
            rand_chacha::ChaCha20Rng::from_seed(bytes)
        }
    })
}

/// The settings js/runner.js boots with (its `bootSandbox` names them), decided once for every
/// host: main_deno.js reads them through `op_sandbox_settings`, the browser's page as JSON.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BootSettings {
    /// Pyodide's environment variables.
    pub env: BTreeMap<String, String>,
    /// The cap on Pyodide's wasm memory.
    pub memory_bytes: usize,
    /// js/codemode.py, loaded as the module `codemode` where no snapshot is restored.
    pub prelude_source: &'static str,
    pub restore_snapshot: bool,
    pub make_snapshot: bool,
    /// Run `codemode.warm_up()` once booted (a pool's or a zygote's sandbox; never the browser).
    pub warm_up: bool,
}

impl BootSettings {
    pub fn new(limits: &Limits, seed: Option<u64>, restore: bool, make_snapshot: bool) -> Self {
        let mut env = BTreeMap::new();
        if let Some(seed) = seed {
            // Python's hash seed must be in 0..=4294967295. A restored snapshot keeps its own.
            env.insert(
                "PYTHONHASHSEED".to_owned(),
                (seed % 4_294_967_296).to_string(),
            );
        }
        Self {
            env,
            memory_bytes: MemoryShares::of(limits.memory_mb).linear,
            prelude_source: crate::assets::js_file("codemode.py").unwrap_or_default(),
            restore_snapshot: restore,
            make_snapshot,
            warm_up: false,
        }
    }
}

/// One script to run.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub code: String,
    /// The name tracebacks use for the script (`script.py`, `<stdin>`).
    pub filename: String,
    /// Overrides `Limits::timeout` for this job when set.
    #[serde(skip)]
    pub timeout: Option<Duration>,
    /// Put in the script's working directory before it runs (names checked by the caller with
    /// [`files::check_relative_path`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<InputFile>,
    /// What the files the script leaves in `/output/` may come to (see [`Outcome::outputs`]).
    pub outputs: OutputLimits,
}

impl Job {
    pub fn new(code: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            filename: "<script>".into(),
            timeout: None,
            files: Vec::new(),
            outputs: OutputLimits::default(),
        }
    }
}

/// A Python exception (or a limit breach reported as one).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ErrorInfo {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub traceback: String,
}

/// What a script did.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    /// The value of the script's last expression: JSON where it converts, else its repr.
    pub result: Value,
    pub error: Option<ErrorInfo>,
    pub duration_ms: f64,
    pub tool_calls: Vec<ToolCallRecord>,
    /// The files under `/output/` this job created or changed, checked against the job's
    /// [`OutputLimits`].
    pub outputs: Vec<OutputFile>,
    /// Files under `/output/` not returned, and why (one line each).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs_dropped: Vec<String>,
    /// `sys.exit(n)` with n != 0, else 0 (1 when `error` is set otherwise).
    #[serde(skip)]
    pub exit_code: i32,
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

/// Why a sandbox could not be made. The variant says whose failure it is: the system's (a thread,
/// a socket, entropy), Pyodide's (its boot failed, or never finished), the sandbox's own end while
/// booting, the zygote's, a fork's. A cause is the error's source, not words of its message:
/// `{:#}` (anyhow) or [`crate::Chain`] prints it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The system refused the sandbox something it needs (`what`: "a thread").
    #[error("the sandbox could not start: the system refused it {what}")]
    System {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The system had no randomness to seed the sandbox's stream with (getrandom's error, as
    /// the OS error it stands for: without its `std` feature it is no `std::error::Error`).
    #[error("the sandbox could not start: the system gave it no entropy")]
    Entropy(#[source] std::io::Error),
    /// Pyodide's boot failed, in the runner's words (a JavaScript or Python error).
    #[error("the sandbox could not start: Pyodide failed to boot: {0}")]
    Pyodide(String),
    /// Pyodide was still booting when its time was up: stuck, not slow.
    #[error("the sandbox could not start: Pyodide did not boot within {} s", .0.as_secs())]
    BootTimeout(Duration),
    /// Booting needed more JavaScript heap than the sandbox's memory limit leaves it.
    #[error(
        "the sandbox could not start: booting exhausted its JavaScript heap ({js_heap_mib} MiB of its {memory_mb} MiB, --memory-mb)"
    )]
    HeapExhausted { js_heap_mib: usize, memory_mb: u64 },
    /// The sandbox ended while booting, with its thread's last words when it left any (words,
    /// like a forked child's: they reach the handle from the sandbox's own thread).
    #[error("the sandbox could not start: it ended while booting{}", last_words(.reason))]
    Ended { reason: Option<String> },
    /// The zygote process, which forks sandboxes, did not come up.
    #[error("the sandbox zygote could not start")]
    Zygote(#[source] zygote::ZygoteError),
    /// The zygote is up, but gave no sandbox.
    #[error("cannot fork a sandbox")]
    Fork(#[source] zygote::ForkError),
    /// [`make_snapshot`]'s sandbox ended without sending one.
    #[error("the sandbox ended without making a snapshot")]
    NoSnapshot,
    /// [`make_bytecode`] failed (at build time).
    #[error("compiling the wheelhouse failed")]
    Bytecode(#[source] BytecodeError),
    /// The local executor's interpreter cannot be used (see [`crate::local::LocalPython::find`]).
    #[error("the local executor cannot run: {0}")]
    Local(String),
}

impl EngineError {
    pub(crate) fn heap_exhausted(memory_mb: u64) -> Self {
        EngineError::HeapExhausted {
            js_heap_mib: MemoryShares::of(memory_mb).js_heap >> 20,
            memory_mb,
        }
    }
}

fn last_words(reason: &Option<String>) -> String {
    reason
        .as_ref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default()
}

/// Why [`make_bytecode`] could not compile the wheelhouse.
#[derive(Debug, thiserror::Error)]
pub enum BytecodeError {
    /// The compiling script raised.
    #[error("the compiling script failed: {}: {}", .0.kind, .0.message)]
    Script(ErrorInfo),
    /// A line of its output is not `<wheel file> <hex>`.
    #[error("an unreadable line of its output: {0:.80}")]
    Unreadable(String),
    #[error("{wheel}: its bytecode is not hex")]
    Hex {
        wheel: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("{wheel}: cannot repack its bytecode: {reason}")]
    Repack { wheel: String, reason: String },
}

/// What the Python prelude reports (codemode.run_job).
#[derive(Deserialize)]
pub(crate) struct ScriptReport {
    result: Value,
    error: Option<ErrorInfo>,
    exit_code: i32,
    #[serde(default)]
    outputs: Vec<files::ReportedOutput>,
    #[serde(default)]
    outputs_skipped: Vec<files::SkippedOutput>,
}

/// Shared between the handle and the thread: why the isolate ended early, if it did.
#[derive(Default)]
pub(crate) struct Fate {
    pub heap_exhausted: AtomicBool,
    pub exit_reason: Mutex<Option<String>>,
    /// Closed when the sandbox thread has dropped its runtime and recorded `exit_reason`.
    pub finished: tokio::sync::Notify,
    pub done: AtomicBool,
}

impl Fate {
    pub(crate) fn finish(&self, reason: Option<String>) {
        *self.exit_reason.lock() = reason;
        self.done.store(true, Ordering::SeqCst);
        self.finished.notify_waiters();
    }

    /// Waits (briefly) until the thread has said why it ended.
    async fn reason(&self) -> Option<String> {
        let notified = self.finished.notified();
        if !self.done.load(Ordering::SeqCst) {
            let _ = tokio::time::timeout(Duration::from_secs(2), notified).await;
        }
        self.exit_reason.lock().clone()
    }
}

/// One sandbox, ready for its one job: an isolate on a thread of this process, or a sealed child
/// process forked from the zygote (see [`zygote`]). Both end the same way, in an [`Outcome`].
/// `Local` is no sandbox: the local executor's host Python process ([`crate::local`]), which
/// ends in the same [`Outcome`].
pub enum Sandbox {
    Thread(ThreadSandbox),
    Forked(zygote::ForkedSandbox),
    Local(crate::local::LocalSandbox),
}

impl Sandbox {
    /// Starts a sandbox thread and waits until Pyodide is ready for a job.
    pub async fn new(config: SandboxConfig) -> Result<Sandbox, EngineError> {
        isolate::spawn(config, None).await
    }

    /// Hands the script this tool host instead of the one the sandbox was created with.
    pub fn set_tools(&self, tools: Arc<dyn ToolHost>) {
        match self {
            Sandbox::Thread(s) => s.tools.set_host(tools),
            Sandbox::Forked(s) => s.set_tools(tools),
            Sandbox::Local(s) => s.set_tools(tools),
        }
    }

    /// Runs one script. Never fails: every problem, ours or the script's, becomes the outcome's
    /// `error`, with whatever the script printed before it.
    pub async fn execute(self, job: Job) -> Outcome {
        self.execute_with(job, RunControl::new()).await
    }

    /// [`Sandbox::execute`] with a clock the tool host can pause (time the script spends waiting
    /// for a person does not count against its timeout) and a way to stop the job.
    pub async fn execute_with(self, job: Job, control: RunControl) -> Outcome {
        match self {
            Sandbox::Thread(mut s) => s.run(job, control, false).await.0,
            Sandbox::Forked(s) => s.execute_with(job, control).await,
            Sandbox::Local(s) => s.execute(job, control).await,
        }
    }

    /// Runs one job of a session: its globals, imports and files are those the session's earlier
    /// jobs left, and its memory is counted in the same budget. Returns the outcome and whether
    /// the sandbox can take another job: not once a job hit a limit (timeout, memory), was
    /// stopped, or the sandbox failed; it is then already ended, and only to be dropped. The
    /// local executor keeps no session: it refuses (see [`Sandbox::keeps_sessions`]).
    pub async fn execute_kept(&mut self, job: Job, control: RunControl) -> (Outcome, bool) {
        match self {
            Sandbox::Thread(s) => s.run(job, control, true).await,
            Sandbox::Forked(s) => s.run(job, control, true).await,
            Sandbox::Local(_) => (
                refused_outcome(
                    "the local executor (--executor local) keeps no sessions: each script runs in a fresh host Python process",
                ),
                false,
            ),
        }
    }

    /// Whether this kind of sandbox can run a session's jobs ([`Sandbox::execute_kept`]).
    pub fn keeps_sessions(&self) -> bool {
        !matches!(self, Sandbox::Local(_))
    }
}

/// Whether a job's outcome ends its session: a limit it hit (a script that runs out of the
/// sandbox's memory gets a MemoryError; its state may be half-built), or a sandbox that ended.
fn ends_session(outcome: &Outcome) -> bool {
    outcome
        .error
        .as_ref()
        .is_some_and(|e| e.kind == "MemoryError")
}

/// The outcome of a job that never ran.
fn refused_outcome(message: &str) -> Outcome {
    shape_outcome(
        Err(ErrorInfo {
            kind: "RuntimeError".into(),
            message: message.into(),
            traceback: String::new(),
        }),
        Default::default(),
        Vec::new(),
        usize::MAX,
        &OutputLimits::default(),
        Instant::now(),
    )
}

/// The job as the runner reads it: a session's job says so (its globals are kept).
pub(crate) fn job_json(job: &Job, session: bool) -> Value {
    let mut value = serde_json::to_value(job).expect("a job serializes");
    if session {
        value["session"] = true.into();
    }
    value
}

/// A sandbox whose isolate runs on a thread of this process.
pub struct ThreadSandbox {
    limits: Limits,
    /// None once the sandbox has ended: it takes no more jobs.
    job_tx: Option<mpsc::UnboundedSender<String>>,
    outcome_rx: mpsc::UnboundedReceiver<String>,
    isolate: deno_core::v8::IsolateHandle,
    stop_tx: Option<oneshot::Sender<()>>,
    output: SharedOutput,
    tools: ToolBridge,
    fate: Arc<Fate>,
    budget: Arc<crate::bridge::memory::MemoryBudget>,
}

impl ThreadSandbox {
    /// Runs one job; returns its outcome and whether the sandbox can take another (see
    /// [`Sandbox::execute_kept`]). A sandbox that cannot is stopped before this returns.
    async fn run(&mut self, job: Job, control: RunControl, session: bool) -> (Outcome, bool) {
        let started = Instant::now();
        let start = tokio::time::Instant::now();
        let timeout = job.timeout.unwrap_or(self.limits.timeout);
        let job_json = job_json(&job, session).to_string();
        let sent = self
            .job_tx
            .as_ref()
            .is_some_and(|tx| tx.send(job_json).is_ok());
        let report = if !sent {
            Err(self.died().await)
        } else {
            tokio::select! {
                outcome = self.outcome_rx.recv() => match outcome {
                    Some(json) => read_report(&json),
                    None => Err(self.died().await),
                },
                stop = control.expired(start, timeout) => Err(stopped_error(stop, timeout)),
            }
        };
        let reported = report.is_ok();
        if !reported {
            self.stop();
        }
        let tool_calls = self.tools.take_job_calls();
        let outcome = shape_outcome(
            report,
            self.output.take_captured(),
            tool_calls,
            self.limits.max_output,
            &job.outputs,
            started,
        );
        let alive = reported && !ends_session(&outcome);
        if !alive {
            self.stop();
        }
        (outcome, alive)
    }

    /// The error for a sandbox that ended without reporting.
    async fn died(&self) -> ErrorInfo {
        let heap = self.fate.heap_exhausted.load(Ordering::SeqCst);
        let reason = if heap { None } else { self.fate.reason().await };
        died_error(
            heap,
            self.budget.was_exhausted(),
            self.limits.memory_mb,
            reason,
        )
    }

    /// Ends the isolate wherever it is: in JS/wasm (terminate) or waiting in the event loop (stop).
    fn stop(&mut self) {
        self.job_tx = None;
        self.isolate.terminate_execution();
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for ThreadSandbox {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A place other than our own isolates that runs js/runner.js's jobs: the parity command's
/// Chromium tab. The engine hands it a job and shapes what came of it ([`execute_elsewhere`])
/// exactly as it shapes its own sandboxes' outcomes, so the two cannot drift apart.
pub trait ForeignHost {
    /// Runs `job_json` (a [`Job`]) and answers with the runner's report (its JSON), `None` when
    /// the job ran past `timeout` and was stopped, or why the host could not run it at all.
    fn run(
        &self,
        job_json: String,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Option<String>, String>>;
}

/// Runs `job` on `host`, whose output and tool calls went to `output` and `tools`; the outcome is
/// shaped as a sandbox's. An error only when `host` could not run the job.
pub async fn execute_elsewhere(
    host: &impl ForeignHost,
    job: &Job,
    limits: &Limits,
    output: &SharedOutput,
    tools: &ToolBridge,
) -> Result<Outcome, String> {
    let started = Instant::now();
    let timeout = job.timeout.unwrap_or(limits.timeout);
    let job_json = serde_json::to_string(job).map_err(|e| format!("the job as JSON: {e}"))?;
    let report = match host.run(job_json, timeout).await? {
        Some(json) => read_report(&json),
        None => Err(timeout_error(timeout)),
    };
    Ok(shape_outcome(
        report,
        output.take_captured(),
        tools.take_job_calls(),
        limits.max_output,
        &job.outputs,
        started,
    ))
}

/// The runner's report, or the error that stands for an unreadable one.
pub(crate) fn read_report(json: &str) -> Result<ScriptReport, ErrorInfo> {
    serde_json::from_str::<ScriptReport>(json).map_err(|e| ErrorInfo {
        kind: "RuntimeError".into(),
        message: format!("mcp-code-mode: unreadable report from the sandbox: {e}"),
        traceback: String::new(),
    })
}

/// The error of a job its [`RunControl`] ended: stopped by the host, else timed out.
pub(crate) fn stopped_error(stop: Option<(String, String)>, timeout: Duration) -> ErrorInfo {
    match stop {
        Some((kind, message)) => ErrorInfo {
            kind,
            message,
            traceback: String::new(),
        },
        None => timeout_error(timeout),
    }
}

pub(crate) fn timeout_error(timeout: Duration) -> ErrorInfo {
    ErrorInfo {
        kind: "TimeoutError".into(),
        message: format!(
            "the script ran longer than its {} limit and was stopped",
            human_duration(timeout)
        ),
        traceback: String::new(),
    }
}

/// The error for a sandbox that ended without reporting: a limit it hit, or why it ended.
fn died_error(
    heap_exhausted: bool,
    budget_exhausted: bool,
    memory_mb: u64,
    reason: Option<String>,
) -> ErrorInfo {
    let message = if heap_exhausted && budget_exhausted {
        format!(
            "the script used up the sandbox's memory ({memory_mb} MiB, --memory-mb) and was stopped"
        )
    } else if heap_exhausted {
        let shares = MemoryShares::of(memory_mb);
        format!(
            "the script exhausted the sandbox's JavaScript heap ({} MiB of its {memory_mb} MiB, --memory-mb) and was stopped",
            shares.js_heap >> 20,
        )
    } else {
        return ErrorInfo {
            kind: "RuntimeError".into(),
            message: format!(
                "the sandbox ended without finishing the script: {}",
                reason.unwrap_or_else(|| "no reason given".into())
            ),
            traceback: String::new(),
        };
    };
    ErrorInfo {
        kind: "MemoryError".into(),
        message,
        traceback: String::new(),
    }
}

/// The outcome both kinds of sandbox return, from the report (or the error standing for it).
pub(crate) fn shape_outcome(
    report: Result<ScriptReport, ErrorInfo>,
    captured: crate::bridge::output::CapturedOutput,
    tool_calls: Vec<ToolCallRecord>,
    max_output: usize,
    output_limits: &OutputLimits,
    started: Instant,
) -> Outcome {
    let (result, error, exit_code, (outputs, outputs_dropped)) = match report {
        Ok(r) => {
            let code = if r.error.is_some() && r.exit_code == 0 {
                1
            } else {
                r.exit_code
            };
            let outputs = files::take_outputs(r.outputs, r.outputs_skipped, output_limits);
            (r.result, r.error, code, outputs)
        }
        Err(e) => (Value::Null, Some(e), 1, Default::default()),
    };
    Outcome {
        stdout: captured.stdout,
        stderr: captured.stderr,
        result: cap_result(result, max_output),
        error,
        duration_ms: crate::bridge::tools::round_ms(started.elapsed()),
        tool_calls,
        outputs,
        outputs_dropped,
        exit_code,
    }
}

/// How a limit's duration is written in messages (`30 s`, `2.5 s`).
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs:.1} s")
    }
}

/// A result whose JSON is longer than the output cap becomes a string: the start of that JSON
/// and a notice saying how much was dropped, so a huge value cannot flood the client's context.
fn cap_result(result: Value, max_output: usize) -> Value {
    if matches!(result, Value::Null | Value::Bool(_) | Value::Number(_)) {
        return result;
    }
    let json = result.to_string();
    if json.len() <= max_output {
        return result;
    }
    let end = json.floor_char_boundary(max_output);
    Value::String(format!(
        "{}\n[mcp-code-mode: result truncated: its JSON is {} bytes; {} more bytes were dropped after the first {max_output} (--max-output). Return less, or print a summary]",
        &json[..end],
        json.len(),
        json.len() - end
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_way_the_wheelhouse_output_is_unreadable_has_its_kind() {
        assert!(matches!(
            bytecode_zips("one-word"),
            Err(BytecodeError::Unreadable(line)) if line == "one-word"
        ));
        assert!(matches!(
            bytecode_zips("a.whl 0g"),
            Err(BytecodeError::Hex { wheel, .. }) if wheel == "a.whl"
        ));
        assert!(matches!(
            bytecode_zips("a.whl 00ff"),
            Err(BytecodeError::Repack { wheel, .. }) if wheel == "a.whl"
        ));
        assert!(matches!(bytecode_zips(""), Ok(zips) if zips.is_empty()));
    }
}
