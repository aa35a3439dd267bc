//! The forked sandbox: a zygote process boots one sandbox, and each execution runs in a sealed
//! copy of it forked in a few milliseconds.
//!
//! ```text
//! server process                         zygote process (one thread)        child (one per job)
//!   Zygote ──control (seqpacket)──▶ fork loop ──fork()──▶ seal, job, exit
//!   ForkedSandbox ◀──events + sync sockets (passed at the fork)──────────────▶ ops ▸ RemotePort
//! ```
//! **Invariant:** the server never forks itself; the zygote forks only from its one thread, with
//! its isolate idle (the sandbox waits for its job), so every child copies a consistent isolate.
//! **Invariant:** a child is sealed (seal.rs) before it reads its first job, and runs one job, or
//! the jobs of one session in order; it is driven only while a job runs, and exits when its
//! parent closes the socket (or is killed).
//! **Invariant:** the parent enforces the limits: it kills a child past its timeout (through the
//! zygote, which alone knows whether the pid is still its child), reads every frame with a size
//! limit, and re-checks every tool request in its own `ToolBridge` as if the child were hostile.

mod child;
mod control;
mod frames;
mod prefault;
mod process;
pub mod seal;

pub use process::{
    make_compiled_code, run, BootError, CompiledCode, WarmUpTools, ZygoteOptions, CONTROL_FD,
};

use super::{
    died_error, read_report, shape_outcome, stopped_error, EngineError, Limits, RunControl,
};
use crate::bridge::memory::MemoryBudget;
use crate::bridge::{LiveOutput, SharedOutput, Stream, ToolBridge, ToolHost};
use futures::StreamExt;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How to start the zygote: this program (the product's binary) with its hidden subcommand.
#[derive(Debug, Clone)]
pub struct ZygoteCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// How long a zygote may take to boot (restore and warm up).
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// Why the zygote did not come up (the system's refusals are [`EngineError::System`]).
#[derive(Debug, thiserror::Error)]
pub enum ZygoteError {
    /// Its program could not be started.
    #[error("cannot start {}", .program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// It said why it failed (its [`BootError`], in words: they crossed from its process).
    #[error("{0}")]
    Failed(String),
    /// It ended before it was ready; how (an exit code, a signal) when it was reaped in time.
    #[error("it exited while booting{}", .status.map(|s| format!(" ({s})")).unwrap_or_default())]
    Exited {
        status: Option<std::process::ExitStatus>,
    },
    #[error("it did not boot within {} s", .0.as_secs())]
    Timeout(Duration),
}

/// Why a running zygote gave no sandbox (the system's refusals are [`EngineError::System`]).
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error("the zygote has exited")]
    ZygoteExited,
    #[error("the zygote's control socket failed")]
    Control(#[source] std::io::Error),
    /// The zygote's fork() failed (the system's refusal, in the zygote).
    #[error("the zygote could not fork")]
    Fork(#[source] std::io::Error),
    #[error("the zygote did not answer")]
    NoAnswer,
}

#[derive(Default)]
struct Exits {
    /// Statuses of children that have exited, until someone asks.
    done: HashMap<i32, i32>,
    waiting: HashMap<i32, oneshot::Sender<i32>>,
}

struct Shared {
    control: OwnedFd,
    pending_fork: Mutex<Option<oneshot::Sender<Result<i32, i32>>>>,
    exits: Mutex<Exits>,
    alive: std::sync::atomic::AtomicBool,
    /// Set once the zygote's warm-up rounds are done (see `process::Warming`): to the pages
    /// each child then makes its own before its job comes (see `prefault`).
    warm: tokio::sync::watch::Sender<Option<PagesAhead>>,
    /// Set when we stop the zygote ourselves: its end is then no news.
    stopping: std::sync::atomic::AtomicBool,
}

/// The server's handle on its zygote process.
pub struct Zygote {
    limits: Limits,
    shared: Arc<Shared>,
    fork_lock: tokio::sync::Mutex<()>,
    process: Mutex<std::process::Child>,
}

impl Zygote {
    /// Starts the zygote and waits until its sandbox is ready to be forked.
    pub async fn start(
        command: &ZygoteCommand,
        limits: Limits,
    ) -> Result<Arc<Zygote>, EngineError> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| EngineError::System {
            what: "a control socket for the zygote",
            source: e.into(),
        })?;
        let mut cmd = std::process::Command::new(&command.program);
        cmd.args(&command.args)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        for keep in ["MCP_CODE_MODE_LOG", "RUST_BACKTRACE"] {
            if let Some(v) = std::env::var_os(keep) {
                cmd.env(keep, v);
            }
        }
        #[cfg(feature = "escape-probes")]
        if let Some(v) = std::env::var_os("MCP_CODE_MODE_ESCAPE_PROBES") {
            cmd.env("MCP_CODE_MODE_ESCAPE_PROBES", v);
        }
        let theirs_fd = theirs.as_raw_fd();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                if libc::dup2(theirs_fd, CONTROL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let process = cmd.spawn().map_err(|source| {
            EngineError::Zygote(ZygoteError::Spawn {
                program: command.program.clone(),
                source,
            })
        })?;
        drop(theirs);
        let shared = Arc::new(Shared {
            control: ours,
            pending_fork: Mutex::new(None),
            exits: Mutex::new(Exits::default()),
            alive: true.into(),
            warm: tokio::sync::watch::Sender::new(None),
            stopping: false.into(),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let reader = shared.clone();
        std::thread::Builder::new()
            .name("zygote-control".into())
            .spawn(move || read_control(reader, ready_tx))
            .map_err(|source| EngineError::System {
                what: "a thread to read the zygote's control socket",
                source,
            })?;
        let zygote = Arc::new(Zygote {
            limits,
            shared,
            fork_lock: tokio::sync::Mutex::new(()),
            process: Mutex::new(process),
        });
        let failed = match tokio::time::timeout(BOOT_TIMEOUT, ready_rx).await {
            Ok(Ok(Ok(()))) => return Ok(zygote),
            Ok(Ok(Err(ZygoteError::Exited { .. })) | Err(_)) => ZygoteError::Exited {
                status: zygote.reaped(Duration::from_millis(500)).await,
            },
            Ok(Ok(Err(e))) => e,
            Err(_) => ZygoteError::Timeout(BOOT_TIMEOUT),
        };
        Err(EngineError::Zygote(failed))
    }

    /// How the zygote process ended, if it has within `wait`: the exit code or signal that
    /// says why a zygote ended while booting.
    async fn reaped(&self, wait: Duration) -> Option<std::process::ExitStatus> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Ok(Some(status)) = self.process.lock().try_wait() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until the zygote has finished warming up (children forked before then run their
    /// job slower: they optimize what the zygote had not yet), or `timeout` passes. For
    /// benchmarks, which measure the steady state.
    pub async fn wait_warm(&self, timeout: Duration) -> bool {
        let mut warm = self.shared.warm.subscribe();
        let warmed = tokio::time::timeout(timeout, warm.wait_for(Option::is_some)).await;
        matches!(warmed, Ok(Ok(_)))
    }

    /// Once warm: the pages each child makes its own before its job comes (see `prefault`).
    pub fn pages_ahead(&self) -> Option<PagesAhead> {
        *self.shared.warm.borrow()
    }

    /// A fresh sealed child, ready for one job, serving `tools`.
    pub async fn fork(
        self: &Arc<Self>,
        tools: Arc<dyn ToolHost>,
        seed: Option<u64>,
        live_output: Option<LiveOutput>,
    ) -> Result<ForkedSandbox, EngineError> {
        let sockets = |source| EngineError::System {
            what: "a socket pair for a forked sandbox",
            source,
        };
        let (events, child_events) = std::os::unix::net::UnixStream::pair().map_err(sockets)?;
        let (sync, child_sync) = std::os::unix::net::UnixStream::pair().map_err(sockets)?;
        let pid = {
            let _one_at_a_time = self.fork_lock.lock().await;
            if !self.is_alive() {
                return Err(EngineError::Fork(ForkError::ZygoteExited));
            }
            let (tx, rx) = oneshot::channel();
            *self.shared.pending_fork.lock() = Some(tx);
            control::send_with_fds(
                self.shared.control.as_raw_fd(),
                control::FORK,
                0,
                &[child_events.as_raw_fd(), child_sync.as_raw_fd()],
                0,
                &[],
            )
            .map_err(|e| EngineError::Fork(ForkError::Control(e.into())))?;
            match tokio::time::timeout(Duration::from_secs(10), rx).await {
                Ok(Ok(Ok(pid))) => pid,
                Ok(Ok(Err(errno))) => {
                    return Err(EngineError::Fork(ForkError::Fork(
                        std::io::Error::from_raw_os_error(errno),
                    )))
                }
                // The reader drops the request when the zygote's socket closes.
                Ok(Err(_)) if !self.is_alive() => {
                    return Err(EngineError::Fork(ForkError::ZygoteExited))
                }
                _ => return Err(EngineError::Fork(ForkError::NoAnswer)),
            }
        };
        drop((child_events, child_sync));
        let to_tokio = |s: std::os::unix::net::UnixStream| {
            s.set_nonblocking(true)?;
            tokio::net::UnixStream::from_std(s)
        };
        let shares = super::MemoryShares::of(self.limits.memory_mb);
        Ok(ForkedSandbox {
            zygote: self.clone(),
            pid,
            events: Some(to_tokio(events).map_err(sockets)?),
            sync: Some(to_tokio(sync).map_err(sockets)?),
            conversation: None,
            seed,
            tools: ToolBridge::new(tools),
            output: SharedOutput::new(self.limits.max_output, live_output),
            budget: MemoryBudget::new(shares.counted),
            finished: false,
            forked_cold: self.shared.warm.borrow().is_none(),
        })
    }

    fn kill(&self, pid: i32) {
        let _ = control::send(self.shared.control.as_raw_fd(), control::KILL, pid, 0, &[]);
    }

    /// How child `pid` ended (a wait status), once the zygote has reaped it.
    async fn exit_status(&self, pid: i32, wait: Duration) -> Option<i32> {
        let rx = {
            let mut exits = self.shared.exits.lock();
            if let Some(status) = exits.done.remove(&pid) {
                return Some(status);
            }
            let (tx, rx) = oneshot::channel();
            exits.waiting.insert(pid, tx);
            rx
        };
        tokio::time::timeout(wait, rx).await.ok()?.ok()
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.shared
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut process = self.process.lock();
        let _ = process.kill();
        // Reaped on a thread of its own: the kernel takes ~20 ms to free a killed zygote's memory,
        // which nobody needs to wait for (`run` did, before it could exit). Only that thread reaps
        // it (a `Child` that is dropped does not), so its pid is not reused under it; a process
        // that exits first leaves it to init.
        if let Ok(None) = process.try_wait() {
            let pid = process.id() as libc::pid_t;
            let _ = std::thread::Builder::new()
                .name("zygote-reaper".into())
                // SAFETY: waits for our own child, which nothing else reaps.
                .spawn(move || unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) });
        }
    }
}

/// How many pages each child of a warm zygote makes its own before its job comes.
#[derive(Clone, Copy, Debug, Default)]
pub struct PagesAhead {
    /// Of the zygote's memory that a job writes: copied.
    pub copied: usize,
    /// Of code and read-only data that a job reads: mapped.
    pub mapped: usize,
}

/// The control socket's reader: fork answers, exits, and the zygote's own end.
fn read_control(shared: Arc<Shared>, ready: oneshot::Sender<Result<(), ZygoteError>>) {
    let mut ready = Some(ready);
    let mut buf = vec![0u8; 16384];
    loop {
        // SAFETY: reading into our own buffer from a socket we own.
        let n = unsafe {
            libc::recv(
                shared.control.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
            )
        };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        let packet = &buf[..n as usize];
        let (kind, pid) = control::parse(packet);
        match kind {
            control::READY => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Ok(()));
                }
            }
            control::BOOT_FAILED => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Err(ZygoteError::Failed(control::text(packet))));
                } else {
                    tracing::error!("sandbox zygote: {}", control::text(packet));
                }
            }
            control::FORKED | control::FORK_FAILED => {
                let answer = if kind == control::FORKED {
                    Ok(pid)
                } else {
                    Err(control::status(packet))
                };
                if let Some(tx) = shared.pending_fork.lock().take() {
                    let _ = tx.send(answer);
                }
            }
            control::WARM => {
                // "written read first_job_µs steady_job_µs with_the_fork" from the probe, or why
                // it failed.
                let probe = control::text(packet);
                let numbers: Vec<u64> = probe
                    .split_ascii_whitespace()
                    .map_while(|n| n.parse().ok())
                    .collect();
                let rounds = pid;
                let last = f64::from(control::status(packet)) / 1000.0;
                match numbers[..] {
                    [written, read, first, steady, with_the_fork] => tracing::info!(
                        "sandbox zygote warm after {rounds} warm-up rounds (the last took \
                         {last:.1} ms); before its job comes, each child copies the {written} \
                         pages a job writes and has the {read} pages of code and read-only data \
                         it reads mapped ({with_the_fork} of them by the fork itself); the \
                         probe's first job took {:.1} ms, later ones {:.1} ms",
                        first as f64 / 1000.0,
                        steady as f64 / 1000.0
                    ),
                    _ => tracing::info!(
                        "sandbox zygote warm after {rounds} warm-up rounds (the last took \
                         {last:.1} ms); no pages copied ahead of jobs: {probe}"
                    ),
                }
                let ahead = match numbers[..] {
                    [written, read, ..] => PagesAhead {
                        copied: written as usize,
                        mapped: read as usize,
                    },
                    _ => PagesAhead::default(),
                };
                shared.warm.send_replace(Some(ahead));
            }
            control::EXITED => {
                let status = control::status(packet);
                let mut exits = shared.exits.lock();
                match exits.waiting.remove(&pid) {
                    Some(tx) => {
                        let _ = tx.send(status);
                    }
                    None => {
                        // Bounded: statuses nobody asks for are of children already dealt with.
                        if exits.done.len() > 4096 {
                            exits.done.clear();
                        }
                        exits.done.insert(pid, status);
                    }
                }
            }
            _ => {}
        }
    }
    shared
        .alive
        .store(false, std::sync::atomic::Ordering::SeqCst);
    shared.pending_fork.lock().take();
    shared.exits.lock().waiting.clear();
    if let Some(tx) = ready.take() {
        let _ = tx.send(Err(ZygoteError::Exited { status: None }));
    }
    if !shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        tracing::warn!("the sandbox zygote has exited");
    }
}

/// The largest frame a child may send: a tool call (arguments and two names) or a report (with
/// the files the job may return).
fn max_child_frame(max_output: usize, outputs: &super::OutputLimits) -> usize {
    crate::bridge::tools::MAX_ARGUMENTS_BYTES
        + 2 * crate::bridge::tools::MAX_NAME_BYTES
        + 4 * max_output
        + outputs.max_report_bytes()
        + (1 << 20)
}

/// A sealed child process ready for one job (or a session's jobs, one after another).
pub struct ForkedSandbox {
    zygote: Arc<Zygote>,
    pid: i32,
    /// The sockets, until the first job turns them into the conversation.
    events: Option<tokio::net::UnixStream>,
    sync: Option<tokio::net::UnixStream>,
    conversation: Option<Conversation>,
    seed: Option<u64>,
    tools: ToolBridge,
    output: SharedOutput,
    budget: Arc<MemoryBudget>,
    finished: bool,
    /// Forked before the zygote had finished warming up.
    forked_cold: bool,
}

/// The parent's side of the sockets, kept from one job of a session to the next.
struct Conversation {
    frames: tokio_util::codec::FramedRead<tokio::net::unix::OwnedReadHalf, frames::FrameCodec>,
    writer: tokio::net::unix::OwnedWriteHalf,
    _sync_server: tokio_util::task::AbortOnDropHandle<()>,
}

enum Ended {
    Report(Vec<u8>),
    Died(Vec<u8>),
    Broken(String),
    /// The clock ran out (`None`) or the host stopped the job.
    Stopped(Option<(String, String)>),
}

impl ForkedSandbox {
    pub fn set_tools(&self, tools: Arc<dyn ToolHost>) {
        self.tools.set_host(tools);
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Gives a child forked ahead of demand its job's seed and live output (its tools: see
    /// [`Self::set_tools`]). Both are the parent's: the child draws its seed with the job.
    pub fn ready_for(&mut self, seed: Option<u64>, live_output: Option<LiveOutput>) {
        self.seed = seed;
        self.output = SharedOutput::new(self.zygote.limits.max_output, live_output);
    }

    /// Whether a better child can be had: this one's zygote has exited, or has finished warming
    /// up since this child was forked (a child forked cold optimizes the job path itself).
    pub fn outdated(&self) -> bool {
        !self.zygote.is_alive() || (self.forked_cold && self.zygote.shared.warm.borrow().is_some())
    }

    pub async fn execute(self, job: super::Job) -> super::Outcome {
        self.execute_with(job, RunControl::new()).await
    }

    /// Runs the job; its timeout counts only time `control` was not paused.
    pub async fn execute_with(mut self, job: super::Job, control: RunControl) -> super::Outcome {
        self.run(job, control, false).await.0
    }

    /// Runs one job; returns its outcome and whether the child can take another (see
    /// [`super::Sandbox::execute_kept`]). A child that cannot is killed before this returns.
    pub(super) async fn run(
        &mut self,
        job: super::Job,
        control: RunControl,
        session: bool,
    ) -> (super::Outcome, bool) {
        let started = Instant::now();
        let limits = self.zygote.limits;
        let timeout = job.timeout.unwrap_or(limits.timeout);
        let clock = (tokio::time::Instant::now(), timeout, control);
        if let (Some(events), Some(sync)) = (self.events.take(), self.sync.take()) {
            let (reader, writer) = events.into_split();
            self.conversation = Some(Conversation {
                // Cancel-safe: a call that finishes while a frame is half read loses none of it.
                // The output limits are the server's, the same for every job of a session.
                frames: frames::reader(reader, max_child_frame(limits.max_output, &job.outputs)),
                writer,
                _sync_server: tokio_util::task::AbortOnDropHandle::new(tokio::spawn(serve_sync(
                    sync,
                    self.tools.clone(),
                ))),
            });
        }
        let ended = match self.conversation.take() {
            Some(mut conversation) => {
                let job = super::job_json(&job, session);
                let ended = self.converse(&mut conversation, &job, &clock).await;
                if matches!(ended, Ended::Report(_)) {
                    self.conversation = Some(conversation);
                }
                ended
            }
            None => Ended::Broken("it has already ended".into()),
        };
        let report = match ended {
            Ended::Report(json) => read_report(&String::from_utf8_lossy(&json)),
            Ended::Died(json) => Err(self.died(&json, limits.memory_mb)),
            Ended::Stopped(stop) => Err(stopped_error(stop, timeout)),
            Ended::Broken(why) => Err(self.broken(why).await),
        };
        let reported = report.is_ok();
        let tool_calls = self.tools.take_job_calls();
        let outcome = shape_outcome(
            report,
            self.output.take_captured(),
            tool_calls,
            limits.max_output,
            &job.outputs,
            started,
        );
        let alive = reported && !super::ends_session(&outcome);
        if !alive {
            self.conversation = None;
            self.finish();
        }
        (outcome, alive)
    }

    /// Hands over the job, then serves the child until it reports, dies or runs out of time.
    async fn converse(
        &self,
        conversation: &mut Conversation,
        job: &serde_json::Value,
        (start, timeout, control): &(tokio::time::Instant, Duration, RunControl),
    ) -> Ended {
        let Conversation { frames, writer, .. } = conversation;
        // The child draws its randomness from the seed with its first job only: a session's
        // later jobs go on with the same stream (same seed, same jobs: same outputs).
        let first = serde_json::json!({"job": job, "seed": self.seed}).to_string();
        if let Err(e) = frames::write(writer, frames::JOB, &[first.as_bytes()]).await {
            return Ended::Broken(format!("could not send the job: {e}"));
        }
        let mut calls = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                frame = frames.next() => {
                    let frame = match frame {
                        Some(Ok(frame)) => frame,
                        None => return Ended::Broken("it closed its socket".into()),
                        Some(Err(e)) => return Ended::Broken(format!("it sent a bad frame: {e}")),
                    };
                    match frame.tag {
                        frames::STDOUT => self.output.write(Stream::Stdout, &frame.payload),
                        frames::STDERR => self.output.write(Stream::Stderr, &frame.payload),
                        frames::DROPPED if frame.payload.len() == 9 => {
                            let stream = if frame.payload[0] == Stream::Stdout as u8 { Stream::Stdout } else { Stream::Stderr };
                            let n = u64::from_le_bytes(frame.payload[1..].try_into().unwrap());
                            self.output.write_counted(stream, &[], n);
                        }
                        frames::CALL => {
                            let Some((id, f)) = frames::decode_call(&frame.payload, 3) else {
                                return Ended::Broken("it sent a malformed call".into());
                            };
                            let (server, tool, args) = (f[0].to_vec(), f[1].to_vec(), f[2].to_vec());
                            let (bridge, budget) = (self.tools.clone(), self.budget.clone());
                            calls.spawn(async move {
                                (id, bridge.call_envelope(&server, &tool, &args, &budget).await)
                            });
                        }
                        frames::WAIT_READY => {
                            let Some((id, f)) = frames::decode_call(&frame.payload, 1) else {
                                return Ended::Broken("it sent a malformed request".into());
                            };
                            let server = f[0].to_vec();
                            let bridge = self.tools.clone();
                            calls.spawn(async move { (id, bridge.wait_ready(&server).await) });
                        }
                        frames::REPORT => return Ended::Report(frame.payload),
                        frames::DIED => return Ended::Died(frame.payload),
                        other => return Ended::Broken(format!("it sent an unknown frame ({other})")),
                    }
                }
                Some(Ok((id, answer))) = calls.join_next() => {
                    let payload = frames::encode_result(id, &answer);
                    if let Err(e) = frames::write(writer, frames::CALL_RESULT, &[&payload]).await {
                        return Ended::Broken(format!("could not answer a call: {e}"));
                    }
                }
                stop = control.expired(*start, *timeout) => return Ended::Stopped(stop),
            }
        }
    }

    fn died(&self, json: &[u8], memory_mb: u64) -> super::ErrorInfo {
        let v: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
        died_error(
            v["heap_exhausted"].as_bool().unwrap_or(false),
            v["budget_exhausted"].as_bool().unwrap_or(false),
            memory_mb,
            v["reason"].as_str().map(str::to_owned),
        )
    }

    /// The error for a child that stopped talking: how it ended, as the zygote saw it.
    async fn broken(&mut self, why: String) -> super::ErrorInfo {
        let status = self
            .zygote
            .exit_status(self.pid, Duration::from_millis(500))
            .await;
        self.finished = true;
        let how = match status {
            Some(s) if libc::WIFSIGNALED(s) => {
                let signal = libc::WTERMSIG(s);
                let name = nix::sys::signal::Signal::try_from(signal)
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_else(|_| format!("signal {signal}"));
                let hint = match signal {
                    libc::SIGKILL => {
                        " (killed from outside, perhaps by the kernel's out-of-memory killer)"
                    }
                    libc::SIGSYS => " (a system call the sandbox forbids)",
                    libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGTRAP | libc::SIGABRT => {
                        " (a crash or fatal error inside V8)"
                    }
                    _ => "",
                };
                format!("the sandbox process was killed by {name}{hint}")
            }
            Some(s) if libc::WIFEXITED(s) => format!(
                "the sandbox process exited with status {} ({why})",
                libc::WEXITSTATUS(s)
            ),
            _ => format!("the sandbox process stopped answering ({why})"),
        };
        died_error(false, false, 0, Some(how))
    }

    /// Makes sure the child is gone (it exits by itself after reporting).
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.zygote.kill(self.pid);
        }
    }
}

impl Drop for ForkedSandbox {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Answers the child's synchronous reads (the catalogue index, one server's tools).
async fn serve_sync(sync: tokio::net::UnixStream, tools: ToolBridge) {
    let (reader, mut writer) = sync.into_split();
    let mut frames = frames::reader(reader, crate::bridge::tools::MAX_NAME_BYTES + 16);
    while let Some(Ok(frame)) = frames.next().await {
        let answer = match frame.tag {
            frames::CATALOG_INDEX => tools.catalog_index(),
            frames::SERVER_TOOLS => tools.server_tools(&frame.payload),
            _ => return,
        };
        if frames::write(&mut writer, frame.tag, &[answer.as_bytes()])
            .await
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// This test binary, started as a zygote that plays one of the `fake_` tests below.
    fn fake(role: &str) -> ZygoteCommand {
        ZygoteCommand {
            program: std::env::current_exe().expect("the test binary"),
            args: vec![
                format!("engine::zygote::tests::fake_{role}").into(),
                "--exact".into(),
                "--ignored".into(),
            ],
        }
    }

    /// Whether this process was started by `Zygote::start`: fd 3 is then its control socket
    /// (run any other way, a fake does nothing).
    fn started_as_zygote() -> bool {
        let mut kind: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: reads an int option of fd 3 into our own variable.
        let read = unsafe {
            libc::getsockopt(
                CONTROL_FD,
                libc::SOL_SOCKET,
                libc::SO_TYPE,
                (&mut kind as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        read == 0 && kind == libc::SOCK_SEQPACKET
    }

    #[test]
    #[ignore = "a fake zygote, started by the tests below"]
    fn fake_failing_boot() {
        if started_as_zygote() {
            let _ = control::send(CONTROL_FD, control::BOOT_FAILED, 0, 0, b"no Pyodide here");
            std::process::exit(1);
        }
    }

    #[test]
    #[ignore = "a fake zygote, started by the tests below"]
    fn fake_killed() {
        if started_as_zygote() {
            // SAFETY: signals this process only.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }

    #[test]
    #[ignore = "a fake zygote, started by the tests below"]
    fn fake_exiting_when_ready() {
        if started_as_zygote() {
            let _ = control::send(CONTROL_FD, control::READY, 0, 0, &[]);
            std::process::exit(0);
        }
    }

    #[test]
    #[ignore = "a fake zygote, started by the tests below"]
    fn fake_refusing_forks() {
        if !started_as_zygote() {
            return;
        }
        let _ = control::send(CONTROL_FD, control::READY, 0, 0, &[]);
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reads into our own buffer; the sockets a FORK passes are discarded.
            let n = unsafe { libc::recv(CONTROL_FD, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                std::process::exit(0);
            }
            if control::parse(&buf[..n as usize]).0 == control::FORK {
                let _ = control::send(CONTROL_FD, control::FORK_FAILED, 0, libc::EAGAIN, &[]);
            }
        }
    }

    #[tokio::test]
    async fn each_way_a_zygote_fails_to_start_has_its_kind() {
        let limits = Limits::default();
        let missing = ZygoteCommand {
            program: "/nonexistent/zygote".into(),
            args: Vec::new(),
        };
        let spawn = Zygote::start(&missing, limits).await.err();
        assert!(
            matches!(&spawn, Some(EngineError::Zygote(ZygoteError::Spawn { source, .. })) if source.kind() == std::io::ErrorKind::NotFound),
            "{spawn:?}"
        );
        let failed = Zygote::start(&fake("failing_boot"), limits).await.err();
        assert!(
            matches!(&failed, Some(EngineError::Zygote(ZygoteError::Failed(words))) if words == "no Pyodide here"),
            "{failed:?}"
        );
        let killed = Zygote::start(&fake("killed"), limits).await.err();
        assert!(
            matches!(&killed, Some(EngineError::Zygote(ZygoteError::Exited { status: Some(s) })) if s.signal() == Some(libc::SIGKILL)),
            "{killed:?}"
        );
    }

    #[tokio::test]
    async fn each_way_a_fork_fails_has_its_kind() {
        let no_tools = || Arc::new(crate::bridge::NoTools);
        let zygote = Zygote::start(&fake("refusing_forks"), Limits::default())
            .await
            .expect("the fake zygote says it is ready");
        let refused = zygote.fork(no_tools(), None, None).await.err();
        assert!(
            matches!(&refused, Some(EngineError::Fork(ForkError::Fork(e))) if e.raw_os_error() == Some(libc::EAGAIN)),
            "{refused:?}"
        );

        let zygote = Zygote::start(&fake("exiting_when_ready"), Limits::default())
            .await
            .expect("the fake zygote says it is ready");
        let deadline = Instant::now() + Duration::from_secs(10);
        while zygote.is_alive() {
            assert!(Instant::now() < deadline, "the fake zygote is still there");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let gone = zygote.fork(no_tools(), None, None).await.err();
        assert!(
            matches!(&gone, Some(EngineError::Fork(ForkError::ZygoteExited))),
            "{gone:?}"
        );
    }
}
