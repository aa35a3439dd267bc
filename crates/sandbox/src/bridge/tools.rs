//! The tool side of the bridge: what Python may call, described without any MCP wire types.
//!
//! The bridge's ops reach downstream servers only through [`ToolHost`], handed to the sandbox by
//! whoever creates it: the hub in production, a small in-memory host in tests. Nothing here knows
//! V8, so the shaping of results is tested without an isolate.

use super::memory::MemoryBudget;
use super::view::PythonView;
use futures::future::{BoxFuture, LocalBoxFuture};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One tool as Python sees it (the MCP `Tool`, minus what Python has no use for).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// The MCP name, exactly as the server spells it (calls send it back as is).
    pub name: String,
    /// Its Python identifier when the host assigned one (unique within the server, see
    /// `signature::assign_python_names`); empty means `signature::python_name(name)`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub python_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

impl ToolSpec {
    /// The identifier Python calls this tool by.
    pub fn py_name(&self) -> String {
        if self.python_name.is_empty() {
            super::signature::python_name(&self.name)
        } else {
            self.python_name.clone()
        }
    }
}

/// One downstream server and its tools.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServerCatalog {
    pub server: String,
    #[serde(default)]
    pub description: String,
    /// Shared, not copied: a catalogue may hold tens of thousands of tools.
    pub tools: Arc<Vec<ToolSpec>>,
}

/// Why a tool call failed, in words the script's author can act on; the kind says whose failure
/// it is, for code (and tests) that must tell them apart without reading the words.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ToolCallError {
    /// The call is wrong: a name, arguments or a size the bridge or the tool's schema refuses.
    #[error("{0}")]
    Invalid(String),
    /// No such server, or no such tool on it.
    #[error("{0}")]
    NotFound(String),
    /// The server is configured but takes no calls now: disabled, starting, down, stopping.
    #[error("{0}")]
    Unavailable(String),
    /// A rule or a person said no (approvals), or nobody could be asked.
    #[error("{0}")]
    Denied(String),
    /// One of this execution's limits: its number of calls, its memory.
    #[error("{0}")]
    Limit(String),
    /// The tool ran and reported an error (MCP `isError`), in its own words.
    #[error("{0}")]
    Tool(String),
    /// The server failed the call: an error answer, no answer in time, a lost connection.
    #[error("{0}")]
    Server(String),
    /// A replayed execution asked for what its recording does not hold.
    #[error("{0}")]
    Replay(String),
    /// An error a recording holds, replayed (recordings keep its words, not its kind).
    #[error("{0}")]
    Recorded(String),
}

impl ToolCallError {
    /// The kind's name, as Python's `ToolError.kind` has it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid",
            Self::NotFound(_) => "not_found",
            Self::Unavailable(_) => "unavailable",
            Self::Denied(_) => "denied",
            Self::Limit(_) => "limit",
            Self::Tool(_) => "tool",
            Self::Server(_) => "server",
            Self::Replay(_) => "replay",
            Self::Recorded(_) => "recorded",
        }
    }

    /// The envelope Python unwraps into a `ToolError` (see [`ToolBridge::call_envelope`]).
    pub fn envelope(&self) -> String {
        serde_json::json!({"ok": false, "error": self.message(), "kind": self.kind()}).to_string()
    }

    /// The words, whatever the kind.
    pub fn message(&self) -> &str {
        match self {
            Self::Invalid(m)
            | Self::NotFound(m)
            | Self::Unavailable(m)
            | Self::Denied(m)
            | Self::Limit(m)
            | Self::Tool(m)
            | Self::Server(m)
            | Self::Replay(m)
            | Self::Recorded(m) => m,
        }
    }
}

/// Access to downstream tools. Implementations must be cheap to call from any thread: the future
/// is polled on the sandbox's own thread.
pub trait ToolHost: Send + Sync + 'static {
    /// The servers serving tools now.
    fn catalog(&self) -> Vec<ServerCatalog>;

    /// The catalogue as the sandbox's Python receives it. Hosts whose catalogue has a version
    /// keep one per version (see [`ViewCache`](super::view::ViewCache)).
    fn python_view(&self) -> Arc<PythonView> {
        Arc::new(PythonView::new(&self.catalog(), &self.unavailable()))
    }

    /// Servers that are configured but not serving tools now, each with why ("disabled", "not
    /// running: ..."). Python still sees them, so a call says why instead of "no such server".
    fn unavailable(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Resolves once `server` is no longer starting, or after its own bounded wait: `Ok` when it
    /// runs (a script that reached it while it started gets its real tools), else why not.
    fn wait_ready(&self, _server: &str) -> BoxFuture<'static, Result<(), ToolCallError>> {
        Box::pin(async { Ok(()) })
    }

    /// Calls `server`'s tool `tool` (its MCP name) and returns the value Python receives.
    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>>;

    /// [`ToolHost::call`], and how the call was let through or refused when the host decides
    /// that (an approval policy): it goes into the call's [`ToolCallRecord`]. Hosts that wrap
    /// another pass this through.
    fn call_audited(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, (Result<Value, ToolCallError>, Option<Approval>)> {
        let call = self.call(server, tool, arguments);
        Box::pin(async move { (call.await, None) })
    }
}

/// How a host's approval policy decided one call: `decision` is `allowed` (by a rule or the
/// tool's annotations), `approved` (by the user), `declined` (by the user), `cancelled` (by the
/// user: the script was stopped), `denied` (by a rule, or because nobody could be asked) or
/// `unanswered` (no answer in time); `by` says which rule or answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Approval {
    pub decision: String,
    pub by: String,
}

/// A host with no servers: plain Python.
pub struct NoTools;

impl ToolHost for NoTools {
    fn catalog(&self) -> Vec<ServerCatalog> {
        Vec::new()
    }
    fn call(
        &self,
        server: &str,
        tool: &str,
        _: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        let message = format!("no MCP server '{server}' is configured (called tool '{tool}')");
        Box::pin(async move { Err(ToolCallError::NotFound(message)) })
    }
}

/// One call made by a script, as reported back to the MCP client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ToolCallRecord {
    pub server: String,
    pub tool: String,
    pub ms: f64,
    pub ok: bool,
    /// The approval policy's decision, when the host has one (see [`Approval`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// The most JSON one tool call's arguments may take. Larger ones are refused before they are
/// parsed: a parsed `serde_json::Value` takes several times its text.
pub const MAX_ARGUMENTS_BYTES: usize = 8 << 20;

/// What a tool call's arguments are charged to the memory budget while the call is in flight:
/// the JSON text and an allowance for its parsed form.
const PARSED_ARGUMENTS_FACTOR: usize = 12;

/// The bridge's per-sandbox tool state: the host (swappable until the job starts, so a pre-booted
/// sandbox serves whoever takes it) and the log of calls made.
#[derive(Clone)]
pub struct ToolBridge {
    host: Arc<parking_lot::RwLock<Arc<dyn ToolHost>>>,
    calls: Arc<parking_lot::Mutex<Vec<ToolCallRecord>>>,
    /// Calls started, finished or not: a slot is taken before a call begins, so the cap holds
    /// however many calls run at once.
    started: Arc<std::sync::atomic::AtomicUsize>,
    pub max_calls: usize,
    /// The catalogue version this job reads: taken with the index, so the tools of a server it
    /// then asks for belong to the same version.
    view: Arc<parking_lot::Mutex<Option<Arc<PythonView>>>>,
}

impl ToolBridge {
    pub fn new(host: Arc<dyn ToolHost>) -> Self {
        Self {
            host: Arc::new(parking_lot::RwLock::new(host)),
            calls: Default::default(),
            started: Default::default(),
            max_calls: 1000,
            view: Default::default(),
        }
    }

    /// The index of the catalogue as it is now (see [`PythonView::index`]); the job's later
    /// [`ToolBridge::server_tools`] answer from this version.
    pub fn catalog_index(&self) -> String {
        let view = self.host().python_view();
        let index = view.index().to_owned();
        *self.view.lock() = Some(view);
        index
    }

    /// The tools of `server` (its name as the script sent it) in the version the last
    /// [`ToolBridge::catalog_index`] read, as JSON; empty when it serves none there.
    pub fn server_tools(&self, server: &[u8]) -> String {
        let Ok(server) = name(server, "server") else {
            return String::new();
        };
        let view = self.view.lock().clone();
        let view = view.unwrap_or_else(|| self.host().python_view());
        view.server_tools(&server).unwrap_or_default().to_owned()
    }

    /// Takes one of the job's [`ToolBridge::max_calls`] slots, or says why not.
    fn take_call_slot(&self) -> Result<(), ToolCallError> {
        self.started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max_calls).then_some(n + 1)
            })
            .map(drop)
            .map_err(|_| {
                ToolCallError::Limit(format!(
                    "this script already started {} tool calls (or waits for a server), the most one execution may make",
                    self.max_calls
                ))
            })
    }

    /// Waits for `server` to finish starting (see [`ToolHost::wait_ready`]): "" when it runs,
    /// else why not. Each wait takes a call slot, so a script cannot pile up waits for free.
    pub async fn wait_ready(&self, server: &[u8]) -> String {
        let result = match (self.take_call_slot(), name(server, "server")) {
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(()), Ok(server)) => self.host().wait_ready(&server).await,
        };
        result
            .err()
            .map(|e| e.message().to_owned())
            .unwrap_or_default()
    }

    pub fn host(&self) -> Arc<dyn ToolHost> {
        self.host.read().clone()
    }

    /// The calls of the job that just ended; the next job of a session starts with none made and
    /// all of its [`ToolBridge::max_calls`] slots.
    pub fn take_job_calls(&self) -> Vec<ToolCallRecord> {
        self.started.store(0, Ordering::SeqCst);
        std::mem::take(&mut *self.calls.lock())
    }

    pub fn set_host(&self, host: Arc<dyn ToolHost>) {
        *self.host.write() = host;
    }

    /// Makes one call and returns the JSON envelope Python unwraps:
    /// `{"ok": true, "value": ...}` or `{"ok": false, "error": "...", "kind": "..."}`.
    pub async fn call_envelope(
        &self,
        server: &[u8],
        tool: &[u8],
        arguments_json: &[u8],
        budget: &Arc<MemoryBudget>,
    ) -> String {
        let started = Instant::now();
        let (server, tool) = match (name(server, "server"), name(tool, "tool")) {
            (Ok(server), Ok(tool)) => (server, tool),
            (Err(e), _) | (_, Err(e)) => return e.envelope(),
        };
        let (result, approval) = self.call(&server, &tool, arguments_json, budget).await;
        let record = ToolCallRecord {
            server,
            tool,
            ms: round_ms(started.elapsed()),
            ok: result.is_ok(),
            approval,
        };
        self.calls.lock().push(record);
        match result {
            Ok(value) => serde_json::json!({"ok": true, "value": value}).to_string(),
            Err(e) => e.envelope(),
        }
    }

    async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments_json: &[u8],
        budget: &Arc<MemoryBudget>,
    ) -> (Result<Value, ToolCallError>, Option<Approval>) {
        let arguments = match self.checked_arguments(server, tool, arguments_json, budget) {
            Ok(arguments) => arguments,
            Err(e) => return (Err(e), None),
        };
        let (arguments, _held) = arguments;
        self.host().call_audited(server, tool, arguments).await
    }

    /// Takes a call slot and parses the arguments, charging them to the budget while the call
    /// is in flight (the reservation is returned with them).
    fn checked_arguments(
        &self,
        server: &str,
        tool: &str,
        arguments_json: &[u8],
        budget: &Arc<MemoryBudget>,
    ) -> Result<(Map<String, Value>, impl Sized), ToolCallError> {
        self.take_call_slot()?;
        if arguments_json.len() > MAX_ARGUMENTS_BYTES {
            return Err(arguments_too_large(server, tool, arguments_json.len()));
        }
        let held = budget
            .reserve(arguments_json.len().saturating_mul(PARSED_ARGUMENTS_FACTOR))
            .ok_or_else(|| {
                ToolCallError::Limit(format!(
                    "not enough memory left (--memory-mb) to send {} bytes of arguments to {server}.{tool}",
                    arguments_json.len()
                ))
            })?;
        let arguments = match serde_json::from_slice(arguments_json) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(ToolCallError::Invalid(format!(
                    "arguments must be a JSON object, got {other}"
                )))
            }
            Err(e) => {
                return Err(ToolCallError::Invalid(format!(
                    "arguments are not valid JSON: {e}"
                )))
            }
        };
        Ok((arguments, held))
    }
}

/// What the tool ops talk to: a [`ToolBridge`] in the same process, or (in a forked sandbox) a
/// port that carries the same four requests, as the script's bytes, to the bridge in the parent.
/// Every argument arrives unchecked, exactly as the script sent it.
pub trait ToolPort {
    /// The catalogue index the job reads (see [`ToolBridge::catalog_index`]).
    fn catalog_index(&self) -> String;
    /// One server's tools as JSON (see [`ToolBridge::server_tools`]).
    fn server_tools(&self, server: &[u8]) -> String;
    /// "" once `server` runs, else why not (see [`ToolBridge::wait_ready`]).
    fn wait_ready(&self, server: deno_core::JsBuffer) -> LocalBoxFuture<'static, String>;
    /// The envelope of one call (see [`ToolBridge::call_envelope`]).
    fn call(
        &self,
        server: deno_core::JsBuffer,
        tool: deno_core::JsBuffer,
        arguments_json: deno_core::JsBuffer,
        budget: Arc<MemoryBudget>,
    ) -> LocalBoxFuture<'static, String>;
}

impl ToolPort for ToolBridge {
    fn catalog_index(&self) -> String {
        ToolBridge::catalog_index(self)
    }
    fn server_tools(&self, server: &[u8]) -> String {
        ToolBridge::server_tools(self, server)
    }
    fn wait_ready(&self, server: deno_core::JsBuffer) -> LocalBoxFuture<'static, String> {
        let bridge = self.clone();
        Box::pin(async move { ToolBridge::wait_ready(&bridge, &server).await })
    }
    fn call(
        &self,
        server: deno_core::JsBuffer,
        tool: deno_core::JsBuffer,
        arguments_json: deno_core::JsBuffer,
        budget: Arc<MemoryBudget>,
    ) -> LocalBoxFuture<'static, String> {
        let bridge = self.clone();
        Box::pin(async move {
            bridge
                .call_envelope(&server, &tool, &arguments_json, &budget)
                .await
        })
    }
}

/// The port the sandbox's tool ops use (an `OpState` slot): swapped for a remote one in a
/// forked child.
pub struct Tools(pub std::rc::Rc<dyn ToolPort>);

/// The longest server or tool name a script may send, in bytes of UTF-8. Longer names exist in
/// no catalogue (see hub::wire), so they are refused before they are copied.
pub const MAX_NAME_BYTES: usize = 4096;

fn arguments_too_large(server: &str, tool: &str, len: usize) -> ToolCallError {
    ToolCallError::Invalid(format!(
        "the arguments of {server}.{tool} are {len} bytes of JSON, more than the {} MiB one call may send",
        MAX_ARGUMENTS_BYTES >> 20
    ))
}

/// Whether `bytes` would pass as a name (see [`name`]), without copying them.
pub fn check_name(bytes: &[u8], what: &str) -> Result<(), ToolCallError> {
    if bytes.len() > MAX_NAME_BYTES {
        return name(bytes, what).map(drop); // refused on its length, before any copy
    }
    std::str::from_utf8(bytes)
        .map(drop)
        .map_err(|_| ToolCallError::Invalid(format!("the {what} name is not valid UTF-8")))
}

/// What a forked child refuses before it copies a call into a frame: the same refusals, in the
/// same words, as [`ToolBridge::call_envelope`] (the parent's bridge checks everything again).
/// `Err` is the envelope to return.
pub fn precheck_call(server: &[u8], tool: &[u8], arguments_json: &[u8]) -> Result<(), String> {
    check_name(server, "server")
        .and(check_name(tool, "tool"))
        .map_err(|e| e.envelope())?;
    if arguments_json.len() > MAX_ARGUMENTS_BYTES {
        let (server, tool) = (
            String::from_utf8_lossy(server),
            String::from_utf8_lossy(tool),
        );
        return Err(arguments_too_large(&server, &tool, arguments_json.len()).envelope());
    }
    Ok(())
}

/// A server or tool name as the script sent it: UTF-8 of at most [`MAX_NAME_BYTES`].
fn name(bytes: &[u8], what: &str) -> Result<String, ToolCallError> {
    if bytes.len() > MAX_NAME_BYTES {
        return Err(ToolCallError::Invalid(format!(
            "a {what} name of {} bytes is longer than any served ({MAX_NAME_BYTES} at most)",
            bytes.len()
        )));
    }
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ToolCallError::Invalid(format!("the {what} name is not valid UTF-8")))
}

pub fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::ToolCallError;

    #[test]
    fn an_error_envelope_carries_the_words_and_the_kind() {
        let e = ToolCallError::Denied("fs.write_file is denied by the rule \"write_*\"".into());
        let envelope: serde_json::Value = serde_json::from_str(&e.envelope()).unwrap();
        assert_eq!(
            envelope,
            serde_json::json!({"ok": false, "error": e.message(), "kind": "denied"})
        );
        assert_eq!(e.to_string(), e.message());
    }
}
