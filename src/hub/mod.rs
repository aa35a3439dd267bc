//! hub — the MCP clients of the configured downstream servers, seen by the sandboxes as one
//! [`ToolHost`].
//!
//! `Hub::start` launches every enabled server concurrently (each as a child process in its own
//! process group) and returns at once; a server that fails is reported and retried with backoff,
//! never blocking the others or start-up. A crashed server is restarted the same way.
//! The catalogue (running servers and their tools) has a version counter others can watch.
//!
//! **Invariant:** calls run on the hub's runtime, whatever thread polls the future returned by
//! [`ToolHost::call`]; dropping that future aborts the call, which sends `notifications/cancelled`
//! downstream.

mod auth;
mod remote;
mod server;
pub mod shape;
mod wire;

use crate::bridge::view::{PythonView, ViewCache};
use crate::bridge::{ServerCatalog, ToolCallError, ToolHost};
use crate::config::{Config, ServerConfig, Transport};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rmcp::model::CallToolRequestParams;
use rmcp::service::ServiceError;
use serde::Serialize;
use serde_json::{Map, Value};
use server::{retry_text, seconds, Live, Phase, Shared, Slot};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;

pub use auth::OAuthError;
pub use remote::HeaderError;
pub use server::{ConnectError, InitError, StartError};
pub use shape::shape_result;

/// Longest a hub error's words may be where a person reads them (see [`error_words`]).
const MAX_ERROR_WORDS: usize = 1000;

/// A hub error with its causes, as a person reads it (`what: why: why`): cut short, since causes
/// may hold a downstream or authorization server's own words at any length, and every URL in
/// them without its query or user info (reqwest's errors name the URL, key and all).
pub fn error_words(error: &(dyn std::error::Error + 'static)) -> String {
    let words = remote::strip_urls(&crate::text::Chain(error).to_string());
    crate::text::shorten(&words, MAX_ERROR_WORDS)
}

/// Why `mcp-code-mode login` could not sign in to a server.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The config has no server of that name; `hint` suggests the closest, or names them all.
    #[error("{} has no server \"{name}\"{hint}", .config.display())]
    NoSuchServer {
        config: PathBuf,
        name: String,
        hint: String,
    },
    #[error("'{0}' is not a remote server (it has no \"url\"): there is nothing to sign in to")]
    NotRemote(String),
    #[error("cannot make an HTTP client")]
    HttpClient(#[source] reqwest::Error),
    #[error(transparent)]
    OAuth(#[from] OAuthError),
    /// Asked without a token, the server failed otherwise than by asking for one.
    #[error(transparent)]
    Connect(ConnectError),
    /// Signed in (`how` says so), but connecting with the token failed.
    #[error("{how}, but then")]
    AfterSignIn {
        how: String,
        #[source]
        cause: ConnectError,
    },
}

/// The downstream servers and their clients.
pub struct Hub {
    config_path: Option<PathBuf>,
    slots: Vec<Arc<Slot>>,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    supervisors: Mutex<Vec<JoinHandle<()>>>,
    /// What sandboxes read, made once per catalogue version.
    view: ViewCache,
}

/// One configured server, for discovery tools and the startup message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub description: String,
    pub state: ServerState,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// Its first start (or a restart) is underway.
    Starting,
    Running {
        tools: usize,
    },
    /// Not running; `reason` says why and when it is retried.
    Failed {
        reason: String,
    },
    Disabled,
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Starting => write!(f, "starting"),
            ServerState::Running { tools: 1 } => write!(f, "running, 1 tool"),
            ServerState::Running { tools } => write!(f, "running, {tools} tools"),
            ServerState::Failed { reason } => write!(f, "not running: {reason}"),
            ServerState::Disabled => write!(f, "disabled"),
        }
    }
}

impl Hub {
    /// Starts every enabled server of `config` (none when `config` is `None`) in the background
    /// and returns at once: a slow or hung server never delays start-up. Until a server's first
    /// start attempt ends it is "starting"; calls to it wait for it (up to its `timeout_s`), and
    /// [`Hub::changes`] ticks when it comes up. Must be called inside a Tokio runtime, which then
    /// runs the hub's tasks.
    pub fn start(config: Option<&Config>) -> Arc<Hub> {
        let shared = Arc::new(Shared::new());
        let runtime = tokio::runtime::Handle::current();
        let servers = config.map(|c| c.servers.as_slice()).unwrap_or_default();
        let slots: Vec<Arc<Slot>> = servers
            .iter()
            .map(|s| Arc::new(Slot::new(s.clone())))
            .collect();
        let supervisors = slots
            .iter()
            .filter(|s| !s.config.disabled)
            .map(|slot| runtime.spawn(server::supervise(slot.clone(), shared.clone())))
            .collect();
        Arc::new(Hub {
            config_path: config.map(|c| c.path.clone()),
            slots,
            shared,
            runtime,
            supervisors: Mutex::new(supervisors),
            view: ViewCache::default(),
        })
    }

    /// The remote server `name` of `config`, for `mcp-code-mode login`; `Err` says what is
    /// wrong (an unknown name suggests the closest; a local server has nothing to sign in to).
    pub fn remote_server<'a>(
        config: &'a Config,
        name: &str,
    ) -> Result<&'a ServerConfig, LoginError> {
        let Some(server) = config.servers.iter().find(|s| s.name == name) else {
            let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
            let hint = match crate::suggest::did_you_mean(name, names.iter().copied(), 1)[..] {
                [close] => format!(": did you mean \"{close}\"?"),
                _ => format!(" (its servers: {})", names.join(", ")),
            };
            return Err(LoginError::NoSuchServer {
                config: config.path.clone(),
                name: name.to_owned(),
                hint,
            });
        };
        match &server.transport {
            Transport::Http(_) => Ok(server),
            _ => Err(LoginError::NotRemote(name.to_owned())),
        }
    }

    /// Signs in to the remote `server` ahead of time (`mcp-code-mode login`), so `serve` and
    /// `run` find its tokens; for a client-credentials server, checks the grant. Says what it
    /// did, or why it failed.
    pub async fn login(server: &ServerConfig) -> Result<String, LoginError> {
        server::login(server).await
    }

    /// Waits until every enabled server's first start attempt has ended, successful or not (at
    /// most ~30 s, the init timeout): for `debug`, benches and tests, which want the catalogue
    /// settled. The server and `run` never wait.
    pub async fn wait_started(&self) {
        let first_attempts = self.slots.iter().map(|slot| async move {
            let mut phase = slot.phase.subscribe();
            // A closed channel means the hub is gone: as good as done.
            let _ = phase
                .wait_for(|p| !matches!(p, Phase::Starting { previous: None }))
                .await;
        });
        futures::future::join_all(first_attempts).await;
    }

    /// The catalogue version: it changes whenever a server starts or stops or its tools change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.version.subscribe()
    }

    /// Every configured server, in config order, with its state now.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.slots
            .iter()
            .map(|slot| {
                let state = match &*slot.phase.borrow() {
                    Phase::Disabled => ServerState::Disabled,
                    Phase::Starting { previous: None } => ServerState::Starting,
                    // Restarting after a failure: the failure is what a user needs to see.
                    Phase::Starting {
                        previous: Some(reason),
                    } => ServerState::Failed {
                        reason: format!("{reason}; restarting now"),
                    },
                    Phase::Running(live) => ServerState::Running {
                        tools: live.tools.len(),
                    },
                    Phase::Down { reason, retry_at } => ServerState::Failed {
                        reason: format!("{reason}; {}", retry_text(*retry_at)),
                    },
                };
                ServerStatus {
                    name: slot.config.name.clone(),
                    description: slot.config.description.clone(),
                    state,
                }
            })
            .collect()
    }

    /// One line per server, for the startup message on stderr.
    pub fn summary(&self) -> String {
        let mut lines = Vec::new();
        match &self.config_path {
            None => lines.push(
                "no MCP servers configured (use --config or config/mcp_servers.json): plain Python"
                    .to_owned(),
            ),
            Some(path) => {
                lines.push(format!(
                    "{} MCP server(s) from {}:",
                    self.slots.len(),
                    path.display()
                ));
                for status in self.status() {
                    lines.push(format!("  {}: {}", status.name, status.state));
                }
            }
        }
        lines.join("\n")
    }

    /// The process id of a running server's child process (tests kill it to simulate a crash).
    pub fn pid(&self, server: &str) -> Option<u32> {
        let slot = self.slot(server)?;
        let phase = slot.phase.borrow();
        match &*phase {
            Phase::Running(live) => live.pid,
            _ => None,
        }
    }

    /// Closes every client and kills every process group; when it returns, none of our children
    /// is left running. Safe to call more than once.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        let supervisors = std::mem::take(&mut *self.supervisors.lock());
        for supervisor in supervisors {
            let _ = supervisor.await;
        }
        // Supervisors stop their processes; this waits for the watchers to reap them.
        let reaped = async {
            loop {
                let changed = self.shared.groups_changed.notified();
                if self.shared.live_groups().is_empty() {
                    break;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), reaped)
            .await
            .is_err()
        {
            tracing::warn!("some MCP server processes did not exit in time: killing them");
        }
        self.shared.kill_all_groups();
    }

    fn slot(&self, server: &str) -> Option<&Arc<Slot>> {
        self.slots.iter().find(|s| s.config.name == server)
    }

    /// The config file as scripts may see it: its name, never the host's directory layout.
    fn config_file_name(&self) -> Option<String> {
        let path = self.config_path.as_ref()?;
        Some(path.file_name()?.to_string_lossy().into_owned())
    }

    fn unknown_server(&self, server: &str) -> String {
        if self.slots.is_empty() {
            return format!(
                "unknown MCP server '{server}': no MCP servers are configured{}",
                self.config_file_name()
                    .map(|name| format!(" in {name}"))
                    .unwrap_or_default()
            );
        }
        let names: Vec<String> = self
            .slots
            .iter()
            .map(|s| {
                if s.config.disabled {
                    format!("'{}' (disabled)", s.config.name)
                } else {
                    format!("'{}'", s.config.name)
                }
            })
            .collect();
        format!(
            "unknown MCP server '{server}': the configured servers are {}",
            names.join(", ")
        )
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // Best effort without a runtime: nothing of ours may outlive the hub.
        self.shared.shutdown.cancel();
        self.shared.kill_all_groups();
    }
}

impl ToolHost for Hub {
    fn unavailable(&self) -> Vec<(String, String)> {
        self.status()
            .into_iter()
            .filter(|s| !matches!(s.state, ServerState::Running { .. }))
            .map(|s| (s.name, s.state.to_string()))
            .collect()
    }

    fn python_view(&self) -> Arc<PythonView> {
        // The version first: the catalogue read after it is at least that new.
        let version = *self.shared.version.borrow();
        Arc::new(
            self.view
                .view(version, &self.catalog(), &self.unavailable()),
        )
    }

    fn catalog(&self) -> Vec<ServerCatalog> {
        self.slots
            .iter()
            .filter_map(|slot| match &*slot.phase.borrow() {
                Phase::Running(live) => Some(ServerCatalog {
                    server: slot.config.name.clone(),
                    description: slot.config.description.clone(),
                    tools: live.tools.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    fn wait_ready(&self, server: &str) -> BoxFuture<'static, Result<(), ToolCallError>> {
        let Some(slot) = self.slot(server).cloned() else {
            return Box::pin(async { Ok(()) });
        };
        let deadline = tokio::time::Instant::now() + slot.config.timeout;
        // Aborted when dropped, so an abandoned call stops.
        let task = AbortOnDropHandle::new(
            self.runtime
                .spawn(async move { ready(&slot, deadline).await.map(drop) }),
        );
        Box::pin(async move { task.await.unwrap_or(Ok(())) })
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        let Some(slot) = self.slot(server) else {
            let message = self.unknown_server(server);
            return Box::pin(async move { Err(ToolCallError::NotFound(message)) });
        };
        if slot.config.disabled {
            let message = format!(
                "MCP server '{server}' is disabled{}",
                self.config_file_name()
                    .map(|name| format!(" (\"disabled\": true in {name})"))
                    .unwrap_or_default()
            );
            return Box::pin(async move { Err(ToolCallError::Unavailable(message)) });
        }
        // Spawned on the hub's runtime: the caller polls from the sandbox thread's own runtime.
        // Aborted when dropped, so an abandoned call stops.
        let task = AbortOnDropHandle::new(self.runtime.spawn(call_tool(
            slot.clone(),
            tool.to_owned(),
            arguments,
        )));
        let server = server.to_owned();
        Box::pin(async move {
            match task.await {
                Ok(result) => result,
                Err(e) if e.is_cancelled() => Err(ToolCallError::Unavailable(format!(
                    "MCP server '{server}': the call was cancelled (mcp-code-mode is shutting down)"
                ))),
                Err(e) => Err(ToolCallError::Server(format!(
                    "MCP server '{server}': the call failed inside mcp-code-mode: {e}"
                ))),
            }
        })
    }
}

/// Waits until the server can take a call: at once if it runs, failing at once if it is down,
/// waiting (until `deadline`) if it is starting.
async fn ready(slot: &Slot, deadline: tokio::time::Instant) -> Result<Arc<Live>, ToolCallError> {
    let name = slot.name();
    let mut phase = slot.phase.subscribe();
    let waited = tokio::time::timeout_at(
        deadline,
        phase.wait_for(|p| !matches!(p, Phase::Starting { .. })),
    )
    .await;
    let phase = match waited {
        Ok(Ok(phase)) => phase.clone(),
        Ok(Err(_)) => {
            return Err(ToolCallError::Unavailable(format!(
                "MCP server '{name}' is not running (mcp-code-mode is shutting down)"
            )))
        }
        Err(_) => {
            return Err(ToolCallError::Unavailable(format!(
                "MCP server '{name}' is still starting after {} (its timeout_s)",
                seconds(slot.config.timeout)
            )))
        }
    };
    match phase {
        Phase::Running(live) => Ok(live),
        Phase::Down { reason, retry_at } => Err(ToolCallError::Unavailable(format!(
            "MCP server '{name}' is not running: {reason}; {}",
            retry_text(retry_at)
        ))),
        Phase::Disabled => Err(ToolCallError::Unavailable(format!(
            "MCP server '{name}' is disabled"
        ))),
        Phase::Starting { .. } => Err(ToolCallError::Unavailable(format!(
            "MCP server '{name}' is starting"
        ))),
    }
}

async fn call_tool(
    slot: Arc<Slot>,
    tool: String,
    arguments: Map<String, Value>,
) -> Result<Value, ToolCallError> {
    let name = slot.name();
    let timeout = slot.config.timeout;
    let mut deadline = tokio::time::Instant::now() + timeout;
    let mut live = ready(&slot, deadline).await?;
    let mut stepped_up = false;
    loop {
        if !live.tools.iter().any(|t| t.name == tool) {
            return Err(ToolCallError::NotFound(unknown_tool(name, &tool, &live)));
        }
        let params = CallToolRequestParams::new(tool.clone()).with_arguments(arguments.clone());
        // Timing out drops the request future, which sends notifications/cancelled downstream.
        let outcome = tokio::time::timeout_at(deadline, live.peer.call_tool(params)).await;
        return match outcome {
            Err(_) => Err(ToolCallError::Server(format!(
                "MCP server '{name}': tool '{tool}' did not answer within {} (the server's timeout_s)",
                seconds(timeout)
            ))),
            Ok(Ok(result)) => shape_result(&result),
            Ok(Err(ServiceError::McpError(error))) => {
                let message = format!("MCP server '{name}': {}", error.message);
                // Arguments the tool's own checks refused are the call's fault, not the server's.
                Err(if error.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                    ToolCallError::Invalid(message)
                } else {
                    ToolCallError::Server(message)
                })
            }
            Ok(Err(error @ ServiceError::TransportSend(_)))
                if error
                    .auth_challenge()
                    .is_some_and(server::is_insufficient_scope) =>
            {
                // A step-up: the connection ends, and the restart asks the person to sign in for
                // the wider scope. The call is made once more on the new connection.
                let challenge = error.auth_challenge().unwrap_or_default();
                let wanted = server::wanted_scope(challenge);
                if !stepped_up && slot.step_up.note(challenge) {
                    stepped_up = true;
                    if let Some(next) = restarted(&slot, &live).await {
                        live = next;
                        deadline = tokio::time::Instant::now() + timeout;
                        continue;
                    }
                }
                Err(ToolCallError::Denied(format!(
                    "MCP server '{name}': tool '{tool}' needs an OAuth scope the token lacks ({wanted}); signing in for it did not succeed: run `mcp-code-mode login {name}`"
                )))
            }
            Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => Err(
                ToolCallError::Server(crashed_during_call(&slot, &live, &tool).await),
            ),
            Ok(Err(other)) => Err(ToolCallError::Server(format!("{name}: {other}"))),
        };
    }
}

/// The server's next connection after `old`, once it runs (a restart that may wait for a person
/// to sign in); `None` if it went down instead.
async fn restarted(slot: &Slot, old: &Arc<Live>) -> Option<Arc<Live>> {
    let mut phase = slot.phase.subscribe();
    let settled = tokio::time::timeout(
        auth::SIGN_IN_WAIT + slot.config.timeout + Duration::from_secs(5),
        phase.wait_for(|p| match p {
            Phase::Running(live) => !Arc::ptr_eq(live, old),
            Phase::Down { .. } | Phase::Disabled => true,
            Phase::Starting { .. } => false,
        }),
    )
    .await;
    match settled {
        Ok(Ok(phase)) => match &*phase {
            Phase::Running(live) => Some(live.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The message for a call whose connection closed under it: waits briefly for the supervisor to
/// notice, so the message can say how the server died and when it comes back.
async fn crashed_during_call(slot: &Slot, live: &Arc<Live>, tool: &str) -> String {
    let name = slot.name();
    let mut phase = slot.phase.subscribe();
    let noticed = tokio::time::timeout(
        Duration::from_secs(3),
        phase.wait_for(|p| !matches!(p, Phase::Running(l) if Arc::ptr_eq(l, live))),
    )
    .await;
    let detail = match noticed {
        Ok(Ok(phase)) => match &*phase {
            Phase::Down { reason, retry_at } => format!("{reason}; {}", retry_text(*retry_at)),
            Phase::Starting { .. } => "it is restarting".to_owned(),
            _ => "it has been restarted; try again".to_owned(),
        },
        _ => "its connection closed".to_owned(),
    };
    format!("MCP server '{name}' stopped during the call to '{tool}': {detail}")
}

fn unknown_tool(server: &str, tool: &str, live: &Live) -> String {
    const SHOWN: usize = 30;
    let mut names: Vec<&str> = live.tools.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    let more = names.len().saturating_sub(SHOWN);
    names.truncate(SHOWN);
    let mut list = names.join(", ");
    if more > 0 {
        list.push_str(&format!(" and {more} more"));
    }
    let close = crate::suggest::did_you_mean(tool, live.tools.iter().map(|t| t.name.as_str()), 3);
    if list.is_empty() {
        format!("MCP server '{server}' has no tool '{tool}' (it lists no tools)")
    } else if !close.is_empty() {
        format!(
            "MCP server '{server}' has no tool '{tool}'; did you mean {}?",
            close.join(", ")
        )
    } else {
        format!("MCP server '{server}' has no tool '{tool}'; its tools: {list}")
    }
}

#[cfg(test)]
mod tests {
    /// A config file of `servers`, read by the config's own loader (so these tests do not
    /// depend on how a `ServerConfig` is built); the folder holds the file.
    pub(super) fn config(servers: serde_json::Value) -> (tempfile::TempDir, crate::config::Config) {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("servers.json");
        let text = serde_json::json!({ "servers": servers }).to_string();
        std::fs::write(&path, text).expect("the config is written");
        let config = crate::config::load_with_env(&path, &|_| None).expect("a valid config");
        (dir, config)
    }
}
