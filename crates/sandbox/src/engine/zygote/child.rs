//! A forked sandbox's life: seal itself, take its job from the parent, run it, report; take the
//! next job of its session the same way; exit when the parent closes the socket.
//!
//! The child starts as a copy of the zygote's ready sandbox. It closes everything but its two
//! sockets, makes its own tokio runtime (the zygote's is never touched again), draws its own
//! entropy (and a report token per job), and seals itself (see `seal.rs`) before the job arrives.
//! It drives its isolate only while a job runs: nothing a script left behind runs between jobs. Tool ops
//! reach the parent's `ToolBridge` through [`RemotePort`]: the bytes the script sent, unparsed.

use super::{frames, prefault, seal};
use crate::bridge::memory::MemoryBudget;
use crate::bridge::{Clock, Entropy, IdleWarmUp, SharedOutput, Stream, ToolPort, Tools};
use crate::engine::isolate::{self, Parts};
use deno_core::error::CoreError;
use deno_core::{v8, JsBuffer, JsRuntime};
use futures::future::LocalBoxFuture;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// The zygote's ready sandbox, which each child inherits.
pub struct Booted {
    pub js: JsRuntime,
    pub parts: Parts,
    pub evaluated: Pin<Box<dyn std::future::Future<Output = Result<(), CoreError>>>>,
    pub platform: v8::SharedRef<v8::Platform>,
}

pub struct Start<'a> {
    pub booted: Booted,
    /// The zygote's runtime (time only, no descriptors), which the child goes on driving.
    pub rt: &'a tokio::runtime::Runtime,
    pub events: RawFd,
    pub sync: RawFd,
    pub devnull: RawFd,
    pub zygote: libc::pid_t,
    pub data_limit: u64,
    /// The pages a job touches (see `prefault`), checked against the zygote's maps at the fork.
    pub prefault: &'a prefault::HotPages,
}

/// The most a parent frame may hold (a tool's envelope, the catalogue of one server).
const MAX_PARENT_FRAME: usize = 64 << 20;

/// The first frame: the job and its randomness.
#[derive(serde::Deserialize)]
struct JobFrame {
    job: serde_json::Value,
    seed: Option<u64>,
}

pub fn run(start: Start<'_>) -> ! {
    // First, before this process maps, frees or starts anything: its mappings are still the
    // ones `prefault::within` checked the pages against, and no other thread exists.
    // SAFETY: see above; no key-guarded pages were learned.
    unsafe { prefault::make_own(start.prefault) };
    let code = match life(start) {
        Ok(()) => 0,
        Err(e) => {
            last_words(serde_json::json!({"reason": format!("the sandbox process failed: {e}")}));
            70
        }
    };
    // SAFETY: ends this process without running the zygote's destructors (its V8, its runtime).
    unsafe { libc::_exit(code) }
}

fn life(start: Start) -> Result<(), String> {
    let Start {
        booted,
        rt,
        events,
        sync,
        devnull,
        zygote,
        data_limit,
        prefault: _,
    } = start;
    // SAFETY: restores the default signal mask the zygote changed for itself.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    if !seal::detach(zygote) {
        return Err("the zygote is gone".into());
    }
    seal::keep_only_sockets(devnull, events, sync)?;
    let mut booted = booted;
    tell_parent_how_this_process_dies(&mut booted.js);
    // SAFETY: the descriptors keep_only_sockets put there, owned from here on.
    let (events, sync) = unsafe {
        (
            Arc::new(UnixStream::from_raw_fd(seal::EVENTS_FD)),
            UnixStream::from_raw_fd(seal::SYNC_FD),
        )
    };
    // The parent's frames, read on a thread of their own with blocking reads: the zygote's
    // runtime (which this child keeps driving: the isolate's op driver lives on it) has no I/O
    // driver, by design, so nothing of it refers to a descriptor.
    let (frames_tx, mut frames_rx) = mpsc::unbounded_channel::<frames::Frame>();
    let reader = events.clone();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("sandbox-ipc".into())
        .spawn(move || {
            let _ = started_tx.send(());
            while let Ok(frame) = frames::read_blocking(&mut &*reader, MAX_PARENT_FRAME) {
                if frames_tx.send(frame).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| format!("cannot start the IPC thread: {e}"))?;
    // Sealed once the thread runs (its start-up syscalls are not the script's), and before the
    // job comes: a child forked ahead of demand waits for its job already sealed.
    started_rx
        .recv()
        .map_err(|_| "the IPC thread did not start".to_owned())?;
    seal::limit_resources(data_limit, 64)?;
    // SAFETY: getpid has no preconditions.
    seal::seal(unsafe { libc::getpid() })?;
    let first = frames_rx
        .blocking_recv()
        .ok_or("the parent closed the socket before sending a job")?;
    if first.tag != frames::JOB {
        return Err("the first frame is not a job".into());
    }
    let job: JobFrame = serde_json::from_slice(&first.payload).map_err(|e| e.to_string())?;
    #[cfg(feature = "escape-probes")]
    let probes =
        std::env::var_os("MCP_CODE_MODE_ESCAPE_PROBES").map(|_| seal::escape_probes(zygote));

    let Booted {
        js,
        parts,
        evaluated,
        platform,
    } = booted;
    // Never torn down: the process ends right after its report, and an isolate's teardown
    // (a last GC, freeing every space) would only cost the machine's time.
    let mut js = std::mem::ManuallyDrop::new(js);
    let port = Rc::new(RemotePort {
        events: events.clone(),
        pending: Default::default(),
        next_id: Cell::new(0),
        sync: RefCell::new(sync),
    });
    {
        let op_state = js.op_state();
        let mut op_state = op_state.borrow_mut();
        op_state.put(Entropy(
            crate::engine::entropy_source(job.seed).map_err(|e| crate::Chain(&e).to_string())?,
        ));
        op_state.put(Clock(Instant::now()));
        op_state.put(Tools(port.clone()));
        let forward = events.clone();
        op_state
            .borrow::<SharedOutput>()
            .set_forward(Box::new(move |stream, kept, dropped| {
                if !kept.is_empty() {
                    let tag = match stream {
                        Stream::Stdout => frames::STDOUT,
                        Stream::Stderr => frames::STDERR,
                    };
                    send(&forward, tag, kept);
                }
                if dropped > 0 {
                    let mut p = vec![stream as u8];
                    p.extend_from_slice(&dropped.to_le_bytes());
                    send(&forward, frames::DROPPED, &p);
                }
            }));
    }
    #[cfg(feature = "escape-probes")]
    if let Some(probes) = probes {
        send(&events, frames::STDOUT, probes.as_bytes());
        // How the parent reports a child that dies: by a signal alone, a V8 fatal error (V8's
        // own path, its handler included), a panic.
        match std::env::var("MCP_CODE_MODE_ESCAPE_PROBES").as_deref() {
            Ok("abort") => std::process::abort(),
            Ok("v8-fatal") => {
                extern "C" {
                    #[link_name = "_Z8V8_FatalPKcz"]
                    fn v8_fatal(format: *const std::ffi::c_char, ...) -> !;
                }
                // SAFETY: a format without conversions; V8 ends the process.
                unsafe { v8_fatal(c"Check failed: escape probe.".as_ptr()) }
            }
            Ok("v8-oom") => {
                extern "C" {
                    #[link_name = "_ZN2v88internal2V823FatalProcessOutOfMemoryEPNS0_7IsolateEPKcRKNS_10OOMDetailsE"]
                    fn v8_out_of_memory(
                        isolate: v8::UnsafeRawIsolatePtr,
                        location: *const std::ffi::c_char,
                        details: &v8::OomDetails,
                    ) -> !;
                }
                let details = v8::OomDetails {
                    is_heap_oom: false,
                    detail: std::ptr::null(),
                };
                // SAFETY: this process's isolate, a C string; V8 ends the process.
                unsafe {
                    let isolate = js.v8_isolate().as_raw_isolate_ptr();
                    v8_out_of_memory(isolate, c"escape probe".as_ptr(), &details)
                }
            }
            Ok("panic") => panic!("escape probe"),
            _ => {}
        }
    }
    let mut job_json = job.job;
    job_json["reseed"] = true.into();
    let Parts {
        job_tx,
        mut outcome_rx,
        fate,
        budget,
        ..
    } = parts;
    let output = js.op_state().borrow().borrow::<SharedOutput>().clone();
    let _ = job_tx.send(job_json.to_string());
    // The runner waits between warm-up rounds (see `process::Warming`): on to the job.
    if let Some(warm) = js.op_state().borrow().try_borrow::<Rc<IdleWarmUp>>() {
        warm.answer(false);
    }

    rt.block_on(async {
        let run = async {
            std::future::poll_fn(|cx| isolate::poll_js(&mut js, Some(&platform), cx)).await?;
            evaluated.await
        };
        let mut run = std::pin::pin!(run);
        let mut job_running = true;
        loop {
            tokio::select! {
                biased;
                outcome = outcome_rx.recv(), if job_running => {
                    let Some(report) = outcome else { break };
                    job_running = false;
                    send(&events, frames::REPORT, report.as_bytes());
                }
                // Driven only while a job runs (see `isolate::drive_jobs`).
                ended = &mut run, if job_running => {
                    // The runner reports, then its module ends: both can happen in one turn.
                    match outcome_rx.try_recv() {
                        Ok(report) => send(&events, frames::REPORT, report.as_bytes()),
                        Err(_) => send(&events, frames::DIED, died(&fate, &budget, ended.err().map(|e| e.to_string())).as_bytes()),
                    }
                    break;
                }
                frame = frames_rx.recv() => {
                    // None: the parent closed the socket, nobody wants this sandbox any more.
                    let Some(f) = frame else { break };
                    match f.tag {
                        frames::CALL_RESULT if f.payload.len() >= 8 => {
                            let id = u64::from_le_bytes(f.payload[..8].try_into().unwrap());
                            let text = String::from_utf8_lossy(&f.payload[8..]).into_owned();
                            if let Some(tx) = port.pending.borrow_mut().remove(&id) {
                                let _ = tx.send(text);
                            }
                        }
                        // A session's next job: its output starts empty under the whole cap.
                        frames::JOB if !job_running => {
                            let Ok(next) = serde_json::from_slice::<JobFrame>(&f.payload) else { break };
                            output.clear();
                            job_running = true;
                            let _ = job_tx.send(next.job.to_string());
                        }
                        _ => {}
                    }
                }
            }
        }
    });
    Ok(())
}

/// Writes one frame to the parent, blocking: the parent always reads, and a child that cannot
/// reach it has nothing left to do.
fn send(events: &UnixStream, tag: u8, payload: &[u8]) {
    if frames::write_blocking(&mut &*events, tag, &[payload]).is_err() {
        // SAFETY: the parent is gone; nobody reads this execution's outcome.
        unsafe { libc::_exit(70) }
    }
}

fn died(fate: &crate::engine::Fate, budget: &MemoryBudget, reason: Option<String>) -> String {
    serde_json::json!({
        "heap_exhausted": fate.heap_exhausted.load(std::sync::atomic::Ordering::SeqCst),
        "budget_exhausted": budget.was_exhausted(),
        "reason": reason,
    })
    .to_string()
}

/// A child dies of a V8 fatal error, V8 running out of memory or a panic of ours with the reason
/// printed to its stderr, which is /dev/null: each is sent to the parent first, as a `DIED`
/// frame, so the error says what happened (and not only the signal that followed).
fn tell_parent_how_this_process_dies(js: &mut JsRuntime) {
    v8::V8::set_fatal_error_handler(|file: &str, line: i32, message: &str| {
        let at = if file.is_empty() {
            String::new()
        } else {
            format!(" ({file}:{line})")
        };
        let reason = format!("V8 fatal error: {}{at}", message.trim());
        last_words(serde_json::json!({ "reason": reason }));
    });
    js.v8_isolate().set_oom_error_handler(v8_out_of_memory);
    std::panic::set_hook(Box::new(|info| {
        let what = info.payload_as_str().unwrap_or("no message");
        let at = info
            .location()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        let reason = format!("the sandbox process panicked{at}: {what}");
        last_words(serde_json::json!({ "reason": reason }));
        // SAFETY: ends the process before unwinding runs the zygote's destructors.
        unsafe { libc::_exit(70) }
    }));
}

/// V8 could not allocate: its heap (past the near-limit grace) or memory from the system, which
/// the data limit set from `--memory-mb` bounds (`seal::limit_resources`).
unsafe extern "C" fn v8_out_of_memory(location: *const std::ffi::c_char, details: &v8::OomDetails) {
    let location = if location.is_null() {
        String::new()
    } else {
        // SAFETY: V8 passes a C string.
        unsafe { std::ffi::CStr::from_ptr(location) }
            .to_string_lossy()
            .into_owned()
    };
    let kind = if details.is_heap_oom {
        "heap"
    } else {
        "process"
    };
    // Reported as the sandbox's memory running out: of its JavaScript heap, or of all of it.
    last_words(serde_json::json!({
        "heap_exhausted": true,
        "budget_exhausted": !details.is_heap_oom,
        "reason": format!("V8 ran out of memory ({kind}): {location}"),
    }));
    // SAFETY: V8 must not go on; what it would print goes nowhere.
    unsafe { libc::_exit(70) }
}

/// One `DIED` frame to the parent, at most once, blocking, straight to the socket: the thread
/// that writes frames is the one that is ending.
fn last_words(died: serde_json::Value) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    // SAFETY: borrows the events socket, which stays open (ManuallyDrop: never closed here).
    let events = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(seal::EVENTS_FD) });
    let _ = frames::write_blocking(&mut &*events, frames::DIED, &[died.to_string().as_bytes()]);
    // SAFETY: reads into our own buffer from our own descriptor.
    unsafe {
        // Unread input would turn our close into a reset that discards what we wrote.
        let mut sink = [0u8; 4096];
        while libc::recv(
            seal::EVENTS_FD,
            sink.as_mut_ptr().cast(),
            sink.len(),
            libc::MSG_DONTWAIT,
        ) > 0
        {}
    }
}

/// The tool ops' port in a child: each request goes to the parent's bridge as the script's bytes.
struct RemotePort {
    events: Arc<UnixStream>,
    pending: RefCell<HashMap<u64, oneshot::Sender<String>>>,
    next_id: Cell<u64>,
    /// Blocking request/response for the two synchronous reads (the catalogue's index and one
    /// server's tools), which Python makes from attribute access.
    sync: RefCell<UnixStream>,
}

impl RemotePort {
    fn ask(&self, tag: u8, payload: &[u8]) -> String {
        let mut sync = self.sync.borrow_mut();
        let answer = frames::write_blocking(&mut *sync, tag, &[payload])
            .and_then(|()| frames::read_blocking(&mut *sync, MAX_PARENT_FRAME));
        match answer {
            Ok(f) => String::from_utf8_lossy(&f.payload).into_owned(),
            // SAFETY: the parent is gone; nobody reads this execution's outcome.
            Err(_) => unsafe { libc::_exit(70) },
        }
    }

    fn request(&self, tag: u8, fields: &[&[u8]]) -> LocalBoxFuture<'static, String> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let (tx, rx) = oneshot::channel();
        self.pending.borrow_mut().insert(id, tx);
        send(&self.events, tag, &frames::encode_call(id, fields));
        Box::pin(async move { rx.await.unwrap_or_default() })
    }
}

impl ToolPort for RemotePort {
    fn catalog_index(&self) -> String {
        self.ask(frames::CATALOG_INDEX, &[])
    }
    fn server_tools(&self, server: &[u8]) -> String {
        if server.len() > crate::bridge::tools::MAX_NAME_BYTES {
            return String::new();
        }
        self.ask(frames::SERVER_TOOLS, server)
    }
    fn wait_ready(&self, server: JsBuffer) -> LocalBoxFuture<'static, String> {
        if let Err(e) = crate::bridge::tools::check_name(&server, "server") {
            return Box::pin(async move { e.message().to_owned() });
        }
        self.request(frames::WAIT_READY, &[&server])
    }
    fn call(
        &self,
        server: JsBuffer,
        tool: JsBuffer,
        arguments_json: JsBuffer,
        budget: Arc<MemoryBudget>,
    ) -> LocalBoxFuture<'static, String> {
        if let Err(envelope) = crate::bridge::tools::precheck_call(&server, &tool, &arguments_json)
        {
            return Box::pin(async move { envelope });
        }
        // The frame is a copy of the arguments: charged like any other host-side copy.
        let Some(held) = budget.reserve(arguments_json.len()) else {
            let refused = crate::bridge::ToolCallError::Limit(format!(
                "not enough memory left (--memory-mb) to send {} bytes of arguments",
                arguments_json.len()
            ));
            return Box::pin(async move { refused.envelope() });
        };
        let answer = self.request(frames::CALL, &[&server, &tool, &arguments_json]);
        drop(held);
        answer
    }
}

/// The zygote's probe (see `prefault::learn`): runs a `print(1)` job the way a child runs its
/// first, in a forked copy of the zygote, calls `look` (which reads the pages it wrote), then runs
/// a few more. Returns how long the first took and the fastest of the others: a first job much
/// slower than the steady state pays for work the zygote left undone (see `process::Warming`).
pub fn probe(
    booted: Booted,
    rt: &tokio::runtime::Runtime,
    look: &mut dyn FnMut(),
) -> [Duration; 2] {
    /// Jobs after the first; the fastest is the steady state (a later job can pay for a budget
    /// that the first ones brought close).
    const MORE_JOBS: usize = 3;
    let Booted {
        js,
        parts,
        platform,
        ..
    } = booted;
    let mut js = std::mem::ManuallyDrop::new(js);
    let Parts {
        job_tx,
        mut outcome_rx,
        ..
    } = parts;
    if let Some(warm) = js.op_state().borrow().try_borrow::<Rc<IdleWarmUp>>() {
        warm.answer(false);
    }
    let mut run_one = || {
        let started = Instant::now();
        let _ = run_to_report(
            rt,
            &mut js,
            &platform,
            &job_tx,
            &mut outcome_rx,
            "print(1)",
            "<probe>",
        );
        started.elapsed()
    };
    let first = run_one();
    look();
    let steady = (0..MORE_JOBS).map(|_| run_one()).min().unwrap_or(first);
    // Never torn down: the probe ends in `_exit` once it has reported.
    std::mem::forget(outcome_rx);
    std::mem::forget(job_tx);
    [first, steady]
}

/// Hands the runner of a sandbox that is not a child's (the probe's, the build's) the job `code`,
/// and drives it to its report: the report's JSON, or, if its event loop ended first, the error
/// it ended with.
pub fn run_to_report(
    rt: &tokio::runtime::Runtime,
    js: &mut JsRuntime,
    platform: &v8::SharedRef<v8::Platform>,
    job_tx: &mpsc::UnboundedSender<String>,
    outcome_rx: &mut mpsc::UnboundedReceiver<String>,
    code: &str,
    filename: &str,
) -> Result<String, Option<CoreError>> {
    // Shaped as a server's job is (its output limits included: a job with them looks for files
    // to return), so that what the probe measures is the path a child's job takes.
    let mut job = crate::engine::job_json(
        &crate::engine::Job {
            filename: filename.into(),
            ..crate::engine::Job::new(code)
        },
        false,
    );
    job["reseed"] = true.into();
    let _ = job_tx.send(job.to_string());
    rt.block_on(async {
        tokio::select! {
            report = outcome_rx.recv() => Ok(report.unwrap_or_default()),
            ended = std::future::poll_fn(|cx| isolate::poll_js(js, Some(platform), cx)) => Err(ended.err()),
        }
    })
}
