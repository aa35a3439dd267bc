//! The zygote process: boots one sandbox (restore + warm-up) on its only thread, then forks a
//! copy of it for every execution the server asks for, and reaps them.
//!
//! Its control socket (SOCK_SEQPACKET, fd [`CONTROL_FD`]) carries small packets: from the server
//! `FORK` (with the child's two sockets as SCM_RIGHTS) and `KILL pid`; to the server `READY` or
//! `BOOT_FAILED text`, `FORKED pid` or `FORK_FAILED errno`, `EXITED pid status`, and `WARM` once
//! its warm-up between forks is done.

use super::{child, control, prefault};
use crate::bridge::{IdleWarmUp, SharedOutput};
use crate::engine::isolate::{self, Prepared};
use crate::engine::{code_cache, compiled_wasm, EngineError, Limits, SandboxConfig};
use deno_core::error::CoreError;
use deno_core::v8;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use std::collections::HashSet;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Where the server puts the zygote's end of the control socket.
pub const CONTROL_FD: RawFd = 3;

/// Makes a snapshot (inflates the one the binary embeds).
pub type SnapshotMaker = Box<dyn FnOnce() -> crate::engine::Snapshot + Send>;

/// What the zygote boots with (from its command line, see [`super::Zygote::start`]).
pub struct ZygoteOptions {
    pub limits: Limits,
    /// Makes the snapshot to restore (None: boot without one); called on a thread of its own
    /// while the zygote does what needs no snapshot.
    pub snapshot: Option<SnapshotMaker>,
    /// Run warm-up rounds between forks (a server's zygote); a one-shot `run` forks once and
    /// would only pay for rounds nobody gains from.
    pub warm_up: bool,
    /// V8's compiled code for Pyodide's module, made by [`make_compiled_code`] at build time
    /// (empty: none; compiled at boot).
    pub compiled_wasm: &'static [u8],
    /// V8's code caches of the JS modules, made by [`make_compiled_code`] at build time (empty:
    /// none; parsed and compiled at boot).
    pub compiled_js: &'static [u8],
}

/// What [`make_compiled_code`] makes: see [`ZygoteOptions`]'s fields of the same names.
pub struct CompiledCode {
    pub wasm: Vec<u8>,
    pub js: Vec<u8>,
}

/// Why the zygote's sandbox did not come up, or stopped serving: told to the server in words
/// (BOOT_FAILED: they cross a process boundary), and returned to the build by
/// [`make_compiled_code`].
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The system refused the zygote something it needs (`what`: "access to /dev/null").
    #[error("the system refused the zygote {what}")]
    System {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The thread inflating the snapshot panicked.
    #[error("inflating the snapshot failed")]
    Inflate,
    /// Making its sandbox failed as any sandbox's boot can (entropy, Pyodide, its heap).
    #[error(transparent)]
    Sandbox(#[from] EngineError),
    #[error("the sandbox's JavaScript did not load")]
    Load(#[source] CoreError),
    /// Its event loop ended (with JavaScript's error, when there was one) while `when`.
    #[error("the sandbox ended while {when}")]
    Ended {
        when: &'static str,
        #[source]
        source: Option<CoreError>,
    },
    /// V8 kept no optimized code of Pyodide's module to serialize.
    #[error("V8 serialized no optimized code of Pyodide's module")]
    NoCompiledCode,
    /// V8 refused the compiled code of the build's first pass in its second.
    #[error("V8 refused the compiled code of the build's first pass")]
    CompiledCodeRefused,
    /// A serialization of Pyodide's module not laid out as `compiled_wasm::rewrite_budgets`
    /// expects (another V8?).
    #[error("cannot rewrite the tiering budgets of Pyodide's compiled code: {0}")]
    CompiledCodeLayout(String),
    /// V8 made no code cache of one of the JS modules (its path).
    #[error("V8 made no code cache of {module}")]
    NoCodeCache { module: &'static str },
    /// The control socket to the server failed.
    #[error("the control socket failed")]
    Control(#[source] std::io::Error),
    /// The job the build runs before taking the compiled code failed (Python's error).
    #[error("the build's import job failed: {0}")]
    BuildJob(String),
}

/// The zygote's main: never returns. Call before any thread exists.
pub fn run(options: ZygoteOptions) -> ! {
    let code = match serve(options) {
        Ok(()) => 0,
        Err(e) => {
            let words = crate::Chain(&e).to_string();
            let _ = control::send(CONTROL_FD, control::BOOT_FAILED, 0, 0, words.as_bytes());
            tracing::error!("sandbox zygote: {words}");
            1
        }
    };
    std::process::exit(code)
}

/// V8 on a single thread: the sandbox's flags (`--single-threaded` among them, see
/// `isolate::set_v8_flags`) and a single-threaded platform, so that a fork copies a whole,
/// consistent isolate.
fn init_v8_forkable() -> v8::SharedRef<v8::Platform> {
    isolate::set_v8_flags();
    let platform = v8::new_single_threaded_default_platform(false).make_shared();
    deno_core::JsRuntime::init_platform(Some(platform.clone()));
    platform
}

/// A sandbox booted as the zygote boots it: ready, its first job not yet run.
struct Boot {
    js: deno_core::JsRuntime,
    parts: isolate::Parts,
    evaluated: std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), CoreError>>>>,
    warm: Rc<IdleWarmUp>,
    /// V8 took `ZygoteOptions::compiled_wasm`.
    compiled_wasm_taken: bool,
}

/// Restores (or boots) the zygote's sandbox on this thread, on `platform` (see
/// [`init_v8_forkable`]), with Pyodide's module made from the build's compiled code where V8
/// takes it.
fn boot(
    options: ZygoteOptions,
    rt: &tokio::runtime::Runtime,
    platform: &v8::SharedRef<v8::Platform>,
) -> Result<Boot, BootError> {
    let _entered = rt.enter();
    // The snapshot inflates on a thread of its own (joined below, long before any fork) while
    // this one makes Pyodide's module from the compiled code, in an isolate of its own.
    let inflating = options.snapshot.map(std::thread::spawn);
    let compiled_wasm_taken = compiled_wasm::take(platform, options.compiled_wasm);
    let snapshot = match inflating.map(std::thread::JoinHandle::join) {
        None => None,
        Some(Ok(snapshot)) => Some(snapshot),
        Some(Err(_)) => return Err(BootError::Inflate),
    };
    let mut config = SandboxConfig::new(options.limits, snapshot);
    config.warm_up = true;
    config.tools = std::sync::Arc::new(WarmUpTools);
    let Prepared {
        parts,
        state,
        ready_rx,
    } = isolate::prepare(config, None)?;
    let mut js = isolate::create_runtime(state, &parts.fate, options.compiled_js);
    let warm = Rc::new(IdleWarmUp::default());
    js.op_state().borrow_mut().put(warm.clone());
    let memory_mb = parts.limits.memory_mb;
    let evaluated = rt.block_on(async {
        let evaluated = Box::pin(isolate::load_main(&mut js).await.map_err(BootError::Load)?);
        let fate = parts.fate.clone();
        tokio::select! {
            ready = isolate::wait_ready(ready_rx, &fate, memory_mb) => ready?,
            ended = std::future::poll_fn(|cx| isolate::poll_js(&mut js, Some(platform), cx)) => {
                if fate.heap_exhausted.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(EngineError::heap_exhausted(memory_mb).into());
                }
                return Err(BootError::Ended { when: "booting", source: ended.err() });
            }
        }
        Ok::<_, BootError>(evaluated)
    })?;
    Ok(Boot {
        js,
        parts,
        evaluated,
        warm,
        compiled_wasm_taken,
    })
}

/// The tools a zygote's warm-up jobs call (`codemode.WARM_TOOLS`): a server `warm_up` whose
/// `add` answers `{"sum": a + b}` and whose `fail` fails as a tool does. So the path of a tool
/// call (codemode's callable, runner.js, the op and its promise, JSPI's suspension) is compiled
/// and optimized in the zygote, once, not in every child that calls tools: a child making 990
/// calls spent ~22 ms of them compiling that path for Maglev and Turbofan (perf, a build with
/// symbols), and ran it unoptimized until then. A child never sees these tools: its ops reach
/// the server's hub (`child::RemotePort`).
pub struct WarmUpTools;

impl WarmUpTools {
    pub const SERVER: &str = "warm_up";
}

impl crate::bridge::ToolHost for WarmUpTools {
    fn catalog(&self) -> Vec<crate::bridge::ServerCatalog> {
        let number = serde_json::json!({"type": "number"});
        let tool = |name: &str, input_schema| crate::bridge::ToolSpec {
            name: name.into(),
            python_name: String::new(),
            description: String::new(),
            input_schema,
            output_schema: None,
            annotations: None,
        };
        vec![crate::bridge::ServerCatalog {
            server: Self::SERVER.into(),
            description: String::new(),
            tools: std::sync::Arc::new(vec![
                tool(
                    "add",
                    serde_json::json!({"type": "object", "properties": {"a": number, "b": number}, "required": ["a", "b"]}),
                ),
                tool("fail", serde_json::json!({"type": "object"})),
            ]),
        }]
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> futures::future::BoxFuture<'static, Result<serde_json::Value, crate::bridge::ToolCallError>>
    {
        let number = |key| arguments.get(key).and_then(serde_json::Value::as_f64);
        let answer = match (server, tool, number("a"), number("b")) {
            (Self::SERVER, "add", Some(a), Some(b)) => Ok(serde_json::json!({"sum": a + b})),
            _ => Err(crate::bridge::ToolCallError::Tool(format!(
                "{server}.{tool} failed, as warm-up asked"
            ))),
        };
        // Answered on a later turn of the event loop, as a child's call is (its answer comes
        // over the socket): the op's promise then settles the way it does in a child.
        Box::pin(async move {
            tokio::task::yield_now().await;
            answer
        })
    }
}

/// Warm-up rounds the build's sandbox runs before its job: more than a zygote ever runs
/// (`Warming::MAX_ROUNDS`), so that V8 spends the budgets of what the rounds run in the build.
const BUILD_WARM_ROUNDS: u32 = 2 * Warming::MAX_ROUNDS;

/// V8's compiled code as a zygote boots: for Pyodide's module (CPython's interpreter loop
/// optimized among it) and the JS modules' code caches. What the build embeds
/// (`ZygoteOptions::compiled_wasm` and `compiled_js`), so that a zygote starts without compiling
/// that loop again (~0.2 s of a cold start) or parsing and compiling the JS it runs (~40 ms).
/// V8 takes such code only in a process with the same V8, flags and CPU, so this sets the
/// zygote's flags for this process: call it in a process of its own, before any isolate exists.
///
/// Before the code is taken, the sandbox runs `job` (Python; the build imports wheelhouse
/// packages, see build.rs): what V8 optimizes while it runs is carried too. Single-threaded, V8
/// optimizes a wasm function on the thread that calls it, when its budget runs out, and in a
/// child that work dies with it: `import sympy` spent ~46 ms of a child's CPU optimizing
/// CPython's functions that imports use (unmarshalling, making classes), in every child (perf,
/// a build with symbols). Before the job, the sandbox runs [`BUILD_WARM_ROUNDS`] of a zygote's
/// warm-up rounds, more than a zygote runs, so that what they optimize comes with the build too:
/// a zygote's rounds got faster (the last 47 ms against 49–67), and 400 back-to-back `print(1)`
/// cost less CPU each (three alternations: 9.35–9.49 ms against 9.49–10.34; with
/// `Warming::MIN_ROUNDS`, in a slower hour, 10.7–12.2 against 12.6–14.0).
///
/// In two passes, each a process of its own (`first`: the first pass's code, None in the first
/// pass). A job optimizes only the functions whose budgets it spends; the rest of what it runs
/// stays Liftoff code, which V8 does not serialize, and a child compiled it again, lazily, and
/// optimized whatever its budget (restored with the code) had left nearly spent — the same
/// functions in every child (perf: ~20 ms of a child's `import sympy`). So the first pass's
/// code leaves every function that ran with its budget spent ([`Budgets::RanToSpent`]); the
/// second pass, starting from it, optimizes all that its run of the same rounds and job runs;
/// and its code leaves every budget full ([`Budgets::Full`]).
pub fn make_compiled_code(
    snapshot: crate::engine::Snapshot,
    job: &str,
    first: Option<&'static [u8]>,
) -> Result<CompiledCode, BootError> {
    let platform = init_v8_forkable();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|source| BootError::System {
            what: "a runtime",
            source,
        })?;
    let mut boot = boot(
        ZygoteOptions {
            limits: Limits::default(),
            snapshot: Some(Box::new(move || snapshot)),
            warm_up: false,
            compiled_wasm: first.unwrap_or_default(),
            compiled_js: &[],
        },
        &rt,
        &platform,
    )?;
    if first.is_some() && !boot.compiled_wasm_taken {
        return Err(BootError::CompiledCodeRefused);
    }
    run_build_job(&mut boot, &rt, &platform, job)?;
    let mut wasm = compiled_wasm::serialize(&mut boot.js).ok_or(BootError::NoCompiledCode)?;
    let budgets = match first {
        None => compiled_wasm::Budgets::RanToSpent,
        Some(_) => compiled_wasm::Budgets::Full,
    };
    compiled_wasm::rewrite_budgets(&mut wasm, budgets).map_err(BootError::CompiledCodeLayout)?;
    let js = code_cache::make(&mut boot.js).map_err(|module| BootError::NoCodeCache { module })?;
    Ok(CompiledCode { wasm, js })
}

/// Runs one warm-up step (a job of `codemode.warm_jobs()`, js/runner.js's `warmSteps`) until
/// the runner asks whether to go on; what the step printed and the tool calls it made (its own,
/// never a job's) are forgotten before anything forks. Returns whether the step ended a round.
fn run_warm_step(
    rt: &tokio::runtime::Runtime,
    js: &mut deno_core::JsRuntime,
    platform: &v8::SharedRef<v8::Platform>,
    warm: &IdleWarmUp,
    tools: &crate::bridge::ToolBridge,
) -> Result<bool, BootError> {
    let (asked, rounds) = (warm.asked(), warm.rounds());
    // Always "more": only a child, after the fork, sends its runner on to the job.
    warm.answer(true);
    rt.block_on(std::future::poll_fn(|cx| {
        let polled = isolate::poll_js(js, Some(platform), cx);
        if warm.asked() > asked {
            return std::task::Poll::Ready(Ok(()));
        }
        polled.map(|ended| {
            Err(BootError::Ended {
                when: "warming up",
                source: ended.err(),
            })
        })
    }))?;
    js.op_state().borrow().borrow::<SharedOutput>().clear();
    // Each step starts with all of a job's call slots.
    tools.take_job_calls();
    Ok(warm.rounds() != rounds)
}

/// Runs `code` as the one job of a sandbox just booted, after [`BUILD_WARM_ROUNDS`] of a
/// zygote's warm-up rounds, to its outcome.
fn run_build_job(
    boot: &mut Boot,
    rt: &tokio::runtime::Runtime,
    platform: &v8::SharedRef<v8::Platform>,
    code: &str,
) -> Result<(), BootError> {
    let Boot {
        js, parts, warm, ..
    } = boot;
    for _ in 0..BUILD_WARM_ROUNDS {
        while !run_warm_step(rt, js, platform, warm, &parts.tools)? {}
    }
    warm.answer(false);
    let report = child::run_to_report(
        rt,
        js,
        platform,
        &parts.job_tx,
        &mut parts.outcome_rx,
        code,
        "<build>",
    )
    .map_err(|source| BootError::Ended {
        when: "running the build's import job",
        source,
    })?;
    let report: serde_json::Value = serde_json::from_str(&report).unwrap_or_default();
    match &report["error"] {
        serde_json::Value::Null if report.is_object() => Ok(()),
        error => Err(BootError::BuildJob(error.to_string())),
    }
}

fn serve(options: ZygoteOptions) -> Result<(), BootError> {
    // SAFETY: attribute changes of this process only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|source| BootError::System {
            what: "access to /dev/null",
            source,
        })?;
    enter_empty_namespaces();
    let platform = init_v8_forkable();
    // Time only: an I/O driver here would leave descriptors (and tokio's signal pipe) that
    // each child closes before making its own runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|source| BootError::System {
            what: "a runtime",
            source,
        })?;
    let _entered = rt.enter();
    let (limits, warm_up) = (options.limits, options.warm_up);
    let Boot {
        js,
        parts,
        evaluated,
        warm,
        ..
    } = boot(options, &rt, &platform)?;
    control::send(CONTROL_FD, control::READY, 0, 0, &[])
        .map_err(|e| BootError::Control(e.into()))?;
    tracing::debug!("sandbox zygote ready");

    let mut booted = Some(child::Booted {
        js,
        parts,
        evaluated,
        platform,
    });
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.thread_block().map_err(|e| BootError::System {
        what: "a change to its signal mask",
        source: e.into(),
    })?;
    let sigchld = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| BootError::System {
            what: "a signalfd",
            source: e.into(),
        })?;
    let mut live: HashSet<i32> = HashSet::new();
    let own_pid = std::process::id() as i32;
    let mut warming = Warming::new(warm_up);
    // The pages a child's job touches (see `prefault`), learned once warm-up is over.
    let mut hot_pages = prefault::HotPages::default();
    loop {
        let mut fds = [
            libc::pollfd {
                fd: CONTROL_FD,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigchld.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // While warm-up rounds remain, only look (timeout 0): a request waits one round at most.
        // Except at first: whoever started the zygote asks for its first children as soon as
        // it hears READY, and the first round (the slowest by far: 0.4–0.9 s measured) must
        // not stand between a cold start and its first result.
        let timeout = warming.poll_timeout();
        // SAFETY: two valid pollfd entries.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if ready < 0 {
            continue; // EINTR
        }
        if ready == 0 {
            if warming.stage != Stage::Probe {
                let sandbox = booted.as_mut().expect("the zygote's sandbox");
                warming.step(&rt, sandbox, &warm)?;
                continue;
            }
            // Last, once the rounds are over: memory they grew is resident by now.
            let huge = prefault::collapse_resident_memory();
            tracing::debug!("sandbox zygote: {} MiB of memory in huge pages", huge >> 20);
            let learned = prefault::learn(|look| {
                child::probe(booted.take().expect("the zygote's sandbox"), &rt, look)
            });
            let said = match learned {
                Ok(learned) => {
                    if warming.probe_says_go_on(learned.first_job, learned.steady_job) {
                        continue;
                    }
                    hot_pages = learned.pages;
                    let read = hot_pages.read.len();
                    let with_the_fork = prefault::map_read_pages_at_fork(&mut hot_pages);
                    format!(
                        "{} {read} {} {} {with_the_fork}",
                        hot_pages.written.len(),
                        learned.first_job.as_micros(),
                        learned.steady_job.as_micros()
                    )
                }
                Err(e) => {
                    warming.stage = Stage::Done;
                    e
                }
            };
            let micros = i32::try_from(warming.last_round.as_micros()).unwrap_or(i32::MAX);
            let _ = control::send(
                CONTROL_FD,
                control::WARM,
                warming.rounds as i32,
                micros,
                said.as_bytes(),
            );
            continue;
        }
        if fds[1].revents != 0 {
            while let Ok(Some(_)) = sigchld.read_signal() {}
            reap(&mut live);
        }
        if fds[0].revents == 0 {
            continue;
        }
        let mut buf = [0u8; 64];
        let mut cmsg = nix::cmsg_space!([RawFd; 2]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let (n, received) =
            match recvmsg::<()>(CONTROL_FD, &mut iov, Some(&mut cmsg), MsgFlags::empty()) {
                Ok(msg) => {
                    let mut received = Vec::new();
                    for c in msg.cmsgs().into_iter().flatten() {
                        if let ControlMessageOwned::ScmRights(fds) = c {
                            received.extend(fds);
                        }
                    }
                    (msg.bytes, received)
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(BootError::Control(e.into())),
            };
        if n == 0 {
            // The server is gone: so are its executions.
            for pid in &live {
                // SAFETY: signalling our own children.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            return Ok(());
        }
        let (kind, pid) = control::parse(&buf[..n]);
        match (kind, received.as_slice()) {
            (control::FORK, &[events, sync]) => {
                let data_limit = vm_data_bytes() + 2 * (limits.memory_mb << 20) + (256 << 20);
                let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
                prefault::fork_to_all_mappings(&maps);
                // Nothing is freed from here to the fork: a free could shrink the heap under
                // the pages just checked.
                let prefault = prefault::within(&hot_pages, &maps);
                // SAFETY: this process has one thread; the child only runs `child::run`.
                match unsafe { libc::fork() } {
                    0 => child::run(child::Start {
                        booted: booted.take().expect("the zygote's sandbox"),
                        rt: &rt,
                        events,
                        sync,
                        devnull: devnull.as_raw_fd(),
                        zygote: own_pid,
                        data_limit,
                        prefault: &prefault,
                    }),
                    child if child > 0 => {
                        live.insert(child);
                        let _ = control::send(CONTROL_FD, control::FORKED, child, 0, &[]);
                    }
                    _ => {
                        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                        let _ = control::send(CONTROL_FD, control::FORK_FAILED, 0, errno, &[]);
                    }
                }
                close(events);
                close(sync);
            }
            (control::KILL, _) => {
                // Only a child not yet reaped: its pid cannot have been reused.
                if live.contains(&pid) {
                    // SAFETY: signalling our own child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                received.iter().for_each(|fd| close(*fd));
            }
            _ => received.iter().for_each(|fd| close(*fd)),
        }
    }
}

/// The zygote's warm-up between forks: rounds of the runner's warm-up jobs while no request is
/// waiting, until they stop paying (V8 has tiered up what they exercise), then a full GC so that
/// children do not inherit garbage to sweep, and freed memory handed back to the kernel, and one
/// round more, which tiers up again what that GC made V8 drop (see [`Stage::Retier`]). Rounds
/// run a job at a time (a step), and the zygote looks for requests between steps: one waits for
/// a step at most (measured here: rounds of 73–110 ms once warm, no step over 38 ms; as one
/// block, a round held requests up for all of it).
///
/// Then a probe (see `prefault::learn`) runs a child's first job. Every child of a zygote starts
/// from the same state, so if one V8 budget was left just short of its threshold, every child
/// crosses it in its first job and compiles (measured on some server starts: every `print(1)`
/// ~30 ms slower). A probe whose first job is far slower than its steady state sends the zygote
/// back to a few more rounds, which cross such budgets in the zygote, once for all children.
struct Warming {
    stage: Stage,
    rounds: u32,
    /// The steps of the round under way so far.
    this_round: Duration,
    last_round: Duration,
    best: Option<Duration>,
    /// Rounds in a row that were not clearly faster than the best so far.
    flat: u32,
    /// After a slow probe: the round at which to probe again.
    until: Option<u32>,
    probes: u32,
    /// Until then, requests have the zygote to themselves (see [`Warming::FIRST_REQUESTS`]).
    quiet_until: Instant,
    /// Whether the settling stage has moved the zygote's code to huge pages (once: a slow probe
    /// brings the zygote back to settle again, and what did not move then will not now).
    code_moved: bool,
}

/// Where the zygote's warm-up is; each stage but the last is work done between requests.
#[derive(Debug, PartialEq)]
enum Stage {
    /// Steps of warm-up rounds.
    Rounds,
    /// Enough rounds: a full GC, and freed memory back to the kernel.
    Settle,
    /// One round more after the settling GC. That GC collects what the rounds' jobs made and
    /// dropped (the maps of their file streams and nodes, among them), and V8 then drops the
    /// optimized code that embedded any of it, and the feedback on those maps: every child
    /// would compile that code again in its first job, and throw it away on the first object of
    /// a map made anew (traced: a `print(1)` child compiled Emscripten's `llseek` for Maglev
    /// and deoptimized it, ~0.4 ms; measured: ~12 % of an execution's CPU, back to back). This
    /// round tiers it up in the zygote, once, and no GC follows it before the forks; what it
    /// allocates also sweeps the pages the GC left to sweep, which each child swept before.
    Retier,
    /// The probe, which the zygote's loop runs (it forks).
    Probe,
    /// Warm: forks only.
    Done,
}

impl Warming {
    /// Enough for V8's tier-up budgets on the job path; a round costs milliseconds once warm.
    const MAX_ROUNDS: u32 = 40;
    /// Rounds without a gain after which V8 has done its tiering.
    const FLAT_ROUNDS: u32 = 6;
    /// Rounds run however soon they are flat. The build's compiled code makes them flat early
    /// (its wasm is optimized already), but the JS a job runs (installing a wheel's files among
    /// it) is tiered up only here: after 8 rounds, a child's finder took ~9 ms to install sympy
    /// where it took ~5.5 after the 10–15 rounds a zygote ran before.
    const MIN_ROUNDS: u32 = 15;
    /// Rounds run again after a probe found a child's first job slow, and how often.
    const MORE_ROUNDS: u32 = 3;
    const MAX_PROBES: u32 = 4;

    /// How long after READY the zygote waits for its first requests before it warms up.
    const FIRST_REQUESTS: Duration = Duration::from_millis(100);

    fn new(warm_up: bool) -> Self {
        Self {
            stage: if warm_up { Stage::Rounds } else { Stage::Done },
            rounds: 0,
            this_round: Duration::ZERO,
            last_round: Duration::ZERO,
            best: None,
            flat: 0,
            until: None,
            probes: 0,
            quiet_until: Instant::now() + Self::FIRST_REQUESTS,
            code_moved: false,
        }
    }

    /// After a probe: whether to warm up further (its first job was slow, and probes remain).
    fn probe_says_go_on(&mut self, first_job: Duration, steady_job: Duration) -> bool {
        self.probes += 1;
        let slow = first_job_is_slow(first_job, steady_job);
        tracing::debug!(
            "sandbox zygote: probe {} after {} rounds: first job {first_job:?}, steady {steady_job:?}{}",
            self.probes,
            self.rounds,
            if slow { " (slow: warming up further)" } else { "" }
        );
        if !slow || self.probes >= Self::MAX_PROBES {
            self.stage = Stage::Done;
            return false;
        }
        self.until = Some(self.rounds + Self::MORE_ROUNDS);
        self.stage = Stage::Rounds;
        true
    }

    /// How long to wait for a request (poll's timeout in ms; -1: for ever) before the next step.
    fn poll_timeout(&self) -> i32 {
        if self.stage == Stage::Done {
            return -1;
        }
        let quiet = self.quiet_until.saturating_duration_since(Instant::now());
        // Rounded up: a zero timeout before the window has passed would start a round early.
        i32::try_from(quiet.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
    }

    /// One step: a job of a round, or the GC that settles the last one.
    fn step(
        &mut self,
        rt: &tokio::runtime::Runtime,
        booted: &mut child::Booted,
        warm: &IdleWarmUp,
    ) -> Result<(), BootError> {
        let child::Booted {
            js,
            platform,
            parts,
            ..
        } = booted;
        let started = Instant::now();
        if self.stage == Stage::Settle {
            js.v8_isolate().low_memory_notification();
            while v8::Platform::pump_message_loop(platform, js.v8_isolate(), false) {}
            // What boot and warm-up freed (the restored snapshot's bytes among it) goes back to
            // the kernel: every fork copies the page tables of what stays (measured: the zygote
            // 220 → 168 MB RSS).
            // SAFETY: glibc's allocator, called from this process's only thread.
            unsafe { libc::malloc_trim(0) };
            let code = match std::mem::replace(&mut self.code_moved, true) {
                false => prefault::move_code_to_huge_pages(),
                true => 0,
            };
            tracing::debug!(
                "sandbox zygote: the settling GC took {:?}; {} MiB of code now in huge pages",
                started.elapsed(),
                code >> 20
            );
            self.stage = Stage::Retier;
            return Ok(());
        }
        let round_done = run_warm_step(rt, js, platform, warm, &parts.tools)?;
        self.this_round += started.elapsed();
        tracing::trace!("sandbox zygote: warm-up step took {:?}", started.elapsed());
        if !round_done {
            return Ok(());
        }
        let took = std::mem::take(&mut self.this_round);
        self.end_round(took);
        Ok(())
    }

    /// Counts a round that took `took`, and settles once enough rounds ran (probes, after the
    /// round that follows the settling).
    fn end_round(&mut self, took: Duration) {
        self.rounds += 1;
        self.last_round = took;
        if self.stage == Stage::Retier {
            self.stage = Stage::Probe;
            return;
        }
        tracing::debug!(
            "sandbox zygote: warm-up round {} took {took:?}",
            self.rounds
        );
        match self.best {
            Some(best) if took.mul_f64(1.1) >= best => self.flat += 1,
            _ => self.flat = 0,
        }
        self.best = Some(self.best.map_or(took, |best| best.min(took)));
        let enough = match self.until {
            Some(until) => self.rounds >= until,
            None => {
                self.rounds == Self::MAX_ROUNDS
                    || (self.flat >= Self::FLAT_ROUNDS && self.rounds >= Self::MIN_ROUNDS)
            }
        };
        if enough {
            self.stage = Stage::Settle;
        }
    }
}

/// Whether a child's first job, as the probe ran it, pays for more than copying the pages it
/// writes (which the probe does during its job, a child ahead of it). Measured on this machine
/// over 30 server starts: first jobs 7.3–11.7 ms with a steady state of 1.4–2.9 ms; on the one
/// slow start among them, 22.3 ms against 2.4 (and every `print(1)` of that server 19–31 ms
/// round trip, against 7–15).
fn first_job_is_slow(first_job: Duration, steady_job: Duration) -> bool {
    first_job > steady_job * 2 + Duration::from_millis(12)
}

fn close(fd: RawFd) {
    // SAFETY: a descriptor this process received and owns.
    unsafe { libc::close(fd) };
}

fn reap(live: &mut HashSet<i32>) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        live.remove(&pid);
        let _ = control::send(CONTROL_FD, control::EXITED, pid, status, &[]);
    }
}

/// Empty user and network namespaces, where the kernel allows unprivileged ones: a child that got
/// past seccomp would still find no network and no one's privileges.
fn enter_empty_namespaces() {
    use nix::sched::{unshare, CloneFlags};
    match unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET) {
        Ok(()) => tracing::debug!("sandbox zygote: in new user and network namespaces"),
        Err(e) => tracing::debug!("sandbox zygote: no new namespaces ({e}); seccomp still seals"),
    }
}

/// This process's private writable memory (VmData), the base of a child's RLIMIT_DATA.
fn vm_data_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmData:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb << 10)
        .unwrap_or(64 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_that_does_not_inflate_is_its_own_kind() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // Never initialized: the boot fails before anything uses it.
        let platform = v8::new_default_platform(0, false).make_shared();
        let options = ZygoteOptions {
            limits: Limits::default(),
            snapshot: Some(Box::new(|| -> crate::engine::Snapshot {
                panic!("a snapshot that cannot be inflated")
            })),
            warm_up: false,
            compiled_wasm: &[],
            compiled_js: &[],
        };
        assert!(matches!(
            boot(options, &rt, &platform).err(),
            Some(BootError::Inflate)
        ));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn warm_up_runs_until_rounds_are_flat_and_never_fewer_than_the_minimum() {
        // Flat from the first round (the build's compiled code): still MIN_ROUNDS.
        let mut warming = Warming::new(true);
        while warming.stage == Stage::Rounds {
            warming.end_round(ms(50));
        }
        assert_eq!(warming.rounds, Warming::MIN_ROUNDS);
        assert_eq!(warming.stage, Stage::Settle);
        // Getting faster for a while: FLAT_ROUNDS after the last gain.
        let mut warming = Warming::new(true);
        let mut took = ms(2_000);
        for _ in 0..20 {
            took = took.mul_f64(0.85); // a gain: more than 10 %
            warming.end_round(took);
            assert_eq!(warming.stage, Stage::Rounds);
        }
        while warming.stage == Stage::Rounds {
            warming.end_round(took);
        }
        assert_eq!(warming.rounds, 20 + Warming::FLAT_ROUNDS);
        // Never past MAX_ROUNDS.
        let mut warming = Warming::new(true);
        let mut took = ms(10_000);
        while warming.stage == Stage::Rounds {
            took = took.mul_f64(0.8);
            warming.end_round(took);
        }
        assert_eq!(warming.rounds, Warming::MAX_ROUNDS);
    }

    #[test]
    fn one_round_follows_the_settling_gc_and_then_the_probe() {
        let mut warming = Warming::new(true);
        while warming.stage == Stage::Rounds {
            warming.end_round(ms(50));
        }
        assert_eq!(warming.stage, Stage::Settle);
        let settled_after = warming.rounds;
        // What `step` does once it has settled.
        warming.stage = Stage::Retier;
        warming.end_round(ms(50));
        assert_eq!(warming.stage, Stage::Probe);
        assert_eq!(warming.rounds, settled_after + 1);
        // A slow probe's rounds settle, and have their round after it, again.
        assert!(warming.probe_says_go_on(ms(40), ms(2)));
        while warming.stage == Stage::Rounds {
            warming.end_round(ms(50));
        }
        assert_eq!(warming.stage, Stage::Settle);
        assert_eq!(warming.rounds, settled_after + 1 + Warming::MORE_ROUNDS);
    }

    #[test]
    fn a_slow_first_job_sends_the_zygote_back_to_a_few_rounds_a_bounded_number_of_times() {
        let mut warming = Warming::new(true);
        warming.rounds = 15;
        warming.stage = Stage::Probe;
        // Measured normal starts: no more rounds.
        assert!(!warming.probe_says_go_on(ms(8), ms(2)));
        assert_eq!(warming.stage, Stage::Done);
        // A slow start: three more rounds, then a probe again; never more than MAX_PROBES.
        let mut more = 0;
        warming.stage = Stage::Probe;
        while warming.probe_says_go_on(ms(22), ms(2)) {
            more += 1;
            assert_eq!(warming.stage, Stage::Rounds);
            assert_eq!(warming.until, Some(warming.rounds + Warming::MORE_ROUNDS));
            warming.rounds += Warming::MORE_ROUNDS;
            warming.stage = Stage::Probe;
        }
        assert_eq!(warming.stage, Stage::Done);
        assert_eq!(more, Warming::MAX_PROBES - 2);
        // A slow machine's steady state scales the bar with it.
        assert!(!first_job_is_slow(ms(20), ms(6)));
        assert!(first_job_is_slow(ms(30), ms(6)));
    }
}
