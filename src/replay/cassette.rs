//! The cassette file: JSON lines. Line 1 is the header (format and version, the execution's id,
//! seed, script and limits, the catalogue the script could see); then one line per tool call, in
//! the order the calls started (`seq` 1, 2, …; call `n` is on line `n + 1`).
//!
//! Read and written only here. Every error names the file, and the line where one is at fault.

use crate::bridge::signature::assign_python_names;
use crate::bridge::{ServerCatalog, ToolSpec};
use crate::hub::shape::printable;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The header's `format`: what tells a cassette from any other JSON lines.
pub const FORMAT: &str = "mcp-code-mode cassette";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

/// One recorded execution: its header and its calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Cassette {
    pub header: Header,
    pub calls: Vec<Call>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The execution's id (a served execution's report names it; `serve --record-dir` names the
    /// file after it).
    pub execution_id: String,
    /// When it was recorded (RFC 3339, UTC): for people; a replay does not read it.
    pub recorded_at: String,
    /// The `--seed` it ran with, if any: a replay uses it unless given another.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The script, so `run --replay FILE` can run it again without the file it came from.
    #[serde(default)]
    pub script: Option<Script>,
    #[serde(default)]
    pub limits: Option<RecordedLimits>,
    /// The `--redact` keys it was recorded with: a replay redacts arguments alike before it
    /// compares them.
    #[serde(default)]
    pub redacted_keys: Vec<String>,
    /// The servers the script could call, with their tools, as it saw them.
    #[serde(default)]
    pub servers: Vec<ServerCatalog>,
    /// Servers configured but not serving tools when the script looked, and why.
    #[serde(default)]
    pub unavailable: Vec<Unavailable>,
    /// Servers the script waited for that never came up, and what the wait answered.
    #[serde(default)]
    pub waits: Vec<Wait>,
    /// How many call lines follow: a file cut short is told from a run with fewer calls.
    pub calls: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Script {
    /// The name tracebacks use (`script.py`, `<stdin>`, `<code>` for `execute_code`).
    pub filename: String,
    pub code: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RecordedLimits {
    pub timeout_s: f64,
    pub memory_mb: u64,
    pub max_output: usize,
}

impl From<&crate::engine::Limits> for RecordedLimits {
    fn from(limits: &crate::engine::Limits) -> Self {
        Self {
            timeout_s: limits.timeout.as_secs_f64(),
            memory_mb: limits.memory_mb,
            max_output: limits.max_output,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unavailable {
    pub server: String,
    /// As the script read it: "disabled", "starting", "not running: …".
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    pub server: String,
    pub error: String,
}

/// One tool call, one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// Its place in the order calls started, from 1.
    pub seq: usize,
    pub server: String,
    pub tool: String,
    /// As sent (redacted: see `Redactor`).
    pub arguments: Map<String, Value>,
    /// What Python received: present (even `null`) exactly when the call succeeded.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<Value>,
    /// The `ToolError` message, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the server took (for people: a replay answers at once).
    pub ms: f64,
    /// Its place in the order calls completed, from 1; absent when the script ended first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<usize>,
    /// How many calls had completed when this one started: those it may have depended on.
    pub after: usize,
}

/// A field that is present, whatever its value (`null` included), is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Call {
    /// The answer Python received: `Ok(result)` or `Err(message)`; `None` when it never came.
    pub fn answer(&self) -> Option<Result<Value, String>> {
        match (&self.result, &self.error) {
            (Some(result), _) => Some(Ok(result.clone())),
            (None, Some(error)) => Some(Err(error.clone())),
            (None, None) => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CassetteError {
    /// The io error is not in the message: it is the source, which `{:#}` prints once.
    #[error("cannot read cassette {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cassette {}: line {line}: {message}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("cassette {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("cannot write cassette {}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Cassette {
    /// Reads and checks the cassette at `path`.
    pub fn load(path: &Path) -> Result<Self, CassetteError> {
        let text = std::fs::read_to_string(path).map_err(|source| CassetteError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|(line, message)| match line {
            Some(line) => CassetteError::Line {
                path: path.to_path_buf(),
                line,
                message,
            },
            None => CassetteError::File {
                path: path.to_path_buf(),
                message,
            },
        })
    }

    /// Parses cassette text; an error says which line (`None`: the file as a whole) and why.
    pub fn parse(text: &str) -> Result<Self, (Option<usize>, String)> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, line)| (i + 1, line))
            .filter(|(_, line)| !line.trim().is_empty());
        let Some((first, header_line)) = lines.next() else {
            return Err((None, "is empty: not a cassette".into()));
        };
        let header_json: Value = serde_json::from_str(header_line)
            .map_err(|e| (Some(first), format!("not JSON: {}", json_error(&e))))?;
        if header_json.get("format").and_then(Value::as_str) != Some(FORMAT) {
            return Err((
                Some(first),
                format!("not a cassette (its first line has no \"format\": \"{FORMAT}\")"),
            ));
        }
        match header_json.get("version").and_then(Value::as_u64) {
            Some(v) if v == u64::from(VERSION) => {}
            Some(v) => {
                return Err((
                    Some(first),
                    format!("format version {v}; this mcp-code-mode reads version {VERSION}"),
                ))
            }
            None => return Err((Some(first), "the header has no \"version\"".into())),
        }
        let mut header: Header = serde_json::from_value(header_json)
            .map_err(|e| (Some(first), format!("a bad header: {e}")))?;
        for server in &header.servers {
            if !crate::config::valid_name(&server.server) {
                return Err((
                    Some(first),
                    format!("server name {:?} is not one a config allows", server.server),
                ));
            }
            if let Some(tool) = server.tools.iter().find(|t| t.name.is_empty()) {
                return Err((
                    Some(first),
                    format!(
                        "server {:?} lists a tool without a name: {tool:?}",
                        server.server
                    ),
                ));
            }
        }
        served_as_the_hub_serves(&mut header.servers);

        let mut calls = Vec::with_capacity(header.calls.min(1 << 16));
        for (line, text) in lines {
            let call: Call = serde_json::from_str(text)
                .map_err(|e| (Some(line), format!("not a call: {}", json_error(&e))))?;
            let expected = calls.len() + 1;
            if call.seq != expected {
                return Err((
                    Some(line),
                    format!("call seq {}, expected {expected}", call.seq),
                ));
            }
            match (call.done, &call.result, &call.error) {
                (Some(_), Some(_), Some(_)) => {
                    return Err((Some(line), "has both a result and an error".into()))
                }
                (Some(_), None, None) => {
                    return Err((
                        Some(line),
                        "a completed call (\"done\") needs a result or an error".into(),
                    ))
                }
                (None, Some(_), _) | (None, _, Some(_)) => {
                    return Err((
                        Some(line),
                        "an answered call needs its place in the completion order (\"done\")"
                            .into(),
                    ))
                }
                _ => {}
            }
            calls.push(call);
        }
        if calls.len() != header.calls {
            return Err((
                None,
                format!(
                    "the header announces {} call(s) but {} follow: the file is incomplete",
                    header.calls,
                    calls.len()
                ),
            ));
        }
        // The completion order is 1..=n over the completed calls, each once.
        let mut done: Vec<usize> = calls.iter().filter_map(|c| c.done).collect();
        done.sort_unstable();
        if let Some((i, d)) = done.iter().enumerate().find(|(i, d)| **d != i + 1) {
            let line = calls.iter().find(|c| c.done == Some(*d)).map(|c| c.seq + 1);
            return Err((
                line,
                format!(
                    "\"done\": {d} breaks the completion order (expected {} there: each of 1..={} once)",
                    i + 1,
                    done.len()
                ),
            ));
        }
        if let Some(call) = calls.iter().find(|c| c.after > done.len()) {
            return Err((
                Some(call.seq + 1),
                format!(
                    "\"after\": {} is more than the {} calls that completed",
                    call.after,
                    done.len()
                ),
            ));
        }
        Ok(Self { header, calls })
    }

    /// The JSON lines: the header, then each call.
    pub fn to_jsonl(&self) -> String {
        let mut header = self.header.clone();
        header.calls = self.calls.len();
        let mut out = serde_json::to_string(&header).expect("a header serializes");
        out.push('\n');
        for call in &self.calls {
            out.push_str(&serde_json::to_string(call).expect("a call serializes"));
            out.push('\n');
        }
        out
    }

    /// Writes the cassette to `path` whole or not at all: into a temporary file beside it, then
    /// renamed over it, so a reader (or a crash) never sees half a cassette.
    pub fn save(&self, path: &Path) -> Result<(), CassetteError> {
        let write_error = |source| CassetteError::Write {
            path: path.to_path_buf(),
            source,
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut file = tempfile::Builder::new()
            .prefix(".cassette-")
            .tempfile_in(dir)
            .map_err(write_error)?;
        file.write_all(self.to_jsonl().as_bytes())
            .map_err(write_error)?;
        file.persist(path).map_err(|e| write_error(e.error))?;
        Ok(())
    }
}

/// A cassette is input, as a server's tool list is: its catalogue reaches Python only through
/// the hub's rules (text without terminal control, one Python name per tool). A recorded
/// catalogue already follows them and comes out unchanged.
fn served_as_the_hub_serves(servers: &mut [ServerCatalog]) {
    for server in servers {
        server.description = printable(&server.description, true);
        let mut tools: Vec<ToolSpec> = server
            .tools
            .iter()
            .map(|tool| ToolSpec {
                description: printable(&tool.description, true),
                python_name: String::new(),
                ..tool.clone()
            })
            .collect();
        assign_python_names(&mut tools);
        server.tools = std::sync::Arc::new(tools);
    }
}

/// serde_json's message without its " at line 1 column N" (we name the line ourselves).
fn json_error(e: &serde_json::Error) -> String {
    let message = e.to_string();
    match message.rfind(" at line ") {
        Some(at) => format!("{} (column {})", &message[..at], e.column()),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn header(calls: usize) -> String {
        json!({"format": FORMAT, "version": VERSION, "execution_id": "x", "recorded_at": "now",
               "calls": calls})
        .to_string()
    }

    fn call(seq: usize, done: Option<usize>, answer: Value) -> String {
        let mut line = json!({"seq": seq, "server": "s", "tool": "t", "arguments": {}, "ms": 1.0,
                              "after": 0});
        if let Some(done) = done {
            line["done"] = json!(done);
        }
        for (k, v) in answer.as_object().unwrap() {
            line[k] = v.clone();
        }
        line.to_string()
    }

    fn error_of(text: &str) -> (Option<usize>, String) {
        Cassette::parse(text).expect_err("refused")
    }

    #[test]
    fn a_cassette_round_trips_and_a_null_result_is_a_result() {
        let text = format!(
            "{}\n{}\n{}\n{}\n",
            header(3),
            call(1, Some(2), json!({"result": null})),
            call(2, Some(1), json!({"error": "boom"})),
            call(3, None, json!({})),
        );
        let cassette = Cassette::parse(&text).expect("parses");
        assert_eq!(cassette.calls[0].answer(), Some(Ok(Value::Null)));
        assert_eq!(cassette.calls[1].answer(), Some(Err("boom".into())));
        assert_eq!(cassette.calls[2].answer(), None);
        assert_eq!(Cassette::parse(&cassette.to_jsonl()).unwrap(), cassette);
    }

    #[test]
    fn a_catalogue_is_served_as_the_hub_serves_one() {
        let mut head: Value = serde_json::from_str(&header(0)).unwrap();
        head["servers"] = json!([{"server": "s", "description": "ok", "tools": [
            {"name": "get-sum", "pythonName": "anything", "description": "adds\u{1b}[31m red"},
            {"name": "get_sum", "description": "plain"},
        ]}]);
        let cassette = Cassette::parse(&head.to_string()).unwrap();
        let tools = &cassette.header.servers[0].tools;
        assert_eq!(tools[0].description, "adds red");
        assert_eq!(
            (tools[0].python_name.as_str(), tools[1].python_name.as_str()),
            ("get_sum_2", "get_sum")
        );
        // What the hub served comes out as it went in.
        assert_eq!(
            Cassette::parse(&cassette.to_jsonl()).unwrap(),
            cassette,
            "parsing is idempotent"
        );
    }

    #[test]
    fn every_defect_names_its_line() {
        assert_eq!(error_of("").1, "is empty: not a cassette");
        assert_eq!(error_of("{not json").0, Some(1));
        assert!(error_of(r#"{"format": "other"}"#)
            .1
            .contains("not a cassette"));
        let v2 = header(0).replace("\"version\":1", "\"version\":2");
        assert!(error_of(&v2).1.contains("format version 2"), "{v2}");
        let skipped = format!(
            "{}\n{}\n",
            header(1),
            call(2, Some(1), json!({"result": 1}))
        );
        assert_eq!(
            error_of(&skipped),
            (Some(2), "call seq 2, expected 1".into())
        );
        let both = format!(
            "{}\n{}\n",
            header(1),
            call(1, Some(1), json!({"result": 1, "error": "e"}))
        );
        assert_eq!(error_of(&both).0, Some(2));
        let short = format!(
            "{}\n{}\n",
            header(2),
            call(1, Some(1), json!({"result": 1}))
        );
        assert!(error_of(&short)
            .1
            .contains("announces 2 call(s) but 1 follow"));
        let twice = format!(
            "{}\n{}\n{}\n",
            header(2),
            call(1, Some(1), json!({"result": 1})),
            call(2, Some(1), json!({"result": 2}))
        );
        assert!(error_of(&twice).1.contains("breaks the completion order"));
        let garbled = format!("{}\n{{\"seq\": 1, \"server\": 5}}\n", header(1));
        let (line, message) = error_of(&garbled);
        assert_eq!(line, Some(2));
        assert!(message.starts_with("not a call: invalid type"), "{message}");
    }
}
