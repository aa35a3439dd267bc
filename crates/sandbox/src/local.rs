//! local — the second executor (`--executor local`): each script runs in a fresh host CPython
//! process, as the user, with the user's files, network and installed packages. **Not a sandbox.**
//!
//! Beside the engine, and ending the same way, in an [`Outcome`] shaped by the engine's own
//! `shape_outcome`: the same Python half (`js/codemode.py`, run unchanged by `js/host_local.py`,
//! which stands in for Pyodide), the same [`ToolBridge`] (catalogue versions, keyword checks,
//! the call cap, argument sizes), the same output cap ([`SharedOutput`]) and timeout messages.
//!
//! ```text
//! LocalSandbox ──spawn──▶ python3 -u -c BOOT   (own process group; stdin /dev/null)
//!      ▲  stdout, stderr pipes ◀── what the script (and every process it starts) prints
//!      └─ fd 3, a Unix socket, JSON lines ──▶ catalogue, tools, outcome
//! ```
//! **Invariant:** nothing a script starts outlives its execution in its process group: the group
//! is SIGKILLed when the outcome arrives, at the timeout, and when the execution is dropped
//! (a cancelled `execute_code`); the script's process kills its own group if our end of fd 3 closes.
//! A process that leaves the group (`setsid`) is beyond this (see the README).

use crate::bridge::memory::MemoryBudget;
use crate::bridge::{LiveOutput, SharedOutput, Stream, ToolBridge, ToolHost};
use crate::engine::{
    read_report, shape_outcome, stopped_error, EngineError, ErrorInfo, Job, Limits, Outcome,
    RunControl,
};
use futures::StreamExt;
use serde::Deserialize;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The oldest Python the local executor runs (`codemode.py` needs 3.10's syntax and `dis`).
pub const MIN_VERSION: (u32, u32) = (3, 10);

/// The host half: what Pyodide and runner.js are to codemode.py in the sandbox.
const HOST_SOURCE: &str = include_str!("../../../js/host_local.py");

/// What `python3 -c` runs: reads the first line of fd 3 and runs host_local.py from it.
const BOOT: &str = "import json,socket;_sock=socket.socket(fileno=3);_reader=_sock.makefile('rb');\
_hello=json.loads(_reader.readline());exec(compile(_hello['host'],'<codemode>','exec'),\
{'__name__':'_codemode_local','_sock':_sock,'_reader':_reader,'_hello':_hello})";

/// The longest line the script's process may send on fd 3 (a call's arguments are refused past
/// 8 MiB by the bridge; this bounds what is read before that check, and the outcome).
const MAX_MESSAGE: usize = 256 << 20;

/// Why a job with files is refused here: the local executor runs in the user's own working
/// directory, and has no `/output/` (see README, "The local executor").
pub const FILES_REFUSED: &str = "files= needs the sandbox: the local executor (--executor local) runs scripts in the server's own working directory, as its user, and writes no files there for a client; read the data from a file the script can reach, or pass it in the code";

/// After the outcome: how long the process may take to exit, and the pipes to reach their end.
const EXIT_GRACE: Duration = Duration::from_secs(2);
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The host interpreter the local executor runs scripts with, checked once at start-up.
#[derive(Debug, Clone)]
pub struct LocalPython {
    /// As given (`--python`), or `python3` from PATH.
    pub program: PathBuf,
    /// Its `sys.executable`.
    pub executable: String,
    /// `3.11.7`.
    pub version: String,
    /// Who scripts run as, and where (for the "not sandboxed" notices).
    pub user: String,
    pub host: String,
}

impl LocalPython {
    /// Checks `python` (None: `python3` on PATH): that it runs, is Python, and is at least
    /// [`MIN_VERSION`]. Every failure says which interpreter and what is wrong.
    pub async fn find(python: Option<&Path>) -> Result<LocalPython, EngineError> {
        let program = python
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("python3"));
        let named = match python {
            Some(p) => format!("--python {}", p.display()),
            None => "python3 (from PATH)".to_owned(),
        };
        let bad = |why: String| EngineError::Local(format!("{named}: {why}"));
        if let Some(path) = python {
            if path.components().count() > 1 || path.is_absolute() {
                match std::fs::metadata(path) {
                    Err(_) => return Err(bad("no such file".into())),
                    Ok(m) if m.is_dir() => return Err(bad("is a directory, not a program".into())),
                    Ok(_) => {}
                }
            }
        }
        let probe = "import sys; print(sys.version_info[0], sys.version_info[1], sys.version.split()[0]); print(sys.executable)";
        let run = tokio::process::Command::new(&program)
            .args(["-c", probe])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output =
            match tokio::time::timeout(Duration::from_secs(30), run).await {
                Err(_) => return Err(bad("did not answer within 30 s".into())),
                Ok(Err(e)) => return Err(bad(match e.kind() {
                    std::io::ErrorKind::NotFound if python.is_none() => {
                        "not found: install Python 3.10 or later, or name one with --python PATH"
                            .into()
                    }
                    std::io::ErrorKind::NotFound if program.components().count() == 1 => {
                        "not found on PATH".into()
                    }
                    std::io::ErrorKind::NotFound => "no such file".into(),
                    std::io::ErrorKind::PermissionDenied => {
                        "is not executable (permission denied)".into()
                    }
                    _ => format!("cannot run it: {e}"),
                })),
                Ok(Ok(output)) => output,
            };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut lines = stdout.lines();
        let first: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        let parsed = match first[..] {
            [major, minor, full] => major
                .parse::<u32>()
                .ok()
                .zip(minor.parse::<u32>().ok())
                .map(|v| (v, full.to_owned())),
            _ => None,
        };
        let Some(((major, minor), version)) = parsed.filter(|_| output.status.success()) else {
            let said = String::from_utf8_lossy(&output.stderr);
            let said = said.trim();
            let said: String = said.chars().take(300).collect();
            return Err(bad(format!(
                "is not a Python interpreter (asked for its version: {}{})",
                output.status,
                if said.is_empty() {
                    String::new()
                } else {
                    format!(", it said: {said}")
                }
            )));
        };
        if (major, minor) < MIN_VERSION {
            return Err(bad(format!(
                "is Python {version}; the local executor needs Python {}.{} or later",
                MIN_VERSION.0, MIN_VERSION.1
            )));
        }
        // Only an executable that exists stands for the program (an embedded or frozen Python
        // may report none).
        let executable = lines
            .next()
            .map(str::trim)
            .filter(|e| Path::new(e).is_absolute() && Path::new(e).is_file())
            .unwrap_or("")
            .to_owned();
        Ok(LocalPython {
            program,
            executable,
            version,
            user: user_name(),
            host: host_name(),
        })
    }

    /// What each script runs with: the interpreter's own `sys.executable` (so a launcher such as
    /// a pyenv shim is resolved once, at start-up, not paid per script), else the program given.
    pub fn interpreter(&self) -> &Path {
        if self.executable.is_empty() {
            &self.program
        } else {
            Path::new(&self.executable)
        }
    }

    /// The warning every notice starts with: "not sandboxed: the script runs as <user> on <host>".
    pub fn notice(&self) -> String {
        format!(
            "not sandboxed: the script runs as {} on {}",
            self.user, self.host
        )
    }

    /// The notice with the interpreter, for the start-up warning and descriptions.
    pub fn describe(&self) -> String {
        let exe = if self.executable.is_empty() {
            self.program.display().to_string()
        } else {
            self.executable.clone()
        };
        format!("host Python {} ({exe}), {}", self.version, self.notice())
    }
}

fn user_name() -> String {
    // SAFETY: getpwuid_r writes only into the buffers given; the name is copied out at once.
    unsafe {
        let uid = libc::geteuid();
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut result = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) == 0
            && !result.is_null()
            && !pwd.pw_name.is_null()
        {
            return std::ffi::CStr::from_ptr(pwd.pw_name)
                .to_string_lossy()
                .into_owned();
        }
        std::env::var("USER").unwrap_or_else(|_| format!("uid {uid}"))
    }
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok && end > 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "this machine".to_owned()
    }
}

/// One execution in a host Python process, not started until [`LocalSandbox::execute`].
pub struct LocalSandbox {
    python: Arc<LocalPython>,
    limits: Limits,
    seed: Option<u64>,
    tools: ToolBridge,
    output: SharedOutput,
}

/// What the script's process sends on fd 3.
#[derive(Deserialize)]
struct Message {
    op: String,
    #[serde(default)]
    id: u64,
    #[serde(default)]
    server: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    args: String,
    #[serde(default)]
    report: String,
}

/// The job's timeout, on a clock the tool host can pause or stop.
struct Clock {
    start: tokio::time::Instant,
    timeout: Duration,
    control: RunControl,
}

impl Clock {
    async fn expired(&self) -> Option<(String, String)> {
        self.control.expired(self.start, self.timeout).await
    }
}

/// How the conversation with the script's process ended.
enum Ended {
    Report(String),
    /// Out of (unpaused) time, or stopped by the tool host (its error).
    Stopped(Option<(String, String)>),
    Died(String),
}

impl LocalSandbox {
    pub fn new(python: Arc<LocalPython>, limits: Limits, tools: Arc<dyn ToolHost>) -> Self {
        Self {
            python,
            limits,
            seed: None,
            tools: ToolBridge::new(tools),
            output: SharedOutput::new(limits.max_output, None),
        }
    }

    pub fn set_tools(&self, tools: Arc<dyn ToolHost>) {
        self.tools.set_host(tools);
    }

    /// The job's seed (`random` and the hash seed) and live output.
    pub fn ready_for(&mut self, seed: Option<u64>, live_output: Option<LiveOutput>) {
        self.seed = seed;
        self.output = SharedOutput::new(self.limits.max_output, live_output);
    }

    /// Runs one script in a fresh process. Never fails: every problem becomes the outcome's
    /// `error`, with whatever the script printed before it. `control`'s clock is the timeout's
    /// (paused while a person is asked to approve a call).
    pub async fn execute(self, job: Job, control: RunControl) -> Outcome {
        let started = Instant::now();
        if !job.files.is_empty() {
            // The script runs in the server's own working directory, as the user: files are
            // not written there on a client's say-so.
            let refused = ErrorInfo {
                kind: "ValueError".into(),
                message: FILES_REFUSED.into(),
                traceback: String::new(),
            };
            return shape_outcome(
                Err(refused),
                self.output.captured(),
                Vec::new(),
                self.limits.max_output,
                &job.outputs,
                started,
            );
        }
        let timeout = job.timeout.unwrap_or(self.limits.timeout);
        let clock = Clock {
            start: tokio::time::Instant::now(),
            timeout,
            control,
        };
        let report = match self.run(&job, &clock).await {
            Ok(Ended::Report(json)) => read_report(&json),
            Ok(Ended::Stopped(stop)) => Err(stopped_error(stop, timeout)),
            Ok(Ended::Died(why)) | Err(why) => Err(ErrorInfo {
                kind: "RuntimeError".into(),
                message: format!(
                    "the local Python process ended without finishing the script: {why}"
                ),
                traceback: String::new(),
            }),
        };
        let tool_calls = self.tools.take_job_calls();
        shape_outcome(
            report,
            self.output.captured(),
            tool_calls,
            self.limits.max_output,
            &job.outputs,
            started,
        )
    }

    async fn run(&self, job: &Job, clock: &Clock) -> Result<Ended, String> {
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|e| format!("no socket for it: {e}"))?;
        let mut command = tokio::process::Command::new(self.python.interpreter());
        command
            .args(["-u", "-c", BOOT])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            // Ours, not the script's: a server's bearer token.
            .env_remove("MCP_CODE_MODE_AUTH_TOKEN");
        if let Some(seed) = self.seed {
            // Python's hash seed must be in 0..=4294967295.
            command.env("PYTHONHASHSEED", (seed % 4_294_967_296).to_string());
        }
        let fd = theirs.as_raw_fd();
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec, only async-signal-safe calls (dup2, fcntl, getppid), no
        // allocation.
        unsafe {
            command.pre_exec(move || {
                if fd == 3 {
                    if libc::fcntl(3, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, 3) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // No PR_SET_PDEATHSIG: if we die (even by SIGKILL) the script's process sees its
                // fd 3 close and kills its whole group, which a death signal to it alone would
                // leave running. We may have died already, before that socket was ours to close:
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| {
            format!(
                "could not start {}: {e}",
                self.python.interpreter().display()
            )
        })?;
        drop(theirs);
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let group = Group(pgid);
        let readers = [
            child
                .stdout
                .take()
                .map(|s| spawn_reader(s, Stream::Stdout, self.output.clone())),
            child
                .stderr
                .take()
                .map(|s| spawn_reader(s, Stream::Stderr, self.output.clone())),
        ];

        let ended = self.converse(ours, job, clock).await;
        // Everything the script started in its group goes with it: killed before the leader is
        // reaped, so the group's id cannot have been reused.
        group.kill();
        let status = tokio::time::timeout(EXIT_GRACE, child.wait()).await;
        let ended = match (ended, status) {
            (Ended::Died(_), Ok(Ok(status))) => Ended::Died(describe_exit(status)),
            (ended, _) => ended,
        };
        group.disarm();
        reap_group(pgid, Duration::from_millis(200)).await;
        for reader in readers.into_iter().flatten() {
            let _ = tokio::time::timeout(DRAIN_GRACE, reader).await;
        }
        Ok(ended)
    }

    /// Hands over the job, then serves the process until it reports, dies or runs out of time.
    async fn converse(
        &self,
        socket: std::os::unix::net::UnixStream,
        job: &Job,
        clock: &Clock,
    ) -> Ended {
        let socket = match socket
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixStream::from_std(socket))
        {
            Ok(socket) => socket,
            Err(e) => return Ended::Died(format!("its socket failed: {e}")),
        };
        let (reader, mut writer) = socket.into_split();
        let hello = serde_json::json!({
            "host": HOST_SOURCE,
            "codemode": crate::assets::js_file("codemode.py").unwrap_or_default(),
            "job": job,
            "seed": self.seed,
        });
        let mut hello = hello.to_string();
        hello.push('\n');
        let mut lines = tokio_util::codec::FramedRead::new(
            reader,
            tokio_util::codec::LinesCodec::new_with_max_length(MAX_MESSAGE),
        );
        let sent = tokio::select! {
            sent = writer.write_all(hello.as_bytes()) => sent,
            stop = clock.expired() => return Ended::Stopped(stop),
        };
        if let Err(e) = sent {
            return Ended::Died(format!("could not send it the job: {e}"));
        }
        let budget = MemoryBudget::new((self.limits.memory_mb as usize) << 20);
        let mut calls = tokio::task::JoinSet::new();
        loop {
            let reply: (u64, String) = tokio::select! {
                line = lines.next() => {
                    let line = match line {
                        Some(Ok(line)) => line,
                        None => return Ended::Died("it closed its socket".into()),
                        Some(Err(e)) => return Ended::Died(format!("it sent a bad message: {e}")),
                    };
                    let message: Message = match serde_json::from_str(&line) {
                        Ok(m) => m,
                        Err(e) => return Ended::Died(format!("it sent a bad message: {e}")),
                    };
                    match message.op.as_str() {
                        "outcome" => return Ended::Report(message.report),
                        "catalog" => (message.id, self.tools.catalog_index()),
                        "server_tools" => (message.id, self.tools.server_tools(message.server.as_bytes())),
                        "ready" => {
                            let bridge = self.tools.clone();
                            calls.spawn(async move {
                                (message.id, bridge.wait_ready(message.server.as_bytes()).await)
                            });
                            continue;
                        }
                        "call" => {
                            let (bridge, budget) = (self.tools.clone(), budget.clone());
                            calls.spawn(async move {
                                let envelope = bridge
                                    .call_envelope(message.server.as_bytes(), message.tool.as_bytes(), message.args.as_bytes(), &budget)
                                    .await;
                                (message.id, envelope)
                            });
                            continue;
                        }
                        other => return Ended::Died(format!("it sent an unknown request {other:?}")),
                    }
                }
                Some(done) = calls.join_next(), if !calls.is_empty() => match done {
                    Ok(reply) => reply,
                    Err(e) => return Ended::Died(format!("a tool call failed inside mcp-code-mode: {e}")),
                },
                stop = clock.expired() => return Ended::Stopped(stop),
            };
            let mut line = serde_json::json!({"id": reply.0, "value": reply.1}).to_string();
            line.push('\n');
            let written = tokio::select! {
                written = writer.write_all(line.as_bytes()) => written,
                stop = clock.expired() => return Ended::Stopped(stop),
            };
            if let Err(e) = written {
                return Ended::Died(format!("could not answer it: {e}"));
            }
        }
    }
}

/// Copies one of the process's pipes into the output (past the cap, counted and dropped) until
/// every process holding it has ended.
fn spawn_reader(
    mut pipe: impl AsyncRead + Unpin + Send + 'static,
    stream: Stream,
    output: SharedOutput,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => output.write(stream, &buf[..n]),
            }
        }
    })
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with status {code}"),
        (None, Some(signal)) => format!("it was killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// The script's process group, SIGKILLed on drop unless disarmed (a cancelled execution).
struct Group(i32);

impl Group {
    fn kill(&self) {
        if self.0 > 1 {
            // SAFETY: killpg only sends a signal; a group already gone yields ESRCH.
            unsafe {
                libc::killpg(self.0, libc::SIGKILL);
            }
        }
    }

    /// Once its leader is reaped, the group's id may be reused: never signal it again.
    fn disarm(mut self) {
        self.0 = 0;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.0 > 1 {
            self.kill();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(reap_group(self.0, Duration::from_secs(1)));
            }
        }
    }
}

/// Reaps the processes of group `pgid` that became our children (the product's process is a
/// child subreaper: a script's orphans are reparented to it), until none is left or `within`
/// passes.
async fn reap_group(pgid: i32, within: Duration) {
    if pgid <= 1 {
        return;
    }
    let until = Instant::now() + within;
    loop {
        // SAFETY: waitpid on our own children in this group; WNOHANG never blocks.
        let reaped = unsafe { libc::waitpid(-pgid, std::ptr::null_mut(), libc::WNOHANG) };
        if reaped > 0 {
            continue;
        }
        if reaped < 0 || Instant::now() >= until {
            return; // ECHILD: none of ours is left in the group
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
