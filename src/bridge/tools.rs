//! The tool side of the bridge: what Python may call, described without any MCP wire types.
//!
//! The bridge's ops reach downstream servers only through [`ToolHost`], handed to the sandbox by
//! whoever creates it: the hub in production, a small in-memory host in tests. Nothing here knows
//! V8, so the shaping of results is tested without an isolate.

use super::memory::MemoryBudget;
use futures::future::BoxFuture;
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
    pub tools: Vec<ToolSpec>,
}

/// Why a tool call failed, in words the script's author can act on.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct ToolCallError(pub String);

/// Access to downstream tools. Implementations must be cheap to call from any thread: the future
/// is polled on the sandbox's own thread.
pub trait ToolHost: Send + Sync + 'static {
    /// The servers serving tools now.
    fn catalog(&self) -> Vec<ServerCatalog>;

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
        Box::pin(async move { Err(ToolCallError(message)) })
    }
}

/// One call made by a script, as reported back to the MCP client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ToolCallRecord {
    pub server: String,
    pub tool: String,
    pub ms: f64,
    pub ok: bool,
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
    host: Arc<std::sync::RwLock<Arc<dyn ToolHost>>>,
    pub calls: Arc<std::sync::Mutex<Vec<ToolCallRecord>>>,
    /// Calls started, finished or not: a slot is taken before a call begins, so the cap holds
    /// however many calls run at once.
    started: Arc<std::sync::atomic::AtomicUsize>,
    pub max_calls: usize,
}

impl ToolBridge {
    pub fn new(host: Arc<dyn ToolHost>) -> Self {
        Self {
            host: Arc::new(std::sync::RwLock::new(host)),
            calls: Default::default(),
            started: Default::default(),
            max_calls: 1000,
        }
    }

    pub fn host(&self) -> Arc<dyn ToolHost> {
        self.host.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_host(&self, host: Arc<dyn ToolHost>) {
        *self.host.write().unwrap_or_else(|p| p.into_inner()) = host;
    }

    /// Makes one call and returns the JSON envelope Python unwraps:
    /// `{"ok": true, "value": ...}` or `{"ok": false, "error": "..."}`.
    pub async fn call_envelope(
        &self,
        server: String,
        tool: String,
        arguments_json: String,
        budget: &Arc<MemoryBudget>,
    ) -> String {
        let started = Instant::now();
        let result = self.call(&server, &tool, arguments_json, budget).await;
        let record = ToolCallRecord {
            server,
            tool,
            ms: round_ms(started.elapsed()),
            ok: result.is_ok(),
        };
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
        let envelope = match result {
            Ok(value) => serde_json::json!({"ok": true, "value": value}),
            Err(e) => serde_json::json!({"ok": false, "error": e.0}),
        };
        envelope.to_string()
    }

    async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments_json: String,
        budget: &Arc<MemoryBudget>,
    ) -> Result<Value, ToolCallError> {
        let slot = self
            .started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max_calls).then_some(n + 1)
            });
        if slot.is_err() {
            return Err(ToolCallError(format!(
                "this script already started {} tool calls, the most one execution may make",
                self.max_calls
            )));
        }
        if arguments_json.len() > MAX_ARGUMENTS_BYTES {
            return Err(ToolCallError(format!(
                "the arguments of {server}.{tool} are {} bytes of JSON, more than the {} MiB one call may send",
                arguments_json.len(),
                MAX_ARGUMENTS_BYTES >> 20
            )));
        }
        let _held = budget
            .reserve(arguments_json.len().saturating_mul(PARSED_ARGUMENTS_FACTOR))
            .ok_or_else(|| {
                ToolCallError(format!(
                    "not enough memory left (--memory-mb) to send {} bytes of arguments to {server}.{tool}",
                    arguments_json.len()
                ))
            })?;
        let arguments = match serde_json::from_str(&arguments_json) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(ToolCallError(format!(
                    "arguments must be a JSON object, got {other}"
                )))
            }
            Err(e) => return Err(ToolCallError(format!("arguments are not valid JSON: {e}"))),
        };
        self.host().call(server, tool, arguments).await
    }
}

pub fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}
