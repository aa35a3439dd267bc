//! wire — the guard between a downstream server's stdio and our MCP client (rmcp).
//!
//! rmcp drops a message it cannot read (too long, not JSON, not JSON-RPC) and the call it
//! answered stays pending until its timeout. So every line a server writes passes through here
//! first: bounded, parsed, checked. A bad answer to one of our requests becomes a JSON-RPC error
//! response for that request, saying what was wrong, so the call fails at once; tool lists are
//! cleaned (bad tools skipped or degraded, pages and sizes capped); `tools/list_changed` floods
//! are coalesced. Lines we send pass through unchanged; we only note which requests are open.
//!
//! The checks themselves ([`Checker`]) are the same for a server over HTTP (`remote.rs`), where
//! they see each JSON body and each SSE event instead of each line.
//!
//! **Invariant:** memory per connection is bounded by [`MAX_LINE`] (plus one parsed copy of a
//! line under it); nothing a server writes reaches rmcp unchecked.

use parking_lot::Mutex;
use regex::bytes::Regex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};

/// Longest line accepted from a server: rmcp's own limit (16 MiB), less room for our rewrites.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024 - 64 * 1024;
/// Deepest nesting of a message; serde_json (and so rmcp) refuses past 128.
const MAX_DEPTH: usize = 100;
/// Deepest nesting of one tool's schema, and its largest JSON, before it is replaced.
const MAX_SCHEMA_DEPTH: usize = 32;
const MAX_SCHEMA_BYTES: usize = 256 * 1024;
/// Pages, tools and JSON one listing (a server's whole catalogue) may take: what bounds the
/// memory a server's tools cost us (parsed, about ten times their JSON).
const MAX_PAGES: usize = 50;
const MAX_TOOLS: usize = 10_000;
const MAX_LIST_BYTES: usize = 16 * 1024 * 1024;
/// MCP's limit on a tool name.
const MAX_NAME: usize = 128;
/// At most one `tools/list_changed` is passed on per this interval; the rest are coalesced.
const LIST_CHANGED_INTERVAL: Duration = Duration::from_secs(1);
/// How much of a line's start and end is kept to find its id when the line itself is unusable.
const ID_WINDOW: usize = 4096;

/// Our requests the server has not answered yet, by id (as JSON text).
#[derive(Default)]
struct Open {
    requests: HashMap<String, Request>,
    /// tools/list pages, tools and bytes of tools taken so far in the current listing.
    listing: Listing,
}

#[derive(Clone)]
struct Request {
    method: String,
    /// For tools/list: whether it asked for a later page (a first page restarts the count).
    continues: bool,
}

type Shared = Arc<Mutex<Open>>;

/// One connection's checks: what we asked (so an answer can be matched to its request) and how
/// far the current tool listing has come. Cheap to clone; clones share the state.
#[derive(Clone)]
pub(crate) struct Checker {
    name: String,
    open: Shared,
}

impl Checker {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            open: Shared::default(),
        }
    }

    /// Notes a message we send (a request we will expect an answer to).
    pub fn outgoing(&self, message: &Value) {
        note_outgoing(&self.open, message);
    }

    /// Checks one whole message the server sent (at most [`MAX_LINE`] bytes, which the caller
    /// bounds).
    pub fn incoming(&self, bytes: &[u8]) -> Checked {
        check_bytes(&self.name, bytes, &self.open)
    }
}

/// Puts the guard between `server_out`/`server_in` (the child's stdout and stdin) and returns
/// the stream rmcp should use instead. Both directions end when either side closes.
pub(crate) fn guard<R, W>(name: &str, server_out: R, server_in: W) -> DuplexStream
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_end, our_end) = tokio::io::duplex(1 << 20);
    let (from_rmcp, to_rmcp) = tokio::io::split(our_end);
    let open = Shared::default();
    tokio::spawn(outbound(from_rmcp, server_in, open.clone()));
    tokio::spawn(inbound(name.to_owned(), server_out, to_rmcp, open));
    rmcp_end
}

/// Our messages to the server: passed on as they are, noting each request we make.
async fn outbound<R, W>(from_rmcp: R, mut server_in: W, open: Shared)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(from_rmcp).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(message) = serde_json::from_str::<Value>(&line) {
            note_outgoing(&open, &message);
        }
        let sent = async {
            server_in.write_all(line.as_bytes()).await?;
            server_in.write_all(b"\n").await?;
            server_in.flush().await
        };
        if sent.await.is_err() {
            break;
        }
    }
    // Dropping `server_in` closes the server's stdin: it sees the end of the connection.
}

fn note_outgoing(open: &Shared, message: &Value) {
    let mut open = open.lock();
    match (
        message.get("method").and_then(Value::as_str),
        message.get("id"),
    ) {
        (Some(method), Some(id)) => {
            let continues = message
                .pointer("/params/cursor")
                .is_some_and(|c| !c.is_null());
            if method == "tools/list" && !continues {
                open.listing = Listing::default();
            }
            open.requests.insert(
                id.to_string(),
                Request {
                    method: method.to_owned(),
                    continues,
                },
            );
        }
        (Some("notifications/cancelled"), None) => {
            if let Some(id) = message.pointer("/params/requestId") {
                open.requests.remove(&id.to_string());
            }
        }
        _ => {}
    }
}

/// The server's messages to us: each line bounded and checked before rmcp reads it.
async fn inbound<R, W>(name: String, server_out: R, mut to_rmcp: W, open: Shared)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::with_capacity(64 * 1024, server_out);
    let mut line = BoundedLine::default();
    // A list_changed held back by the coalescing, and when the next may go.
    let mut held_change = false;
    let mut next_change = tokio::time::Instant::now();
    loop {
        let read = tokio::select! {
            read = line.read(&mut reader) => read,
            _ = tokio::time::sleep_until(next_change), if held_change => {
                held_change = false;
                next_change = tokio::time::Instant::now() + LIST_CHANGED_INTERVAL;
                let change = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
                if send(&mut to_rmcp, &change).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let forwarded = match read {
            Ok(false) => break,
            Err(_) => break,
            Ok(true) => {
                let checked = check_line(&name, &line, &open);
                line.clear();
                match checked {
                    Checked::Forward(bytes) => send_bytes(&mut to_rmcp, &bytes).await,
                    Checked::Reply(messages) => {
                        let mut sent = Ok(());
                        for message in messages {
                            sent = send(&mut to_rmcp, &message).await;
                        }
                        sent
                    }
                    Checked::ListChanged => {
                        let now = tokio::time::Instant::now();
                        if now >= next_change && !held_change {
                            next_change = now + LIST_CHANGED_INTERVAL;
                            send_bytes(
                                &mut to_rmcp,
                                br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
                            )
                            .await
                        } else {
                            held_change = true;
                            Ok(())
                        }
                    }
                    Checked::Drop => Ok(()),
                }
            }
        };
        if forwarded.is_err() {
            break;
        }
    }
    // Dropping `to_rmcp` ends rmcp's stream: the connection reads as closed.
}

async fn send<W: AsyncWrite + Unpin>(to: &mut W, message: &Value) -> std::io::Result<()> {
    send_bytes(to, message.to_string().as_bytes()).await
}

async fn send_bytes<W: AsyncWrite + Unpin>(to: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    to.write_all(bytes).await?;
    to.write_all(b"\n").await?;
    to.flush().await
}

/// One line read without ever holding more than [`MAX_LINE`] of it; of a longer one only the
/// start and the end are kept (to find its id) and its length.
#[derive(Default)]
struct BoundedLine {
    bytes: Vec<u8>,
    len: usize,
    tail: Vec<u8>,
}

impl BoundedLine {
    fn oversized(&self) -> bool {
        self.len > MAX_LINE
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.tail.clear();
        self.len = 0;
    }

    /// Reads up to the next newline: `Ok(true)` a line, `Ok(false)` the end of the stream.
    /// Cancel-safe: what was read stays in `self` for the next call.
    async fn read<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut BufReader<R>,
    ) -> std::io::Result<bool> {
        loop {
            let chunk = reader.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(self.len > 0);
            }
            let (used, ended) = match chunk.iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (chunk.len(), false),
            };
            let piece = &chunk[..if ended { used - 1 } else { used }];
            self.len += piece.len();
            if self.len <= MAX_LINE {
                self.bytes.extend_from_slice(piece);
            } else {
                if self.bytes.len() > ID_WINDOW {
                    // Over the limit: from now on keep only the start and a rolling end.
                    self.tail = self.bytes.split_off(self.bytes.len() - ID_WINDOW);
                    self.bytes.truncate(ID_WINDOW);
                    self.bytes.shrink_to_fit();
                }
                self.tail.extend_from_slice(piece);
                if self.tail.len() > 2 * ID_WINDOW {
                    self.tail.drain(..self.tail.len() - ID_WINDOW);
                }
            }
            reader.consume(used);
            if ended {
                return Ok(true);
            }
        }
    }
}

pub(crate) enum Checked {
    /// The line as it came (or as rewritten).
    Forward(Vec<u8>),
    /// Instead of the line: error responses for the requests it failed to answer.
    Reply(Vec<Value>),
    ListChanged,
    Drop,
}

fn check_line(name: &str, line: &BoundedLine, open: &Shared) -> Checked {
    if line.oversized() {
        let reason = format!(
            "its response was too large ({}; the limit is {})",
            megabytes(line.len),
            megabytes(MAX_LINE)
        );
        return fail_unreadable(name, &line.bytes, &line.tail, open, &reason);
    }
    check_bytes(name, &line.bytes, open)
}

fn check_bytes(name: &str, bytes: &[u8], open: &Shared) -> Checked {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Checked::Drop;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let reason = format!(
                "its response is not valid UTF-8 (at byte {})",
                e.valid_up_to()
            );
            return fail_unreadable(name, bytes, &[], open, &reason);
        }
    };
    let message: Value = match serde_json::from_str(text) {
        Ok(message) => message,
        Err(e) => {
            let reason = if e.to_string().contains("recursion limit") {
                format!("its response is nested deeper than {MAX_DEPTH} levels")
            } else {
                format!("its response is not JSON ({e})")
            };
            return fail_unreadable(name, bytes, &[], open, &reason);
        }
    };
    if depth(&message) > MAX_DEPTH {
        let reason = format!("its response is nested deeper than {MAX_DEPTH} levels");
        return match message.get("id").filter(|id| is_open(open, id)) {
            Some(id) => answer_error(open, id, &reason),
            None => fail_unreadable(name, bytes, &[], open, &reason),
        };
    }
    check_message(name, message, bytes, open)
}

fn check_message(name: &str, message: Value, bytes: &[u8], open: &Shared) -> Checked {
    let Value::Object(object) = &message else {
        if let Value::Array(_) = message {
            let reason = "it sent a JSON-RPC batch, which MCP does not use";
            return fail_unreadable(name, bytes, &[], open, reason);
        }
        return fail_unreadable(name, bytes, &[], open, "its message is not a JSON object");
    };
    let version_ok = object.get("jsonrpc") == Some(&Value::from("2.0"));
    if let Some(method) = object.get("method").and_then(Value::as_str) {
        // A request or notification from the server: rmcp answers or handles it.
        if !version_ok {
            tracing::debug!(target: "downstream", server = %name, "dropped a message without \"jsonrpc\": \"2.0\"");
            return Checked::Drop;
        }
        if method == "notifications/tools/list_changed" {
            return Checked::ListChanged;
        }
        return Checked::Forward(bytes.to_vec());
    }
    // A response: it must answer one of our open requests, and be well formed.
    let id = object
        .get("id")
        .filter(|id| id.is_string() || id.is_number());
    let Some(id) = id else {
        let why = object
            .get("error")
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        let reason = format!("it answered without a request id{why}");
        return fail_all(name, open, &reason);
    };
    if !is_open(open, id) {
        tracing::debug!(target: "downstream", server = %name, "dropped a response to no open request ({id})");
        return Checked::Drop;
    }
    let problem = if !version_ok {
        Some("it lacks \"jsonrpc\": \"2.0\"".to_owned())
    } else {
        match (object.get("result"), object.get("error")) {
            (Some(_), Some(_)) => Some("it has both a result and an error".to_owned()),
            (None, None) => Some("it has neither a result nor an error".to_owned()),
            (None, Some(error)) => {
                let code_ok = error.get("code").is_some_and(|c| c.is_i64());
                let message_ok = error.get("message").is_some_and(Value::is_string);
                (!code_ok || !message_ok)
                    .then(|| "its error lacks an integer code or a message".to_owned())
            }
            (Some(_), None) => None,
        }
    };
    if let Some(problem) = problem {
        return answer_error(
            open,
            id,
            &format!("its response is not valid JSON-RPC: {problem}"),
        );
    }
    let request = open.lock().requests.remove(&id.to_string());
    match request {
        Some(request) if request.method == "tools/list" && object.contains_key("result") => {
            let mut message = message;
            clean_tool_list(name, &mut message, request.continues, open);
            Checked::Forward(message.to_string().into_bytes())
        }
        _ => Checked::Forward(bytes.to_vec()),
    }
}

fn is_open(open: &Shared, id: &Value) -> bool {
    open.lock().requests.contains_key(&id.to_string())
}

/// An error response for request `id`, which rmcp hands to whoever made the request.
fn answer_error(open: &Shared, id: &Value, reason: &str) -> Checked {
    open.lock().requests.remove(&id.to_string());
    Checked::Reply(vec![error_response(id, reason)])
}

fn error_response(id: &Value, reason: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": reason}})
}

/// A line we cannot read: fail the open request it most likely answers (its id, found in the
/// start or end of the line), or, failing that, every open request, rather than leave them
/// waiting for an answer that has already come and gone.
fn fail_unreadable(name: &str, head: &[u8], tail: &[u8], open: &Shared, reason: &str) -> Checked {
    static FIRST_ID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"^\s*\{\s*(?:"jsonrpc"\s*:\s*"[^"]*"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")"#)
            .expect("a valid regex")
    });
    static LAST_ID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#""id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")\s*[,}]?\s*(?:"jsonrpc"\s*:\s*"[^"]*"\s*)?\}\s*$"#)
            .expect("a valid regex")
    });
    let end = if tail.is_empty() {
        &head[head.len().saturating_sub(ID_WINDOW)..]
    } else {
        tail
    };
    let candidates = [FIRST_ID.captures(head), LAST_ID.captures(end)];
    for captures in candidates.into_iter().flatten() {
        let id = serde_json::from_slice::<Value>(&captures[1]);
        if let Ok(id) = id {
            if is_open(open, &id) {
                return answer_error(open, &id, reason);
            }
        }
    }
    fail_all(name, open, reason)
}

fn fail_all(name: &str, open: &Shared, reason: &str) -> Checked {
    let failed: Vec<Value> = open
        .lock()
        .requests
        .drain()
        .filter_map(|(id, _)| serde_json::from_str::<Value>(&id).ok())
        .map(|id| {
            error_response(
                &id,
                &format!(
                    "{reason} (it could not be matched to one request, so every open one fails)"
                ),
            )
        })
        .collect();
    if failed.is_empty() {
        tracing::warn!(target: "downstream", server = %name, "dropped an unreadable message: {reason}");
        return Checked::Drop;
    }
    Checked::Reply(failed)
}

/// How far the current tools/list listing has come.
#[derive(Debug, Clone, Copy, Default)]
struct Listing {
    pages: usize,
    tools: usize,
    bytes: usize,
}

/// Makes a tools/list result safe for rmcp and for us: tools that cannot be used are skipped,
/// schemas that are not objects or are too deep or large are replaced by an open object (so the
/// tool stays callable, its arguments unchecked), and the listing is capped. Says what it did.
fn clean_tool_list(name: &str, message: &mut Value, continues: bool, open: &Shared) {
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
        return;
    };
    let listed = match result.remove("tools") {
        Some(Value::Array(tools)) => tools,
        _ => Vec::new(),
    };
    let Listing {
        pages,
        tools: taken,
        mut bytes,
    } = {
        let mut open = open.lock();
        if !continues {
            open.listing = Listing::default();
        }
        open.listing.pages += 1;
        open.listing
    };
    let mut kept = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut cut = false;
    for tool in listed {
        if taken + kept.len() >= MAX_TOOLS || bytes >= MAX_LIST_BYTES {
            cut = true;
            break;
        }
        match clean_tool(tool) {
            Ok((tool, note)) => {
                if let Some(note) = note {
                    tracing::warn!(target: "downstream", server = %name, "tool {note}");
                }
                bytes += tool.to_string().len();
                kept.push(tool);
            }
            Err(why) => skipped.push(why),
        }
    }
    if !skipped.is_empty() {
        tracing::warn!(
            target: "downstream",
            server = %name,
            "skipped {} tool(s) that cannot be used: {}",
            skipped.len(),
            skipped.join("; ")
        );
    }
    {
        let mut open = open.lock();
        open.listing.tools = taken + kept.len();
        open.listing.bytes = bytes;
    }
    if cut {
        tracing::warn!(
            target: "downstream",
            server = %name,
            "kept the first {} tools (at most {MAX_TOOLS} and {} of JSON per server); the rest are not offered",
            taken + kept.len(),
            megabytes(MAX_LIST_BYTES)
        );
    }
    if cut {
        result.remove("nextCursor");
    } else if pages >= MAX_PAGES && result.remove("nextCursor").is_some() {
        tracing::warn!(
            target: "downstream",
            server = %name,
            "stopped listing tools after {MAX_PAGES} pages; the rest are not offered"
        );
    }
    result.insert("tools".into(), Value::Array(kept));
}

/// One listed tool, usable (with a note saying what was changed) or not (with why).
fn clean_tool(tool: Value) -> Result<(Value, Option<String>), String> {
    let Value::Object(mut tool) = tool else {
        return Err(format!("{} is not a tool object", kind(&tool)));
    };
    let name = match tool.get("name") {
        Some(Value::String(name)) => name.clone(),
        other => {
            return Err(format!(
                "a tool whose name is {}",
                other.map_or("missing".to_owned(), kind)
            ))
        }
    };
    if name.chars().count() > MAX_NAME {
        let shown: String = name.chars().take(40).collect();
        return Err(format!(
            "{shown:?}… has a name longer than {MAX_NAME} characters"
        ));
    }
    if !matches!(tool.get("description"), None | Some(Value::String(_))) {
        tool.remove("description");
    }
    let mut notes = Vec::new();
    match schema_problem(tool.get("inputSchema")) {
        None => {}
        Some(problem) => {
            tool.insert("inputSchema".into(), json!({"type": "object"}));
            notes.push(format!(
                "its inputSchema {problem}; its arguments are not checked"
            ));
        }
    }
    if tool.get("outputSchema").is_some_and(|s| !s.is_null()) {
        if let Some(problem) = schema_problem(tool.get("outputSchema")) {
            tool.remove("outputSchema");
            notes.push(format!("its outputSchema {problem} and is ignored"));
        }
    }
    if !matches!(tool.get("annotations"), None | Some(Value::Object(_))) {
        tool.remove("annotations");
    }
    if notes.is_empty() {
        return Ok((Value::Object(tool), None));
    }
    let note = notes.join("; ");
    let description = tool
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    tool.insert(
        "description".into(),
        Value::from(
            format!("{description}\n\n[mcp-code-mode: {note}]")
                .trim_start()
                .to_owned(),
        ),
    );
    Ok((Value::Object(tool), Some(format!("{name:?}: {note}"))))
}

fn schema_problem(schema: Option<&Value>) -> Option<String> {
    match schema {
        None => Some("is missing".into()),
        Some(Value::Object(_)) => {
            let schema = schema.expect("matched");
            if depth(schema) > MAX_SCHEMA_DEPTH {
                Some(format!("is nested deeper than {MAX_SCHEMA_DEPTH} levels"))
            } else if schema.to_string().len() > MAX_SCHEMA_BYTES {
                Some(format!("is larger than {} KiB", MAX_SCHEMA_BYTES / 1024))
            } else {
                None
            }
        }
        Some(other) => Some(format!("is {}, not an object", kind(other))),
    }
}

fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// How deeply `value` nests arrays and objects (a scalar is 0), without recursing.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(level + 1);
        stack.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}

fn megabytes(bytes: usize) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({"a": [1, {"b": {}}]})), 4); // an empty container is a level too
    }

    #[test]
    fn a_broken_tool_is_degraded_or_skipped_not_the_list() {
        let (tool, note) = clean_tool(json!({"name": "t", "inputSchema": "object"})).unwrap();
        assert_eq!(tool["inputSchema"], json!({"type": "object"}));
        assert!(note.unwrap().contains("is a string, not an object"));
        assert!(clean_tool(json!({"name": 42})).is_err());
        assert!(clean_tool(json!("x")).is_err());
        assert!(clean_tool(json!({"name": "n".repeat(200), "inputSchema": {}})).is_err());
    }
}
