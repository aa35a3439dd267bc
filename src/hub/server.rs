//! server — one downstream server's life: spawn the process (or reach the URL), connect, list
//! tools, watch it, and restart it with backoff when it dies.
//!
//! Each enabled server has one supervisor task that owns its connection. Everyone else sees the
//! server only through its [`Phase`] (a `watch` channel), so a call never blocks on the supervisor.
//!
//! **Invariant:** every child runs in its own process group, recorded in [`Shared::groups`] from
//! spawn until the whole group is killed, so shutdown (and `Drop`) can kill what the server itself
//! started (e.g. `npx` → `node`).

use super::auth::OAuthError;
use super::remote::HeaderError;
use super::shape::{printable, tool_specs};
use super::LoginError;
use crate::bridge::ToolSpec;
use crate::config::{HttpServer, ServerConfig, Transport};
use futures::future::{Fuse, FusedFuture, FutureExt};
use parking_lot::Mutex;
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, Peer, QuitReason, RoleClient, ServiceExt};
use rmcp::transport::auth::AuthClient;
use rmcp::ClientHandler;
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::{oneshot, watch, Notify};
use tokio_util::sync::CancellationToken;

/// Longest a server may take from spawn to a listed catalogue.
pub(crate) const INIT_TIMEOUT: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A server that stayed up this long is healthy again: its next crash restarts it quickly.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How long a server gets to exit by itself once its stdin is closed, before SIGTERM.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);
const STDERR_TAIL_LINES: usize = 5;
/// A server's tools are listed again at most this often, however often it says they changed.
const RELIST_INTERVAL: Duration = Duration::from_secs(1);
/// Longest stderr line a server gets logged; the rest of a longer one is dropped.
const MAX_STDERR_LINE: usize = 16 * 1024;

/// State shared by the hub and all supervisors (never the hub itself, so the hub can drop).
pub(crate) struct Shared {
    pub version: watch::Sender<u64>,
    pub shutdown: CancellationToken,
    /// Process groups that may still have members; emptied as each group is killed.
    pub groups: Mutex<HashSet<i32>>,
    pub groups_changed: Notify,
}

impl Shared {
    pub fn new() -> Self {
        Self {
            version: watch::Sender::new(0),
            shutdown: CancellationToken::new(),
            groups: Mutex::new(HashSet::new()),
            groups_changed: Notify::new(),
        }
    }

    /// Tells subscribers the catalogue (the set of running servers or their tools) changed.
    pub fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Changes a server's phase and the catalogue version as one step: whoever sees the new
    /// phase and then reads the version sees it bumped (the version's lock is held meanwhile).
    pub fn set_and_bump(&self, slot: &Slot, phase: Phase) {
        self.version.send_modify(|v| {
            slot.set(phase);
            *v += 1;
        });
    }

    pub fn live_groups(&self) -> Vec<i32> {
        self.groups.lock().iter().copied().collect()
    }

    /// SIGKILLs every group still recorded, and every escapee: the last resort of shutdown and
    /// `Drop`.
    pub fn kill_all_groups(&self) {
        for pgid in self.groups.lock().drain() {
            kill_group(pgid, libc::SIGKILL);
        }
        kill_escapees();
        self.groups_changed.notify_waiters();
    }
}

/// Kills (with their groups) and reaps our children that left our session: a server's
/// descendant that called `setsid` escapes its process group, and, its parent gone, is
/// reparented to us because the cli makes this process a child subreaper
/// (`PR_SET_CHILD_SUBREAPER`). Without the subreaper it goes to init, beyond our reach.
fn kill_escapees() {
    // SAFETY: getpid/getsid only read our own ids.
    let (ours, our_session) = unsafe { (libc::getpid(), libc::getsid(0)) };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses.
        let Some(fields) = stat.rsplit_once(") ").map(|(_, rest)| rest) else {
            continue;
        };
        let fields: Vec<&str> = fields.split_whitespace().collect();
        let (Some(ppid), Some(session)) = (
            fields.get(1).and_then(|f| f.parse::<i32>().ok()),
            fields.get(3).and_then(|f| f.parse::<i32>().ok()),
        ) else {
            continue;
        };
        if ppid == ours && session != our_session {
            tracing::warn!("killing process {pid}: a downstream server's descendant that left its process group");
            kill_group(pid, libc::SIGKILL);
            // SAFETY: kill and waitpid act on our own child, by pid.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            // Reaped so no zombie is left; bounded, in case it is stuck in the kernel.
            for _ in 0..100 {
                // SAFETY: as above.
                if unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } != 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

fn kill_group(pgid: i32, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: killpg only sends a signal; a group that is already gone yields ESRCH.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// One server as the rest of the hub sees it.
pub(crate) struct Slot {
    pub config: ServerConfig,
    pub phase: watch::Sender<Phase>,
    refresh: Arc<Notify>,
    /// A remote server's requests for a wider OAuth scope.
    pub step_up: StepUp,
}

#[derive(Clone)]
pub(crate) enum Phase {
    Disabled,
    /// A start is underway; `previous` is why the last attempt failed, if one did.
    Starting {
        previous: Option<String>,
    },
    Running(Arc<Live>),
    /// Not running; `retry_at` is when the next start begins (`None`: never, the hub stopped).
    Down {
        reason: String,
        retry_at: Option<Instant>,
    },
}

/// A connected server.
pub(crate) struct Live {
    pub peer: Peer<RoleClient>,
    pub tools: Arc<Vec<ToolSpec>>,
    pub pid: Option<u32>,
}

impl Slot {
    pub fn new(config: ServerConfig) -> Self {
        let phase = if config.disabled {
            Phase::Disabled
        } else {
            Phase::Starting { previous: None }
        };
        Self {
            config,
            phase: watch::Sender::new(phase),
            refresh: Arc::new(Notify::new()),
            step_up: StepUp::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    fn set(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }
}

/// "restarting in 2 s" / "restarting now", for messages about a server that is down.
pub(crate) fn retry_text(retry_at: Option<Instant>) -> String {
    match retry_at {
        None => "it will not be restarted".to_owned(),
        Some(at) => {
            let left = at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                "restarting now".to_owned()
            } else {
                format!("restarting in {}", seconds(left))
            }
        }
    }
}

pub(crate) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 && s.fract() > 0.05 {
        format!("{s:.1} s")
    } else {
        format!("{} s", s.round())
    }
}

/// Runs one server until the hub shuts down.
pub(crate) async fn supervise(slot: Arc<Slot>, shared: Arc<Shared>) {
    if let Transport::Unsupported { reason } = &slot.config.transport {
        tracing::warn!("MCP server '{}' cannot be started: {reason}", slot.name());
        shared.set_and_bump(
            &slot,
            Phase::Down {
                reason: reason.clone(),
                retry_at: None,
            },
        );
        return;
    }
    let mut backoff = FIRST_BACKOFF;
    let shutdown = shared.shutdown.clone();
    let name = slot.name().to_owned();
    let mut previous = None;
    let mut last_logged: Option<String> = None;
    let mut first_attempt = true;
    loop {
        slot.set(Phase::Starting {
            previous: previous.take(),
        });
        let started = tokio::select! {
            started = start(&slot, &shared) => started,
            _ = shutdown.cancelled() => break,
        };
        let mut was_running = false;
        let reason = match started {
            Ok(instance) => {
                was_running = true;
                let up_since = Instant::now();
                tracing::info!(
                    "MCP server '{name}' is running with {} tools",
                    instance.live.tools.len()
                );
                shared.set_and_bump(&slot, Phase::Running(instance.live.clone()));
                let (ended, instance) = watch_running(&slot, &shared, instance).await;
                instance.stop().await;
                match ended {
                    Ended::Shutdown => break,
                    Ended::StepUp => {
                        tracing::info!(
                            "MCP server '{name}' wants a wider OAuth scope for a call; reconnecting to sign in for it"
                        );
                        continue;
                    }
                    Ended::Down(reason) => {
                        if up_since.elapsed() >= STABLE_AFTER {
                            backoff = FIRST_BACKOFF;
                        }
                        reason
                    }
                }
            }
            Err(failure) => failure.status(),
        };
        // Reasons are verb phrases ("exited with status 1"): messages read "it exited ...".
        let reason = format!("it {reason}");
        let delay = backoff;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        // The same failure every 30 s is noise after the first report.
        if last_logged.as_deref() == Some(reason.as_str()) {
            tracing::debug!(
                "MCP server '{name}' is still down: {reason}; restarting in {}",
                seconds(delay)
            );
        } else {
            tracing::warn!(
                "MCP server '{name}' is down: {reason}; restarting in {}",
                seconds(delay)
            );
            last_logged = Some(reason.clone());
        }
        let down = Phase::Down {
            reason: reason.clone(),
            retry_at: Some(Instant::now() + delay),
        };
        // A server that left the catalogue changes it, and so does the end of the first attempt
        // (its tools' description turns from "starting" to why it is down); a retry loop does not.
        if was_running || first_attempt {
            shared.set_and_bump(&slot, down);
        } else {
            slot.set(down);
        }
        previous = Some(reason);
        first_attempt = false;
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    slot.set(Phase::Down {
        reason: "it was stopped: mcp-code-mode is shutting down".to_owned(),
        retry_at: None,
    });
    shared.bump();
}

enum Ended {
    Shutdown,
    Down(String),
    /// A call needs a wider OAuth scope: start again at once, signing in for it.
    StepUp,
}

/// The connection's service loop; fused because it is awaited in a loop and again at stop.
type QuitFuture =
    Fuse<Pin<Box<dyn Future<Output = Result<QuitReason, tokio::task::JoinError>> + Send>>>;

/// A started server: its connection, its process (none for a remote server), and how to stop
/// both.
struct Instance {
    live: Arc<Live>,
    quit: QuitFuture,
    /// Cancelling it closes the connection (our end of its stdin, or the HTTP session).
    connection: CancellationToken,
    process: Option<Process>,
}

/// The child process, owned by a watcher task; this handle only observes and kills it.
struct Process {
    /// How the process ended, once it has.
    exited: watch::Receiver<Option<Exit>>,
    /// Cancelled: the watcher kills the group. Also cancelled when this handle drops.
    kill: tokio_util::sync::DropGuard,
    kill_token: CancellationToken,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_done: Option<oneshot::Receiver<()>>,
}

impl Process {
    async fn wait_exit(&mut self, limit: Duration) -> Option<Exit> {
        let waited = tokio::time::timeout(limit, self.exited.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(exit)) => exit.clone(),
            _ => None,
        }
    }

    /// Kills the group (SIGTERM, then SIGKILL) and waits until the watcher has reaped it.
    async fn kill_and_wait(&mut self) -> Option<Exit> {
        self.kill_token.cancel();
        self.wait_exit(TERM_GRACE + Duration::from_secs(3)).await
    }

    /// The last lines the server wrote to stderr, waiting briefly for the pipe to drain: when a
    /// server dies, its last words are usually the reason.
    async fn stderr_tail(&mut self) -> Option<String> {
        if let Some(done) = self.stderr_done.take() {
            let _ = tokio::time::timeout(Duration::from_millis(500), done).await;
        }
        let tail = self.stderr_tail.lock();
        (!tail.is_empty()).then(|| tail.iter().cloned().collect::<Vec<_>>().join(" | "))
    }

    /// "exited with status 1 (its last stderr: ...)".
    async fn describe_exit(&mut self, exit: Exit) -> String {
        if !exit.stderr_relevant {
            return exit.text;
        }
        match self.stderr_tail().await {
            Some(tail) => format!("{} (its last stderr: {tail})", exit.text),
            None => exit.text,
        }
    }
}

impl Instance {
    /// Closes the connection, lets the server exit on its own briefly, then kills its group.
    async fn stop(mut self) {
        self.connection.cancel();
        if !self.quit.is_terminated() {
            let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.quit).await;
        }
        let Some(mut process) = self.process else {
            return;
        };
        if process.wait_exit(EXIT_GRACE).await.is_none() {
            process.kill_and_wait().await;
        }
        // The group may outlive its leader; the watcher kills it once the leader is reaped.
        drop(process.kill);
    }
}

async fn watch_running(slot: &Slot, shared: &Shared, mut instance: Instance) -> (Ended, Instance) {
    let name = slot.name();
    enum Event {
        Shutdown,
        Closed,
        Exited(Option<Exit>),
        ToolsChanged,
        StepUp,
    }
    // When the tools may next be listed again (see RELIST_INTERVAL).
    let mut next_listing = tokio::time::Instant::now();
    let ended = loop {
        let exited = async {
            match instance.process.as_mut() {
                Some(process) => process
                    .exited
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|e| e.clone()),
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            _ = shared.shutdown.cancelled() => Event::Shutdown,
            _ = &mut instance.quit => Event::Closed,
            exit = exited => Event::Exited(exit),
            _ = slot.refresh.notified() => Event::ToolsChanged,
            _ = slot.step_up.requested.notified() => Event::StepUp,
        };
        match event {
            Event::Shutdown => break Ended::Shutdown,
            // A left-over wake-up from a step-up the last start took care of is ignored.
            Event::StepUp if slot.step_up.is_pending() => break Ended::StepUp,
            Event::StepUp => {}
            Event::Closed => {
                // The connection closed, usually because the process exited: name how, if it did.
                let reason = match instance.process.as_mut() {
                    None => {
                        "closed the connection (its HTTP session ended or could not be resumed)"
                            .to_owned()
                    }
                    Some(process) => match process.wait_exit(Duration::from_secs(2)).await {
                        Some(exit) => process.describe_exit(exit).await,
                        None => "closed its connection (its stdout) while still running".to_owned(),
                    },
                };
                break Ended::Down(reason);
            }
            Event::Exited(exit) => {
                let reason = match (exit, instance.process.as_mut()) {
                    (Some(exit), Some(process)) => process.describe_exit(exit).await,
                    _ => "exited".to_owned(),
                };
                break Ended::Down(reason);
            }
            Event::ToolsChanged => {
                // Changes announced meanwhile are taken in by this one listing.
                tokio::select! {
                    _ = tokio::time::sleep_until(next_listing) => {}
                    _ = shared.shutdown.cancelled() => break Ended::Shutdown,
                }
                refresh_tools(slot, shared, &mut instance).await;
                next_listing = tokio::time::Instant::now() + RELIST_INTERVAL;
            }
        }
    };
    tracing::debug!("MCP server '{name}' supervisor leaves the running state");
    (ended, instance)
}

/// Re-lists the tools after `notifications/tools/list_changed`.
async fn refresh_tools(slot: &Slot, shared: &Shared, instance: &mut Instance) {
    let name = slot.name();
    let listed = tokio::time::timeout(INIT_TIMEOUT, instance.live.peer.list_all_tools()).await;
    let tools: Vec<ToolSpec> = match listed {
        Ok(Ok(tools)) => tool_specs(&tools),
        Ok(Err(e)) => {
            tracing::warn!("MCP server '{name}' changed its tools but listing them failed: {e}");
            return;
        }
        Err(_) => {
            tracing::warn!(
                "MCP server '{name}' changed its tools but did not list them within {}",
                seconds(INIT_TIMEOUT)
            );
            return;
        }
    };
    if tools == *instance.live.tools {
        return;
    }
    tracing::info!("MCP server '{name}' now has {} tools", tools.len());
    instance.live = Arc::new(Live {
        peer: instance.live.peer.clone(),
        tools: Arc::new(tools),
        pid: instance.live.pid,
    });
    shared.set_and_bump(slot, Phase::Running(instance.live.clone()));
}

/// Our side of the connection: it only needs to hear that the tool list changed.
#[derive(Clone)]
struct HubClient {
    refresh: Arc<Notify>,
}

impl ClientHandler for HubClient {
    fn get_info(&self) -> ClientConfig {
        // The handshake every server we meet speaks (2026-07-28 servers also accept it).
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcp-code-mode", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Only signal: the supervisor lists the tools itself, since listing from inside the
        // notification handler could wait on the very loop that is running this handler.
        self.refresh.notify_one();
    }
}

/// Why a server did not start. Its words follow "it" in the server's status ("it failed to start:
/// ..."), with its causes and what its process left (see [`StartError::status`]).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config names a transport there is no client for (the config's words say which).
    #[error("{0}")]
    Unsupported(String),
    #[error("failed to start: its working directory {} does not exist (\"cwd\" in the config)", .0.display())]
    NoWorkingDir(PathBuf),
    #[error(
        "failed to start: command '{0}' was not found (check \"command\" in the config and PATH)"
    )]
    CommandNotFound(String),
    #[error("failed to start: command '{0}' is not executable (permission denied)")]
    NotExecutable(String),
    /// The system would not run the command for another reason.
    #[error("failed to start: cannot run '{command}'")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to start: its stdio pipes were not created")]
    NoPipes,
    /// The process started but did not become a working MCP server. How it ended (a verb
    /// phrase, "exited with status 1") and its last stderr lines, which usually say why, are
    /// told after the cause.
    #[error("failed to start")]
    Init {
        #[source]
        cause: InitError,
        exit: Option<String>,
        stderr: Option<String>,
    },
    #[error("failed to start: cannot make an HTTP client")]
    HttpClient(#[source] reqwest::Error),
    /// No token could be had without a person: the client-credentials grant, the token file.
    #[error("failed to start")]
    OAuth(#[source] OAuthError),
    /// Signing a person in did not succeed; `before` is why the connection that asked for it
    /// failed.
    #[error("failed to start: {}signing in with OAuth did not succeed", .before.as_ref().map(|b| format!("{b}; ")).unwrap_or_default())]
    SignIn {
        before: Option<ConnectError>,
        #[source]
        source: OAuthError,
    },
    /// Connecting failed (after a sign-in, when `after_sign_in`).
    #[error("failed to start{}", signed_in_words(*.after_sign_in))]
    Connect {
        #[source]
        cause: ConnectError,
        after_sign_in: bool,
    },
    /// The token lacks a scope the server wants, and a sign-in for that scope was had already.
    #[error("failed to start{}: {cause} (signing in again for that scope was tried and did not help)", signed_in_words(*.after_sign_in))]
    ScopeNotGranted {
        cause: ConnectError,
        after_sign_in: bool,
    },
}

fn signed_in_words(after: bool) -> &'static str {
    if after {
        " after signing in"
    } else {
        ""
    }
}

impl StartError {
    /// What the server's status says after "it": the error and its causes (see
    /// [`super::error_words`]), then how its process ended and its last stderr lines.
    pub fn status(&self) -> String {
        let mut words = super::error_words(self);
        if let StartError::Init { exit, stderr, .. } = self {
            if let Some(exit) = exit {
                words.push_str(&format!("; it {exit}"));
            }
            if let Some(tail) = stderr {
                words.push_str(&format!(" (its last stderr: {tail})"));
            }
        }
        words
    }
}

/// Why a local server's process, once running, did not become a working MCP server. rmcp's
/// errors are boxed: one may hold a whole server message.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("the MCP handshake failed")]
    Handshake(#[source] Box<rmcp::service::ClientInitializeError>),
    #[error("listing its tools failed")]
    ListTools(#[source] Box<rmcp::ServiceError>),
    /// It ended before it was ready ("exited with status 1").
    #[error("{0} during initialization")]
    Exited(String),
    #[error("did not finish initializing within {}", seconds(*.0))]
    Timeout(Duration),
}

/// Why connecting to a remote server failed. rmcp's error is not kept as a source: its words
/// name the URL it was sending to, query (a key) and all; `message` is drawn from its chain by
/// [`super::remote::describe_failure`], which names the cause and shows URLs without a query.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The connection or the MCP handshake failed.
    #[error("{message}")]
    Handshake {
        message: String,
        /// It answered 401: a token would help.
        auth_required: bool,
        /// Its `WWW-Authenticate`, where OAuth discovery starts.
        challenge: Option<String>,
    },
    /// Connected, but listing its tools failed.
    #[error("listing its tools failed: {message}")]
    ListTools {
        message: String,
        auth_required: bool,
        challenge: Option<String>,
    },
    /// `url` is shown without its query.
    #[error("{url} did not finish initializing within {}", seconds(*.after))]
    Timeout { url: String, after: Duration },
}

impl ConnectError {
    fn of(
        name: &str,
        server: &HttpServer,
        e: &(dyn std::error::Error + 'static),
        auth_required: bool,
        challenge: Option<&str>,
        listing: bool,
    ) -> Self {
        let message = super::remote::describe_failure(name, server, e, auth_required);
        let challenge = challenge.map(str::to_owned);
        if listing {
            ConnectError::ListTools {
                message,
                auth_required,
                challenge,
            }
        } else {
            ConnectError::Handshake {
                message,
                auth_required,
                challenge,
            }
        }
    }

    /// It answered 401: a token would help.
    pub fn auth_required(&self) -> bool {
        match self {
            ConnectError::Handshake { auth_required, .. }
            | ConnectError::ListTools { auth_required, .. } => *auth_required,
            ConnectError::Header(_) | ConnectError::Timeout { .. } => false,
        }
    }

    /// Its `WWW-Authenticate`, where OAuth discovery starts.
    pub fn challenge(&self) -> Option<&str> {
        match self {
            ConnectError::Handshake { challenge, .. }
            | ConnectError::ListTools { challenge, .. } => challenge.as_deref(),
            ConnectError::Header(_) | ConnectError::Timeout { .. } => None,
        }
    }
}

/// Connects (spawning the process of a local server) and lists the tools, within
/// [`INIT_TIMEOUT`].
async fn start(slot: &Slot, shared: &Arc<Shared>) -> Result<Instance, StartError> {
    match &slot.config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let spawned = spawn(
                &slot.config.name,
                command,
                args,
                env,
                cwd.as_deref(),
                shared,
            )?;
            start_local(slot, spawned).await
        }
        Transport::Http(server) => start_remote(slot, server).await,
        Transport::Unsupported { reason } => Err(StartError::Unsupported(reason.clone())),
    }
}

async fn start_local(slot: &Slot, spawned: Spawned) -> Result<Instance, StartError> {
    let (mut process, stdout, stdin, pid) = spawned;
    let connection = CancellationToken::new();
    let handler = HubClient {
        refresh: slot.refresh.clone(),
    };
    let connect = async {
        let guarded = super::wire::guard(slot.name(), stdout, stdin);
        let service = handler
            .serve_with_ct(guarded, connection.clone())
            .await
            .map_err(|e| InitError::Handshake(e.into()))?;
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| InitError::ListTools(e.into()))?;
        Ok::<_, InitError>((service, tools))
    };
    let outcome = tokio::select! {
        // An exit is the cause, whatever the connection it closed said meanwhile.
        biased;
        exit = process.exited.wait_for(Option::is_some) => {
            let exit = exit.ok().and_then(|e| e.clone()).map(|e| e.text);
            Ok(Err(InitError::Exited(exit.unwrap_or_else(|| "exited".to_owned()))))
        }
        outcome = tokio::time::timeout(INIT_TIMEOUT, connect) => outcome,
    };
    let cause = match outcome {
        Ok(Ok((service, tools))) => {
            return Ok(instance(service, &tools, pid, connection, Some(process)))
        }
        Ok(Err(cause)) => cause,
        Err(_) => InitError::Timeout(INIT_TIMEOUT),
    };
    connection.cancel();
    // The process is probably dead already, and how it died says why (unless that is the cause
    // already); if not, it is hung or broken: kill it (and do not report our own signal as its
    // fault).
    let exit = match process.wait_exit(Duration::from_millis(300)).await {
        Some(exit) => Some(exit.text),
        None => {
            process.kill_and_wait().await;
            None
        }
    }
    .filter(|text| !matches!(&cause, InitError::Exited(said) if said == text));
    let stderr = process.stderr_tail().await;
    Err(StartError::Init {
        cause,
        exit,
        stderr,
    })
}

/// Connects to a server over streamable HTTP and lists its tools, with a token if it needs one:
/// from the client-credentials grant or an earlier sign-in, else, when it answers 401, by
/// signing a person in (auth.rs).
async fn start_remote(slot: &Slot, server: &HttpServer) -> Result<Instance, StartError> {
    let name = slot.name();
    let http = super::remote::http_client(slot.config.timeout).map_err(StartError::HttpClient)?;
    let guarded = super::remote::Guarded::new(name, http.clone());
    let mut token = super::auth::without_person(name, server, &http)
        .await
        .map_err(StartError::OAuth)?;
    let had_token = token.is_some();
    // A person can sign in only where a token is not configured some other way.
    let configured = server.oauth.client_credentials
        || server
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"));
    // A call refused for lack of scope ended the last connection: sign in for that scope now.
    // (Taken either way: a configured token cannot be widened by signing in, and a challenge
    // taken counts as tried, so the call that asked gets its error at once next time.)
    let pending = slot.step_up.take_pending();
    let mut sign_in_for: Option<Option<String>> = if configured { None } else { pending.map(Some) };
    let mut signed_in = 0;
    let mut last_failure: Option<ConnectError> = None;
    loop {
        if let Some(challenge) = sign_in_for.take() {
            signed_in += 1;
            let manager = super::auth::sign_in(name, server, challenge.as_deref(), &http)
                .await
                .map_err(|source| StartError::SignIn {
                    before: last_failure.take(),
                    source,
                })?;
            token = Some(manager);
        }
        let connected = match token.take() {
            Some(manager) => {
                connect_remote(slot, server, AuthClient::new(guarded.clone(), manager)).await
            }
            None => connect_remote(slot, server, guarded.clone()).await,
        };
        let failure = match connected {
            Ok(instance) => return Ok(instance),
            Err(failure) => failure,
        };
        let after_sign_in = signed_in > 0;
        if configured || signed_in >= MAX_SIGN_INS {
            return Err(StartError::Connect {
                cause: failure,
                after_sign_in,
            });
        }
        if failure.auth_required() {
            if signed_in == 0 && had_token {
                tracing::warn!(
                    "MCP server '{name}' refused the saved OAuth token; signing in again"
                );
            }
            sign_in_for = Some(failure.challenge().map(str::to_owned));
        } else if let Some(challenge) = failure.challenge().filter(|c| is_insufficient_scope(c)) {
            // Step-up: a token without a scope the server wants. Asking twice for the same
            // scope would only ask the person again for what did not work.
            if !slot.step_up.first_time(challenge) {
                return Err(StartError::ScopeNotGranted {
                    cause: failure,
                    after_sign_in,
                });
            }
            tracing::info!("MCP server '{name}' wants a wider OAuth scope; signing in for it");
            sign_in_for = Some(Some(challenge.to_owned()));
        } else {
            return Err(StartError::Connect {
                cause: failure,
                after_sign_in,
            });
        }
        last_failure = Some(failure);
    }
}

/// Sign-ins in one start: the first and one step-up to a wider scope (the conformance suite's
/// scope-retry-limit scenario allows at most three).
const MAX_SIGN_INS: u32 = 2;

/// Whether a `WWW-Authenticate` challenge is a 403's `insufficient_scope` (RFC 6750 §3.1).
pub(crate) fn is_insufficient_scope(challenge: &str) -> bool {
    challenge.contains("insufficient_scope")
}

/// The scope a challenge asks for, as words for a message (`scope="a b"` → `scope a b`).
pub(crate) fn wanted_scope(challenge: &str) -> String {
    let scope = challenge
        .split("scope=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next());
    match scope {
        Some(scope) if !scope.is_empty() => {
            format!("it asks for scope {}", crate::text::shorten(scope, 200))
        }
        _ => "the server did not say which".to_owned(),
    }
}

/// What a remote server's refusals for lack of scope have asked for: the one waiting for the next
/// start to sign in for it, and those signed in for already (never asked for twice).
#[derive(Default)]
pub(crate) struct StepUp {
    pending: parking_lot::Mutex<Option<String>>,
    tried: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Wakes the running connection's watcher, which ends it so the next start signs in: rmcp
    /// keeps a connection open after a 403 on one request.
    requested: Notify,
}

impl StepUp {
    /// A call was refused with `challenge`: ends the connection so the next start signs in for
    /// it. False if that scope was signed in for already (asking again would not help).
    pub fn note(&self, challenge: &str) -> bool {
        if self.tried.lock().contains(challenge) {
            return false;
        }
        *self.pending.lock() = Some(challenge.to_owned());
        self.requested.notify_one();
        true
    }

    fn is_pending(&self) -> bool {
        self.pending.lock().is_some()
    }

    fn take_pending(&self) -> Option<String> {
        let challenge = self.pending.lock().take()?;
        self.first_time(&challenge).then_some(challenge)
    }

    fn first_time(&self, challenge: &str) -> bool {
        self.tried.lock().insert(challenge.to_owned())
    }
}

/// `mcp-code-mode login`: signs in to the remote server `config` ahead of time (or checks the
/// client-credentials grant) and lists its tools with the token. Says what it did.
pub(crate) async fn login(config: &ServerConfig) -> Result<String, LoginError> {
    let Transport::Http(server) = &config.transport else {
        return Err(LoginError::NotRemote(config.name.clone()));
    };
    let slot = Slot::new(config.clone());
    let name = slot.name();
    let http = super::remote::http_client(config.timeout).map_err(LoginError::HttpClient)?;
    let guarded = super::remote::Guarded::new(name, http.clone());
    let (manager, how) = if server.oauth.client_credentials {
        let manager = super::auth::without_person(name, server, &http)
            .await?
            .ok_or(OAuthError::NoGrantToken)?;
        (manager, "the client-credentials grant works".to_owned())
    } else {
        // Asked without a token first: the 401's challenge is where discovery starts.
        let challenge = match connect_remote(&slot, server, guarded.clone()).await {
            Ok(instance) => {
                instance.stop().await;
                return Ok(format!(
                    "'{name}' does not ask for authorization: nothing to sign in to"
                ));
            }
            Err(failure) if failure.auth_required() => failure.challenge().map(str::to_owned),
            Err(failure) => return Err(LoginError::Connect(failure)),
        };
        let manager = super::auth::sign_in(name, server, challenge.as_deref(), &http).await?;
        let file = super::auth::TokenFile::for_server(name, &server.url)?;
        (
            manager,
            format!(
                "signed in; the tokens are kept in {}",
                file.path().display()
            ),
        )
    };
    let instance = connect_remote(&slot, server, AuthClient::new(guarded, manager))
        .await
        .map_err(|cause| LoginError::AfterSignIn {
            how: how.clone(),
            cause,
        })?;
    let tools = instance.live.tools.len();
    instance.stop().await;
    Ok(format!("{name}: {how}; it serves {tools} tools"))
}

async fn connect_remote<C>(
    slot: &Slot,
    server: &HttpServer,
    client: C,
) -> Result<Instance, ConnectError>
where
    C: rmcp::transport::streamable_http_client::StreamableHttpClient,
{
    let name = slot.name();
    let connection = CancellationToken::new();
    let handler = HubClient {
        refresh: slot.refresh.clone(),
    };
    let config = super::remote::transport_config(server)?;
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
    let connect = async {
        let service = handler
            .serve_with_ct(transport, connection.clone())
            .await
            .map_err(|e| {
                let (auth, challenge) = (e.is_authorization_required(), e.auth_challenge());
                ConnectError::of(name, server, &e, auth, challenge, false)
            })?;
        let tools = service.peer().list_all_tools().await.map_err(|e| {
            let (auth, challenge) = (e.is_authorization_required(), e.auth_challenge());
            ConnectError::of(name, server, &e, auth, challenge, true)
        })?;
        Ok::<_, ConnectError>((service, tools))
    };
    match tokio::time::timeout(INIT_TIMEOUT, connect).await {
        Ok(Ok((service, tools))) => Ok(instance(service, &tools, None, connection, None)),
        Ok(Err(failure)) => {
            connection.cancel();
            Err(failure)
        }
        Err(_) => {
            connection.cancel();
            Err(ConnectError::Timeout {
                url: super::remote::shown_url(&server.url),
                after: INIT_TIMEOUT,
            })
        }
    }
}

fn instance(
    service: rmcp::service::RunningService<RoleClient, HubClient>,
    tools: &[rmcp::model::Tool],
    pid: Option<u32>,
    connection: CancellationToken,
    process: Option<Process>,
) -> Instance {
    let live = Arc::new(Live {
        peer: service.peer().clone(),
        tools: Arc::new(tool_specs(tools)),
        pid,
    });
    Instance {
        live,
        quit: (Box::pin(service.waiting()) as Pin<Box<dyn Future<Output = _> + Send>>).fuse(),
        connection,
        process,
    }
}

type Spawned = (
    Process,
    tokio::process::ChildStdout,
    tokio::process::ChildStdin,
    Option<u32>,
);

/// Starts the child in its own process group, with stderr piped to our log.
fn spawn(
    name: &str,
    program: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    cwd: Option<&std::path::Path>,
    shared: &Arc<Shared>,
) -> Result<Spawned, StartError> {
    if let Some(cwd) = cwd {
        if !cwd.is_dir() {
            return Err(StartError::NoWorkingDir(cwd.to_path_buf()));
        }
    }
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    #[cfg(target_os = "linux")]
    die_with_parent(&mut command);
    let mut wrapped = CommandWrap::from(command);
    // Its own group: a terminal's Ctrl-C does not reach it, and we can kill all it started.
    wrapped.wrap(ProcessGroup::leader());
    let mut child = wrapped.spawn().map_err(|e| spawn_error(program, e))?;
    let pid = child.id();
    let pgid = pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let group = GroupGuard::new(pgid, shared);
    let streams = (
        child.stdout().take(),
        child.stdin().take(),
        child.stderr().take(),
    );
    let (Some(stdout), Some(stdin), stderr) = streams else {
        let _ = child.start_kill();
        return Err(StartError::NoPipes);
    };

    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let (stderr_done_tx, stderr_done) = oneshot::channel();
    if let Some(stderr) = stderr {
        tokio::spawn(forward_stderr(
            name.to_owned(),
            stderr,
            stderr_tail.clone(),
            stderr_done_tx,
        ));
    }
    let kill_token = CancellationToken::new();
    let (exited_tx, exited) = watch::channel(None);
    tokio::spawn(watch_child(child, group, kill_token.clone(), exited_tx));
    let process = Process {
        exited,
        kill: kill_token.clone().drop_guard(),
        kill_token,
        stderr_tail,
        stderr_done: Some(stderr_done),
    };
    Ok((process, stdout, stdin, pid))
}

/// The two refusals a config can fix are told by kind; the io error says no more than the kind.
fn spawn_error(command: &str, e: std::io::Error) -> StartError {
    match e.kind() {
        std::io::ErrorKind::NotFound => StartError::CommandNotFound(command.to_owned()),
        std::io::ErrorKind::PermissionDenied => StartError::NotExecutable(command.to_owned()),
        _ => StartError::Spawn {
            command: command.to_owned(),
            source: e,
        },
    }
}

/// Asks Linux to SIGTERM the child when the thread that spawned it dies. Tokio's worker threads
/// live as long as the runtime, so in practice: when we die, even by SIGKILL.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
    // (prctl, getppid) and no allocation.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // We may have died between fork and prctl: then no signal would ever come.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Records a process group while it may have members; kills the group and forgets it when
/// dropped (after the leader is reaped, or if the watcher task itself is dropped).
struct GroupGuard {
    pgid: i32,
    shared: Arc<Shared>,
}

impl GroupGuard {
    fn new(pgid: i32, shared: &Arc<Shared>) -> Self {
        shared.groups.lock().insert(pgid);
        Self {
            pgid,
            shared: shared.clone(),
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.pgid, libc::SIGKILL);
        self.shared.groups.lock().remove(&self.pgid);
        self.shared.groups_changed.notify_waiters();
    }
}

async fn watch_child(
    mut child: Box<dyn ChildWrapper>,
    group: GroupGuard,
    kill: CancellationToken,
    exited: watch::Sender<Option<Exit>>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        _ = kill.cancelled() => terminate(child.as_mut()).await,
    };
    // The leader is gone but the group may not be (servers launched via npx or a shell).
    drop(group);
    exited.send_replace(Some(Exit::of(status)));
}

async fn terminate(child: &mut dyn ChildWrapper) -> std::io::Result<ExitStatus> {
    // SIGTERM first: a server may want to flush its state.
    let _ = child.signal(libc::SIGTERM);
    match tokio::time::timeout(TERM_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = child.start_kill();
            child.wait().await
        }
    }
}

/// How a process ended.
#[derive(Clone, Debug)]
struct Exit {
    /// A verb phrase: "exited with status 1", "was killed by signal 9 (SIGKILL)".
    text: String,
    /// Whether its last stderr lines likely explain it: not when it was killed from outside.
    stderr_relevant: bool,
}

impl Exit {
    fn of(status: std::io::Result<ExitStatus>) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        let (text, stderr_relevant) = match status {
            Ok(status) => match (status.code(), status.signal()) {
                (Some(code), _) => (format!("exited with status {code}"), true),
                (None, Some(signal)) => (
                    format!("was killed by signal {signal}{}", signal_name(signal)),
                    !matches!(signal, libc::SIGKILL | libc::SIGTERM | libc::SIGINT),
                ),
                _ => (format!("exited ({status})"), true),
            },
            Err(e) => (format!("exited (its status is unknown: {e})"), true),
        };
        Exit {
            text,
            stderr_relevant,
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => " (SIGHUP)",
        libc::SIGINT => " (SIGINT)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGPIPE => " (SIGPIPE)",
        libc::SIGTERM => " (SIGTERM)",
        _ => "",
    }
}

/// Forwards the child's stderr to our log, line by line, keeping the last few lines for error
/// messages. Our stdout is the MCP channel, so child output must never reach it.
async fn forward_stderr(
    name: String,
    stderr: ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    done: oneshot::Sender<()>,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    // Past MAX_STDERR_LINE the line is logged cut and the rest of it skipped: a server writing
    // a gigabyte without a newline costs us this much, not a gigabyte.
    let mut skipping = false;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) => {
                tracing::debug!(target: "downstream", server = %name, "stderr unreadable: {e}");
                break;
            }
        };
        let (used, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (chunk.len(), false),
        };
        if !skipping {
            let room = MAX_STDERR_LINE - line.len();
            line.extend_from_slice(&chunk[..used.min(room)]);
        }
        reader.consume(used);
        let full = line.len() >= MAX_STDERR_LINE;
        if ended || (full && !skipping) {
            if !skipping {
                // Lossy: a server's bytes must never stop us draining the pipe (it would block).
                let text = printable(&String::from_utf8_lossy(&line), false);
                let text = text.trim_end();
                let cut = if ended {
                    ""
                } else {
                    " … [line cut: longer than 16 KiB]"
                };
                tracing::info!(target: "downstream", server = %name, "{text}{cut}");
                let mut tail = tail.lock();
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(crate::text::shorten(text, 300));
            }
            line.clear();
            skipping = !ended;
        }
    }
    let _ = done.send(());
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::hub::tests::config;

    fn named(servers: &[ServerConfig], name: &str) -> ServerConfig {
        let found = servers.iter().find(|s| s.name == name);
        found.expect("a configured server").clone()
    }

    #[tokio::test]
    async fn each_way_a_command_fails_to_spawn_has_its_kind() {
        let shared = Arc::new(Shared::new());
        let env = Default::default();
        let spawned = |program: &str, cwd: Option<&std::path::Path>| {
            spawn("s", program, &[], &env, cwd, &shared).err()
        };
        let missing = spawned("/nonexistent/bin/mcp-server", None);
        assert!(
            matches!(&missing, Some(StartError::CommandNotFound(c)) if c == "/nonexistent/bin/mcp-server"),
            "{missing:?}"
        );
        let dir = tempfile::tempdir().expect("a temporary folder");
        let script = dir.path().join("server.sh");
        std::fs::write(&script, "#!/bin/sh\n").expect("written without an execute bit");
        let refused = spawned(script.to_str().unwrap(), None);
        assert!(
            matches!(&refused, Some(StartError::NotExecutable(_))),
            "{refused:?}"
        );
        let gone = dir.path().join("gone");
        let no_dir = spawned("sh", Some(&gone));
        assert!(
            matches!(&no_dir, Some(StartError::NoWorkingDir(d)) if *d == gone),
            "{no_dir:?}"
        );
    }

    #[tokio::test]
    async fn each_way_a_started_server_fails_to_initialize_has_its_kind() {
        let (_dir, config) = config(serde_json::json!({
            // Exits while a child of its own keeps its stdin and stdout open: the exit comes
            // first.
            "exits": {"command": "sh", "args": ["-c", "sleep 5 <&0 & echo 'no API key' >&2; exit 3"]},
            // Answers the handshake's request with an error.
            "refuses": {"command": "sh", "args": ["-c", r#"read line; id=$(echo "$line" | sed 's/.*"id":\([0-9]*\).*/\1/'); echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"error\":{\"code\":-32603,\"message\":\"not today\"}}"; exec sleep 10"#]},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
        }));
        let shared = Arc::new(Shared::new());
        let start_of = |name: &str| {
            let slot = Slot::new(named(&config.servers, name));
            let shared = shared.clone();
            async move { start(&slot, &shared).await.err() }
        };
        let exits = start_of("exits").await;
        assert!(
            matches!(&exits, Some(StartError::Init { cause: InitError::Exited(how), exit: None, stderr: Some(tail) })
                if how == "exited with status 3" && tail.contains("no API key")),
            "{exits:?}"
        );
        let status = exits.unwrap().status();
        assert!(
            status.starts_with("failed to start: exited with status 3"),
            "{status}"
        );
        let refuses = start_of("refuses").await;
        assert!(
            matches!(
                &refuses,
                Some(StartError::Init {
                    cause: InitError::Handshake(_),
                    ..
                })
            ),
            "{refuses:?}"
        );
        let legacy = start_of("legacy").await;
        assert!(
            matches!(&legacy, Some(StartError::Unsupported(_))),
            "{legacy:?}"
        );
    }

    #[tokio::test]
    async fn each_way_a_login_fails_has_its_kind() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let (_dir, config) = config(serde_json::json!({
            "secured": {"url": format!("http://127.0.0.1:{port}/mcp?key=sekrit")},
            "local": {"command": "sh"},
        }));
        let unknown = super::super::Hub::remote_server(&config, "secure").err();
        assert!(
            matches!(&unknown, Some(LoginError::NoSuchServer { name, hint, .. }) if name == "secure" && hint.contains("secured")),
            "{unknown:?}"
        );
        let local = super::super::Hub::remote_server(&config, "local").err();
        assert!(
            matches!(&local, Some(LoginError::NotRemote(name)) if name == "local"),
            "{local:?}"
        );
        let down = login(&named(&config.servers, "secured")).await.err();
        assert!(
            matches!(
                &down,
                Some(LoginError::Connect(ConnectError::Handshake {
                    auth_required: false,
                    ..
                }))
            ),
            "{down:?}"
        );
        let words = super::super::error_words(&down.unwrap());
        assert!(!words.contains("sekrit"), "{words}");
    }
}
