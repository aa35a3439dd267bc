//! server — the MCP front: `execute_code` plus discovery tools, served over stdio or
//! streamable HTTP (`http`).
//!
//! The only module that knows MCP's server side. Each `execute_code` gets its own fresh sandbox
//! (several calls run at once; one slow script holds up no other), or, when it names a session
//! (`sessions`), that session's sandbox; it reports progress when the client asked for it, and
//! stops its sandbox on `notifications/cancelled`.
//! **Invariant:** nothing but MCP messages reaches stdout.

mod approval;
mod catalog;
pub mod http;
pub mod runs;
pub mod sessions;

use crate::approval::{Approvals, ApprovingHost, Described};
use crate::bridge::view::PythonView;
use crate::bridge::{ServerCatalog, ToolCallRecord, ToolHost};
use crate::engine::{ErrorInfo, InputFile, Job, Limits, Outcome, OutputLimits, Pool, RunControl};
use crate::hub::Hub;
use crate::replay::{RecordDir, RecordedLimits, Recorder, RunInfo, Script};
use futures::future::BoxFuture;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{InputResponses, RequestState};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ReadResourceRequestParams, ReadResourceResponse, RequestMetaObject,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    tool, tool_handler, tool_router, ErrorData as McpError, Peer, RoleServer, ServerHandler,
    ServiceExt,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sessions::{Lease, Owner, Sessions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What `execute_code` returns, as structured content (and as its JSON text copy).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecutionReport {
    /// What the script printed to stdout (truncated past the output cap, with a notice).
    pub stdout: String,
    /// What the script printed to stderr.
    pub stderr: String,
    /// The value of the script's last expression: JSON where it converts, else its repr.
    pub result: Value,
    /// The exception that ended the script (or the limit it hit), else null.
    pub error: Option<ErrorInfo>,
    /// Every tool call the script made, in order.
    pub tool_calls: Vec<ToolCallRecord>,
    pub duration_ms: f64,
    /// This execution's id. With `serve --record-dir DIR`, its cassette is `DIR/<id>.jsonl`,
    /// which `mcp-code-mode run --replay` runs again without any server.
    pub execution_id: String,
    /// The files the script created or changed under /output/, each also a resource_link
    /// content block (read it with resources/read; small images come as image content too).
    pub outputs: Vec<OutputInfo>,
    /// Files under /output/ that were not returned, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs_dropped: Vec<String>,
    /// stdout, stderr or result too large to show whole: what is shown, and where the whole is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<Truncated>,
    /// The session this call ran in (pass it as `session` to go on in it), else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Set when this call ended its session (a limit it hit), saying why: the session's
    /// globals and files are gone, and its id takes no more calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_ended: Option<String>,
}

/// A file the script left under /output/.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OutputInfo {
    /// Relative to /output/.
    pub path: String,
    /// Read it with resources/read (in pages of 256 KiB: `?page=N`).
    pub uri: String,
    pub mime_type: String,
    pub size: usize,
}

/// A field of the report shown in part; the whole is a resource.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Truncated {
    /// `stdout`, `stderr` or `result`.
    pub field: String,
    /// The whole field's size (for `result`, of its JSON).
    pub bytes: usize,
    /// The whole, readable with resources/read as `<uri>?page=1` to `?page=<pages>`.
    pub uri: String,
    pub pages: usize,
    pub page_bytes: usize,
    /// What was cut, in words.
    pub note: String,
}

/// What the report says of the call's session.
#[derive(Default)]
struct SessionNote {
    id: Option<String>,
    ended: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecuteCodeArgs {
    /// Python 3.14 source. Call tools as `tools.<server>.<tool>(arg=...)` (or `await` them);
    /// `print` what you want to read; the last expression's value is returned as `result`.
    pub code: String,
    /// Seconds the script may run (default: the server's --timeout; at most --max-timeout).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Files put in the script's working directory before it runs, by relative path (no `..`,
    /// no leading `/`): the file's text as a string, or `{"base64": "..."}` for binary
    /// content, e.g. {"data.csv": "a,b\n1,2\n", "logo.png": {"base64": "iVBORw0..."}}. Each file
    /// and all of them together are capped (the server's --max-file-bytes, --max-files-bytes).
    /// What the script writes under /output/ comes back as resource links.
    #[serde(default)]
    #[schemars(with = "Option<std::collections::BTreeMap<String, FileContent>>")]
    pub files: Option<Map<String, Value>>,
    /// "new" starts a session: the report's `session` is its id. Pass that id in later calls to
    /// run them in the same interpreter (globals, imports and files kept; calls run one at a
    /// time). Leave out for a fresh sandbox that is gone after the call.
    #[serde(default)]
    pub session: Option<String>,
}

/// A file's content in `execute_code`'s `files`.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only its schema is used: `files` is read by `read_files`, for clear errors
pub enum FileContent {
    /// The file's text (written as UTF-8).
    Text(String),
    /// Binary content.
    Base64 {
        /// The bytes, base64 (standard alphabet).
        base64: String,
    },
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SessionArgs {
    /// The session's id, from an execute_code report's `session`.
    pub session: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListToolsArgs {
    /// Only this server's tools (default: all servers).
    #[serde(default)]
    pub server: Option<String>,
    /// Skip this many tool lines: a long listing ends by naming the offset that continues it.
    #[serde(default)]
    pub offset: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema, Clone, Copy, Default, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    /// `tools.server.tool` names only.
    Name,
    /// Python signatures with the first line of each description.
    #[default]
    Signature,
    /// Signatures with the whole docstring.
    Full,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchToolsArgs {
    /// Words to look for in tool names and descriptions.
    pub query: String,
    /// How much to show of each match.
    #[serde(default)]
    pub detail: Detail,
    /// At most this many matches (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetSignaturesArgs {
    /// Tool names as `server.tool` (Python or MCP spelling), or a bare tool name when unique.
    pub names: Vec<String>,
}

/// Server-wide settings from the command line.
#[derive(Clone)]
pub struct ServeOptions {
    pub limits: Limits,
    pub max_timeout: Duration,
    /// `--record-dir`: where each execution's cassette is kept, and what is kept out of it.
    pub record: Option<Arc<RecordDir>>,
    /// The tools' approval policies (the config's, and `--approve-all`).
    pub approvals: Arc<Approvals>,
    /// Files in and out, large results, and how long what they leave is kept.
    pub data: DataOptions,
    /// `execute_code`'s sessions (shared by every client, each reaching only its own); None
    /// where there are none (the local executor).
    pub sessions: Option<Arc<Sessions>>,
    /// `--seed`: every sandbox (each call's, each session's) draws all its randomness from it.
    pub seed: Option<u64>,
}

/// `execute_code`'s files in and out, and what its report shows inline.
#[derive(Debug, Clone, Copy)]
pub struct DataOptions {
    /// The most one file may have, in (`files`) or out (`/output/`).
    pub max_file_bytes: usize,
    /// The most all files of one call may have together, in, and out.
    pub max_files_bytes: usize,
    /// The most files one call returns from /output/.
    pub max_output_files: usize,
    /// stdout, stderr or a result's JSON past this many bytes is shown in part, with a link.
    pub inline_bytes: usize,
    /// How long, and how much of, what executions leave is kept.
    pub keep: runs::Keep,
}

impl Default for DataOptions {
    fn default() -> Self {
        let outputs = OutputLimits::default();
        Self {
            max_file_bytes: outputs.max_file_bytes,
            max_files_bytes: outputs.max_total_bytes,
            max_output_files: outputs.max_files,
            inline_bytes: 16 << 10,
            keep: runs::Keep {
                time: Duration::from_secs(3600),
                bytes: 256 << 20,
            },
        }
    }
}

impl DataOptions {
    fn output_limits(&self) -> OutputLimits {
        OutputLimits {
            max_files: self.max_output_files,
            max_file_bytes: self.max_file_bytes,
            max_total_bytes: self.max_files_bytes,
        }
    }

    /// `execute_code`'s `files`, checked: names, content shape, sizes. The error names the file
    /// and the limit.
    fn read_files(&self, files: Map<String, Value>) -> Result<Vec<InputFile>, String> {
        let mut read = Vec::with_capacity(files.len());
        let mut total = 0usize;
        for (path, content) in files {
            crate::engine::files::check_relative_path(&path)
                .map_err(|why| format!("files: {path:?} is not a usable name: {why}"))?;
            let bytes = match content {
                Value::String(text) => text.into_bytes(),
                Value::Object(mut fields) if fields.len() == 1 && fields.contains_key("base64") => {
                    match fields.remove("base64") {
                        Some(Value::String(b64)) => crate::engine::files::decode_base64(&b64)
                            .map_err(|e| format!("files: {path:?}: \"base64\" is not base64: {e}"))?,
                        _ => return Err(format!("files: {path:?}: \"base64\" must be a string")),
                    }
                }
                other => {
                    return Err(format!(
                        "files: {path:?}: give the file's text as a string, or {{\"base64\": \"...\"}} for binary content; got {}",
                        crate::config::kind(&other)
                    ))
                }
            };
            if bytes.len() > self.max_file_bytes {
                return Err(format!(
                    "files: {path:?} is {} bytes, more than the {} one file may have (the server's --max-file-bytes)",
                    bytes.len(),
                    self.max_file_bytes
                ));
            }
            total += bytes.len();
            if total > self.max_files_bytes {
                return Err(format!(
                    "files: together they come to more than the {} bytes all files of one call may have (the server's --max-files-bytes; {path:?} went past it)",
                    self.max_files_bytes
                ));
            }
            read.push(InputFile { path, bytes });
        }
        Ok(read)
    }
}

#[derive(Clone)]
pub struct CodeModeServer {
    hub: Arc<Hub>,
    pool: Arc<Pool>,
    options: ServeOptions,
    /// Cancelled when the server drains for shutdown: no new execution starts (shared by every
    /// session's copy).
    draining: CancellationToken,
    /// Over HTTP, this session's copy: its peer is told of tools/list_changed until the session
    /// ends (stdio announces to its one peer from `serve_stdio`).
    session: Option<Session>,
    /// Who this copy's code sessions belong to: the stdio client, or this HTTP session.
    owner: Owner,
    /// Why this server keeps no code sessions, when it keeps none (the local executor, or
    /// stateless HTTP, where no request knows the one before).
    no_sessions: Option<&'static str>,
    /// The catalogue with each tool's policy shown, and executions paused on an approval.
    described: Arc<Described>,
    paused: approval::Paused,
    /// What executions left to read (shared by every session's copy; each reads only its own).
    runs: Arc<runs::RunStore>,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl CodeModeServer {
    pub fn new(hub: Arc<Hub>, pool: Arc<Pool>, options: ServeOptions) -> Self {
        let no_sessions = pool.local_python().is_some().then_some(
            "the local executor (--executor local) keeps no sessions: each script runs in a fresh host Python process",
        );
        Self {
            hub,
            pool,
            draining: CancellationToken::new(),
            session: None,
            owner: Owner::STDIO,
            no_sessions,
            described: Default::default(),
            paused: Default::default(),
            runs: Arc::new(runs::RunStore::new(options.data.keep)),
            tool_router: Self::tool_router(),
            options,
        }
    }

    #[tool(
        description = "Run a Python 3.14 script (Pyodide, sandboxed: no host files, no network) that calls the configured MCP servers' tools as Python functions. Pass input files with `files` (they land in the working directory); what the script writes under /output/ comes back as resource links. Large stdout, stderr or results come back cut, with a link to read the whole in pages.",
        output_schema = rmcp::handler::server::common::schema_for_output::<ExecutionReport>(),
        annotations(read_only_hint = false, destructive_hint = true, open_world_hint = true)
    )]
    #[allow(clippy::too_many_arguments)]
    async fn execute_code(
        &self,
        Parameters(args): Parameters<ExecuteCodeArgs>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
        ct: CancellationToken,
        RequestState(state): RequestState,
        InputResponses(responses): InputResponses,
    ) -> Result<CallToolResponse, McpError> {
        let asking = approval::asking(&meta, &peer);
        let approval_timeout = self.options.approvals.timeout;
        if let Some(state) = state {
            // A 2026-07-28 client's retry with the answer to an approval: carry on.
            let running = self.paused.resume(&state, responses, &args.code)?;
            return approval::drive(running, asking, &self.paused, approval_timeout, &ct).await;
        }
        if self.draining.is_cancelled() {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "the server is shutting down and starts no new executions; retry on another replica",
            )])
            .into());
        }
        let timeout = match args.timeout_s {
            None => self.options.limits.timeout,
            Some(s) if crate::config::timeout_within(s, self.options.max_timeout.as_secs_f64()) => {
                Duration::from_secs_f64(s)
            }
            Some(s) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "timeout_s must be more than 0 and at most {} (the server's --max-timeout); got {s}",
                    self.options.max_timeout.as_secs_f64()
                ))])
                .into())
            }
        };
        let session = match args.session {
            None => None,
            Some(requested) => match self.sessions_here() {
                Ok(sessions) => Some((sessions.clone(), requested)),
                Err(why) => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "{why}. Leave session out: each call then runs in a fresh sandbox"
                    ))])
                    .into())
                }
            },
        };
        let execution_id = crate::replay::new_execution_id();
        let progress = meta
            .get_progress_token()
            .map(|token| Progress::new(peer, token));
        // The approval policy stands first in front of the hub, so a recording holds what the
        // script saw: a declined call is recorded with its error.
        let control = RunControl::new();
        let (asker, questions) = tokio::sync::mpsc::unbounded_channel();
        let approving = Arc::new(ApprovingHost::new(
            self.hub.clone(),
            self.options.approvals.clone(),
            self.described.clone(),
            asking.is_some().then_some(asker),
            control.clone(),
        ));
        let recorder = self
            .options
            .record
            .as_ref()
            .map(|record| Arc::new(Recorder::new(approving.clone(), record.redactor.clone())));
        let inner: Arc<dyn ToolHost> = match &recorder {
            Some(recorder) => recorder.clone(),
            None => approving.clone(),
        };
        let tools: Arc<dyn ToolHost> = match &progress {
            Some(p) => Arc::new(ReportingHost {
                inner,
                progress: p.clone(),
            }),
            None => inner,
        };
        let files = match args.files {
            None => Vec::new(),
            Some(files) => match self.options.data.read_files(files) {
                Ok(files) => files,
                Err(message) => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into())
                }
            },
        };
        let job = Job {
            filename: "<code>".into(),
            timeout: Some(timeout),
            files,
            outputs: self.options.data.output_limits(),
            ..Job::new(args.code)
        };
        let script = recorder.is_some().then(|| Script {
            filename: job.filename.clone(),
            code: job.code.clone(),
        });
        let code = job.code.clone();
        let this = self.clone();
        // Its own task, so an execution paused on a 2026-07-28 approval outlives this request.
        // Dropping it (on cancellation) drops the sandbox, which terminates its isolate.
        let task = tokio::spawn(async move {
            let (sandbox, lease) = match session {
                None => (
                    this.pool
                        .take_seeded(tools, this.options.seed)
                        .await
                        .map_err(|e| {
                            McpError::internal_error(crate::text::Chain(&e).to_string(), None)
                        })?,
                    None,
                ),
                Some((sessions, requested)) => {
                    match session_sandbox(
                        &sessions,
                        this.owner,
                        &requested,
                        tools,
                        this.options.seed,
                    )
                    .await
                    {
                        Ok((sandbox, lease)) => (sandbox, Some(lease)),
                        Err(refused) => return Ok(refused),
                    }
                }
            };
            if let Some(p) = &progress {
                p.send("running".into()).await;
            }
            let (mut outcome, note) = match lease {
                None => (
                    sandbox.execute_with(job, control).await,
                    SessionNote::default(),
                ),
                Some(lease) => {
                    let mut sandbox = sandbox;
                    lease.running(control.clone());
                    let (outcome, alive) = sandbox.execute_kept(job, control).await;
                    let id = lease.id.clone();
                    let ended = lease.finish(sandbox, alive, &outcome);
                    (
                        outcome,
                        SessionNote {
                            id: Some(id),
                            ended,
                        },
                    )
                }
            };
            if let Some(call) = approving.stopped_call() {
                let recorded =
                    |c: &ToolCallRecord| c.approval == call.approval && c.tool == call.tool;
                if !outcome.tool_calls.iter().any(recorded) {
                    outcome.tool_calls.push(call);
                }
            }
            this.report(outcome, execution_id, note, recorder, script, timeout)
                .await
        });
        let running = approval::Running {
            code,
            task: tokio_util::task::AbortOnDropHandle::new(task),
            questions,
        };
        approval::drive(running, asking, &self.paused, approval_timeout, &ct).await
    }

    /// The result of a finished execution (its cassette saved first, with --record-dir).
    async fn report(
        &self,
        outcome: Outcome,
        execution_id: String,
        session: SessionNote,
        recorder: Option<Arc<Recorder>>,
        script: Option<Script>,
        timeout: Duration,
    ) -> Result<CallToolResult, McpError> {
        if let (Some(recorder), Some(record)) = (recorder, &self.options.record) {
            let cassette = recorder.cassette(RunInfo {
                execution_id: execution_id.clone(),
                seed: None,
                script,
                limits: Some(RecordedLimits::from(&Limits {
                    timeout,
                    ..self.options.limits
                })),
            });
            let path = record.path(&execution_id);
            let shown = path.display().to_string();
            // Off the runtime's workers: a cassette may be megabytes.
            let saved = tokio::task::spawn_blocking(move || cassette.save(&path)).await;
            match saved {
                Ok(Ok(())) => tracing::info!("execution {execution_id}: cassette {shown}"),
                Ok(Err(e)) => tracing::warn!("execution {execution_id}: {e:#}"),
                Err(e) => {
                    tracing::warn!("execution {execution_id}: the cassette was not saved: {e}")
                }
            }
        }
        let failed = outcome.error.is_some();
        let (mut report, links) = self.keep_run(outcome, execution_id);
        report.session = session.id;
        report.session_ended = session.ended;
        let report = serde_json::to_value(report)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let text = report_text(&report);
        let mut result = if failed {
            CallToolResult::structured_error(report)
        } else {
            CallToolResult::structured(report)
        };
        result.content = vec![ContentBlock::text(text)];
        result.content.extend(links);
        Ok(result)
    }

    /// The report of an outcome, with stdout, stderr and the result cut to `inline_bytes` and
    /// the files out; what it links to is kept in the run store for this session. The content
    /// blocks are a resource_link for each file and each cut field, and small images inline.
    fn keep_run(
        &self,
        outcome: Outcome,
        execution_id: String,
    ) -> (ExecutionReport, Vec<ContentBlock>) {
        let inline = self.options.data.inline_bytes;
        let mut entries = Vec::new();
        let mut links = Vec::new();
        let mut truncated = Vec::new();
        let mut cut = |field: &str, whole: Vec<u8>, mime: &str, shown: usize, how: &str| {
            let bytes = whole.len();
            let uri = runs::uri(&execution_id, field);
            let pages = bytes.div_ceil(runs::PAGE_BYTES).max(1);
            let note = format!(
                "{field} is {bytes} bytes; {how}. Read the whole with resources/read {uri}?page=1 (then ?page=2 … ?page={pages}: {pages} page(s) of {} bytes)",
                runs::PAGE_BYTES
            );
            links.push(ContentBlock::resource_link(
                rmcp::model::Resource::new(uri.clone(), format!("{execution_id}/{field}"))
                    .with_mime_type(mime)
                    .with_size(bytes as u64)
                    .with_description(note.clone()),
            ));
            entries.push(runs::Entry {
                name: field.to_owned(),
                mime_type: mime.to_owned(),
                bytes: whole,
            });
            truncated.push(Truncated {
                field: field.to_owned(),
                bytes,
                uri,
                pages,
                page_bytes: runs::PAGE_BYTES,
                note: format!("{note} ({shown} bytes shown)"),
            });
        };
        let mut text_field = |field: &str, text: String| -> String {
            if text.len() <= inline {
                return text;
            }
            let shown = runs::cut_text(&text, inline).to_owned();
            let shown_len = shown.len();
            let notice = format!(
                "\n[mcp-code-mode: {field} cut after {shown_len} of {} bytes; the whole is {} (resources/read, ?page=N): see the report's \"truncated\"]\n",
                text.len(),
                runs::uri(&execution_id, field)
            );
            cut(
                field,
                text.into_bytes(),
                "text/plain",
                shown_len,
                "the first lines are shown",
            );
            shown + &notice
        };
        let stdout = text_field("stdout", outcome.stdout);
        let stderr = text_field("stderr", outcome.stderr);
        let mut result = outcome.result;
        let json = result.to_string();
        if json.len() > inline {
            let small = runs::shrink(&result, inline);
            let shown = small.to_string().len();
            cut(
                "result",
                json.into_bytes(),
                "application/json",
                shown,
                &format!(
                    "it is shown with its shape kept: lists end with a \"… N more items\" entry, objects with a \"…\" key, long strings with \"… (N more bytes)\", nesting past depth {} summarized",
                    runs::MAX_DEPTH
                ),
            );
            result = small;
        }
        let mut outputs = Vec::with_capacity(outcome.outputs.len());
        for file in outcome.outputs {
            let name = format!("output/{}", file.path);
            let uri = runs::uri(&execution_id, &name);
            let mime_type = runs::mime_for(&file.path);
            links.push(ContentBlock::resource_link(
                rmcp::model::Resource::new(uri.clone(), file.path.clone())
                    .with_mime_type(mime_type.clone())
                    .with_size(file.size as u64)
                    .with_description(format!(
                        "/output/{} from execution {execution_id}",
                        file.path
                    )),
            ));
            if IMAGE_TYPES.contains(&mime_type.as_str()) && file.size <= IMAGE_INLINE_BYTES {
                links.push(ContentBlock::image(
                    crate::engine::files::encode_base64(&file.bytes),
                    mime_type.clone(),
                ));
            }
            outputs.push(OutputInfo {
                path: file.path,
                uri,
                mime_type: mime_type.clone(),
                size: file.size,
            });
            entries.push(runs::Entry {
                name,
                mime_type,
                bytes: file.bytes,
            });
        }
        self.runs.add(&execution_id, self.owner(), entries);
        let report = ExecutionReport {
            stdout,
            stderr,
            result,
            error: outcome.error,
            tool_calls: outcome.tool_calls,
            duration_ms: outcome.duration_ms,
            execution_id,
            outputs,
            outputs_dropped: outcome.outputs_dropped,
            truncated,
            session: None,
            session_ended: None,
        };
        (report, links)
    }

    /// Who this copy serves, for the run store: each HTTP session, or stdio's one client.
    fn owner(&self) -> runs::Owner {
        self.session
            .as_ref()
            .map_or(0, |s| s.owner.load(Ordering::SeqCst))
    }

    #[tool(
        description = "End a session started with execute_code(session=\"new\"): its sandbox, globals and files are gone (a call running in it is stopped).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn close_session(
        &self,
        Parameters(args): Parameters<SessionArgs>,
    ) -> Result<CallToolResult, McpError> {
        let closed = self
            .sessions_here()
            .and_then(|sessions| sessions.close(self.owner, &args.session));
        Ok(text_result(closed))
    }

    #[tool(
        description = "Give a session a fresh interpreter under the same id: its globals, imports and files are gone (a call running in it is stopped); a session that ended on a limit starts again.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn reset_session(
        &self,
        Parameters(args): Parameters<SessionArgs>,
    ) -> Result<CallToolResult, McpError> {
        let reset = match self.sessions_here() {
            Ok(sessions) => sessions.reset(self.owner, &args.session).await,
            Err(e) => Err(e),
        };
        Ok(text_result(reset))
    }

    #[tool(
        description = "List the configured MCP servers' tools compactly (one line each), optionally for one server. Use get_tool_signatures for the few you need.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_tools(
        &self,
        Parameters(args): Parameters<ListToolsArgs>,
    ) -> Result<CallToolResult, McpError> {
        let _ = tokio::time::timeout(FIRST_START_GRACE, self.hub.wait_started()).await;
        let text = catalog::list(
            &self.catalog(),
            &unavailable(&self.hub),
            args.server.as_deref(),
            args.offset.unwrap_or(0),
        );
        Ok(match text {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        })
    }

    #[tool(
        description = "Search the configured servers' tools by words in their names and descriptions; detail is name, signature (default) or full.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn search_tools(
        &self,
        Parameters(args): Parameters<SearchToolsArgs>,
    ) -> Result<CallToolResult, McpError> {
        let _ = tokio::time::timeout(FIRST_START_GRACE, self.hub.wait_started()).await;
        let text = catalog::search(
            &self.catalog(),
            &args.query,
            args.detail,
            args.limit.unwrap_or(10),
        );
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    #[tool(
        description = "Python signatures and docstrings (from each tool's JSON Schemas) of the named tools, e.g. [\"filesystem.read_text_file\"].",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_tool_signatures(
        &self,
        Parameters(args): Parameters<GetSignaturesArgs>,
    ) -> Result<CallToolResult, McpError> {
        let _ = tokio::time::timeout(FIRST_START_GRACE, self.hub.wait_started()).await;
        let (text, found) = catalog::signatures(&self.catalog(), &args.names);
        // Partial success is success: the model gets what exists and reads which names did not.
        Ok(if found > 0 || args.names.is_empty() {
            CallToolResult::success(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::error(vec![ContentBlock::text(text)])
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CodeModeServer {
    fn get_info(&self) -> ServerConfig {
        let mut instructions = String::from(
            "Write one Python script instead of many tool calls. Find tools with list_tools / search_tools, \
             read the few signatures you need with get_tool_signatures, then send the script to execute_code: \
             call tools as tools.<server>.<tool>(arg=...), print what you need, end with an expression to return it.",
        );
        if let Some(python) = self.pool.local_python() {
            instructions.push_str(&format!(
                " Scripts are {}: each runs in a fresh host Python {} process with that user's files, \
                 network and installed packages, so do only what the user would do themselves.",
                python.notice(),
                python.version
            ));
        }
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "mcp-code-mode",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // A one-shot client (the Inspector's CLI) lists once: give servers in their first start
        // a moment, so the catalogue is usually complete; a hung one costs this call 2 s at most.
        let _ = tokio::time::timeout(FIRST_START_GRACE, self.hub.wait_started()).await;
        let mut tools = self.tool_router.list_all();
        // execute_code's description carries the live catalogue of servers.
        for tool in tools.iter_mut().filter(|t| t.name == "execute_code") {
            let servers = catalog::summary(&self.catalog(), &unavailable(&self.hub));
            let base = match self.pool.local_python() {
                Some(python) => local_description(python),
                None => tool.description.clone().unwrap_or_default().to_string(),
            };
            tool.description = Some(format!("{base}\n\n{servers}\n\n{}", catalog::USAGE).into());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(
            self.runs.list(self.owner()),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            runs::template(),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.runs
            .read(&request.uri, self.owner())
            .map(ReadResourceResponse::from)
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        if let Some(session) = &self.session {
            let _ = session.owner.compare_exchange(
                0,
                NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            let ended = session.ended.clone();
            let announce = announce_changes(self.hub.changes(), context.peer);
            tokio::spawn(async move {
                tokio::select! {
                    () = announce => {}
                    () = ended.cancelled() => {}
                }
            });
        }
    }
}

/// One HTTP session's copy of the server: `ended` is cancelled once rmcp drops the copy (the
/// session closed or expired), so nothing started for the session outlives it.
#[derive(Clone)]
struct Session {
    ended: CancellationToken,
    /// Whose runs this session may read (see [`runs`]): its own id once it has initialized; 0
    /// until then, as for a 2026-07-28 request, which belongs to no session (and for stdio).
    owner: Arc<AtomicU64>,
    _guard: Arc<tokio_util::sync::DropGuard>,
    _sessions: Arc<EndsSessions>,
}

impl CodeModeServer {
    /// The hub's catalogue with each tool's approval policy at the start of its description.
    fn catalog(&self) -> Vec<ServerCatalog> {
        self.described
            .catalog(&self.options.approvals, self.hub.catalog())
    }

    fn for_new_session(&self) -> Self {
        let ended = CancellationToken::new();
        let owner = Owner::fresh();
        Self {
            session: Some(Session {
                _guard: Arc::new(ended.clone().drop_guard()),
                _sessions: Arc::new(EndsSessions {
                    sessions: self.options.sessions.clone(),
                    owner,
                }),
                ended,
                owner: Arc::new(AtomicU64::new(0)),
            }),
            owner,
            ..self.clone()
        }
    }

    /// The code sessions this server keeps, or why it keeps none.
    fn sessions_here(&self) -> Result<&Arc<Sessions>, String> {
        match (&self.options.sessions, self.no_sessions) {
            (Some(sessions), None) => Ok(sessions),
            (_, why) => Err(format!(
                "no sessions here: {}",
                why.unwrap_or("this server keeps none")
            )),
        }
    }
}

/// Ends an MCP session's code sessions when the last copy of its server goes.
struct EndsSessions {
    sessions: Option<Arc<Sessions>>,
    owner: Owner,
}

impl Drop for EndsSessions {
    fn drop(&mut self) {
        if let Some(sessions) = &self.sessions {
            sessions.end_owner(self.owner);
        }
    }
}

/// A session's sandbox for one call, with the hold that keeps its other calls waiting; or the
/// result that refuses the call (an unknown or ended id, too many sessions).
async fn session_sandbox(
    sessions: &Sessions,
    owner: Owner,
    requested: &str,
    tools: Arc<dyn ToolHost>,
    seed: Option<u64>,
) -> Result<(crate::engine::Sandbox, Lease), CallToolResult> {
    let refused = |message: String| CallToolResult::error(vec![ContentBlock::text(message)]);
    let mut lease = if requested == "new" {
        sessions.open(owner)
    } else {
        sessions.lease(owner, requested).await
    }
    .map_err(refused)?;
    match lease.take_sandbox() {
        Some(sandbox) => {
            sandbox.set_tools(tools);
            Ok((sandbox, lease))
        }
        None => match sessions.take_sandbox(tools, seed).await {
            Ok(sandbox) => Ok((sandbox, lease)),
            Err(e) => {
                let why = crate::text::Chain(&e).to_string();
                let message = format!("the session's sandbox could not start: {why}");
                lease.failed(&why);
                Err(refused(message))
            }
        },
    }
}

/// A tool result from a message: success, or the error that says what is wrong.
fn text_result(result: Result<String, String>) -> CallToolResult {
    match result {
        Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
    }
}

/// Tells a client when downstream tools change (execute_code's description lists them), until
/// its connection closes.
async fn announce_changes(mut changes: tokio::sync::watch::Receiver<u64>, peer: Peer<RoleServer>) {
    while changes.changed().await.is_ok() {
        if peer.is_transport_closed() {
            return;
        }
        if let Err(e) = peer.notify_tool_list_changed().await {
            tracing::debug!("tools/list_changed not sent: {e}");
            return;
        }
    }
}

/// execute_code's description under the local executor (the sandbox's is in its `#[tool]`).
fn local_description(python: &crate::local::LocalPython) -> String {
    format!(
        "Run a Python {} script that calls the configured MCP servers' tools as Python functions. \
         Beware, {}, in a fresh host Python process with that user's files, network and installed \
         packages (import what is installed there).",
        python.version,
        python.notice()
    )
}

/// The next HTTP session's run-store owner id.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// Images that also come back as image content, when no larger than [`IMAGE_INLINE_BYTES`].
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const IMAGE_INLINE_BYTES: usize = 512 << 10;

/// How long tools/list and the discovery tools wait for servers still in their first start.
const FIRST_START_GRACE: Duration = Duration::from_secs(2);

/// Reports up to this size go whole into the text content too (the spec's copy for clients that
/// read no structuredContent); larger ones get a summary there, not the same payload twice.
const FULL_TEXT_COPY: usize = 8 * 1024;

/// The text content of an execute_code result: the report's JSON when small, else a summary.
fn report_text(report: &Value) -> String {
    let json = report.to_string();
    if json.len() <= FULL_TEXT_COPY {
        return json;
    }
    let head = |key: &str| -> String {
        let text = match &report[key] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let end = text.floor_char_boundary(2048);
        if end < text.len() {
            format!("{}… ({} bytes in all)", &text[..end], text.len())
        } else {
            text
        }
    };
    let mut out = format!(
        "The full report ({} bytes of JSON) is in structuredContent; its start:\nstdout: {}",
        json.len(),
        head("stdout")
    );
    for key in ["stderr", "result", "error"] {
        if !report[key].is_null() && report[key] != "" {
            out.push_str(&format!("\n{key}: {}", head(key)));
        }
    }
    let calls = report["tool_calls"].as_array().map_or(0, Vec::len);
    out.push_str(&format!("\ntool_calls: {calls}"));
    out
}

/// Configured servers that serve no tools right now (starting, failed, disabled), and why.
fn unavailable(hub: &Hub) -> Vec<catalog::Unavailable> {
    hub.unavailable()
        .into_iter()
        .map(|(server, state)| catalog::Unavailable { server, state })
        .collect()
}

/// Progress notifications for one `execute_code` call: one per tool call, plus a heartbeat.
#[derive(Clone)]
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    step: Arc<AtomicU64>,
}

impl Progress {
    fn new(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        Self {
            peer,
            token,
            step: Arc::new(AtomicU64::new(0)),
        }
    }

    async fn send(&self, message: String) {
        let step = self.step.fetch_add(1, Ordering::SeqCst) + 1;
        let param =
            ProgressNotificationParam::new(self.token.clone(), step as f64).with_message(message);
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!("progress notification not sent: {e}");
        }
    }
}

/// Passes calls to the hub (or its recorder) and reports each finished call as progress.
struct ReportingHost {
    inner: Arc<dyn ToolHost>,
    progress: Progress,
}

impl ToolHost for ReportingHost {
    fn catalog(&self) -> Vec<ServerCatalog> {
        self.inner.catalog()
    }

    fn python_view(&self) -> Arc<PythonView> {
        self.inner.python_view()
    }

    fn unavailable(&self) -> Vec<(String, String)> {
        self.inner.unavailable()
    }

    fn wait_ready(
        &self,
        server: &str,
    ) -> BoxFuture<'static, Result<(), crate::bridge::ToolCallError>> {
        self.inner.wait_ready(server)
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, crate::bridge::ToolCallError>> {
        let call = self.call_audited(server, tool, arguments);
        Box::pin(async move { call.await.0 })
    }

    fn call_audited(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<
        'static,
        (
            Result<Value, crate::bridge::ToolCallError>,
            Option<crate::bridge::Approval>,
        ),
    > {
        let call = self.inner.call_audited(server, tool, arguments);
        let progress = self.progress.clone();
        let name = format!("{server}.{tool}");
        Box::pin(async move {
            let (result, approval) = call.await;
            let verdict = if result.is_ok() { "ok" } else { "failed" };
            progress.send(format!("called {name}: {verdict}")).await;
            (result, approval)
        })
    }
}

/// What stood on stdin was not an MCP client: the initialize handshake failed.
#[derive(Debug, thiserror::Error)]
#[error("the MCP handshake failed: {0}")]
pub struct Handshake(String);

/// Serves MCP on stdin/stdout until the client disconnects, then shuts the hub down.
pub async fn serve_stdio(
    hub: Arc<Hub>,
    pool: Arc<Pool>,
    options: ServeOptions,
) -> anyhow::Result<()> {
    let sessions = options.sessions.clone();
    let server = CodeModeServer::new(hub.clone(), pool, options);
    // Subscribed before the handshake: servers start in the background, and one that comes up
    // while the client initializes must still be announced.
    let changes = hub.changes();
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Handshake(e.to_string()))?;
    let notifier = tokio::spawn(announce_changes(changes, running.peer().clone()));
    let quit = running.waiting().await;
    notifier.abort();
    if let Some(sessions) = &sessions {
        sessions.end_owner(Owner::STDIO);
    }
    hub.shutdown().await;
    quit?;
    Ok(())
}
