//! parity — `mcp-code-mode parity`: runs Python scripts in our V8 host and in headless Chromium,
//! the reference runtime, and compares what they did byte for byte.
//!
//! Both hosts load the same `js/runner.js`, the same `js/codemode.py` and the same pinned Pyodide
//! files, restore the same memory snapshot (or both boot fresh), boot with the same settings
//! (`engine::BootSettings`: memory cap, Pyodide `env`, hash seed) and draw their randomness from
//! the same seeded stream (`engine::entropy_source`). The browser's tool calls come back over a
//! loopback HTTP endpoint to the same kind of hub the V8 host uses, started fresh for each run
//! against a freshly emptied scratch folder, so both hosts see the same downstream state. With
//! `--replay DIR` no server starts: each host answers from a fresh player of the script's
//! cassette; `--record DIR` keeps the V8 host's traffic per script.
//!
//!   mod.rs      the command: scripts, runs, the table, the exit code
//!   http.rs     the loopback server the page loads from and reaches Rust through
//!   browser.rs  Chromium over CDP
//!   compare.rs  the byte-for-byte comparison and the named inherent differences

mod browser;
mod compare;
mod http;

pub use compare::{compare, BrowserFacts, Comparison, FieldDiff, Inherent, Verdict};

use crate::bridge::{NoTools, ToolCallRecord, ToolHost};
use crate::config::{self, Config};
use crate::engine::{self, ErrorInfo, Job, Limits, Outcome, Sandbox, SandboxConfig, Snapshot};
use crate::hub::{Hub, ServerState};
use crate::replay::{
    self, Cassette, MatchMode, Player, RecordDir, RecordedLimits, Recorder, Redactor, RunInfo,
    Script,
};
use anyhow::{bail, Context};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The variable a parity config uses for its servers' scratch folder (`${MCP_CODE_MODE_PARITY_SCRATCH}`):
/// the same path for both hosts, emptied before every run.
pub const SCRATCH_VAR: &str = "MCP_CODE_MODE_PARITY_SCRATCH";

/// Booting Pyodide in a fresh tab: generous, since the 2-core CI machine may be busy.
const BROWSER_BOOT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(clap::Args, Debug, Clone)]
pub struct ParityArgs {
    /// Python scripts to compare, or folders whose *.py files are compared (in name order).
    #[arg(required = true, value_name = "DIR|SCRIPT")]
    pub paths: Vec<PathBuf>,
    /// MCP servers for the scripts' tools.<server>.<tool>(...) calls. A fresh hub is started for
    /// every run; `${MCP_CODE_MODE_PARITY_SCRATCH}` in it names a folder emptied before each run.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The seed both hosts derive all randomness from (random, uuid4, os.urandom, hash seed).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// Seconds each script may run in each host.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS", value_parser = config::parse_timeout)]
    pub timeout: f64,
    /// MiB of memory each sandbox may use (the same cap in both hosts).
    #[arg(long = "memory-mb", default_value_t = 512, value_name = "MIB", value_parser = clap::value_parser!(u64).range(128..=16384))]
    pub memory_mb: u64,
    /// Bytes of stdout, and of stderr, kept (the same cap and notice in both hosts).
    #[arg(long = "max-output", default_value_t = 1 << 20, value_name = "BYTES")]
    pub max_output: usize,
    /// The Chromium to drive (default: chromium on PATH).
    #[arg(long, value_name = "PATH", env = "MCP_CODE_MODE_CHROMIUM")]
    pub chromium: Option<PathBuf>,
    /// Boot Pyodide from scratch in both hosts instead of restoring the embedded memory snapshot:
    /// slower, but it exercises each host's own start-up (and shows its user agent and LANG).
    #[arg(long = "no-snapshot")]
    pub no_snapshot: bool,
    /// After the table, print every differing field of every differing script in full.
    #[arg(long)]
    pub verbose: bool,
    /// Start no server: answer each script's tool calls, in both hosts, from DIR/<script>.jsonl
    /// (made by --record, or `run --record`). A script without one runs without servers.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "record"])]
    pub replay: Option<PathBuf>,
    /// Record each script's tool calls in the V8 host to DIR/<script>.jsonl, for --replay.
    #[arg(long, value_name = "DIR", requires = "config")]
    pub record: Option<PathBuf>,
}

/// What one host made of one script: the fields that are compared, and its time.
#[derive(Debug, Clone, PartialEq)]
pub struct HostOutcome {
    pub stdout: String,
    pub stderr: String,
    pub result: Value,
    pub error: Option<ErrorInfo>,
    /// Milliseconds the job took (boot excluded).
    pub ms: f64,
}

impl From<Outcome> for HostOutcome {
    fn from(outcome: Outcome) -> Self {
        HostOutcome {
            stdout: outcome.stdout,
            stderr: outcome.stderr,
            result: outcome.result,
            error: outcome.error,
            ms: outcome.duration_ms,
        }
    }
}

/// A booted Chromium tab, where the engine runs a job as in its own sandboxes.
struct Tab<'a>(&'a browser::Page);

impl engine::ForeignHost for Tab<'_> {
    async fn run(&self, job_json: String, timeout: Duration) -> Result<Option<String>, String> {
        let answer = self
            .0
            .evaluate(&format!("codemodeParity.run({job_json})"), timeout)
            .await;
        match answer {
            Ok(Value::String(report)) => Ok(Some(report)),
            Ok(other) => Err(format!("run() answered {other}, not a report")),
            Err(browser::BrowserError::Timeout { .. }) => {
                // The worker is still running the script: stop it so the tab can close.
                let _ = self
                    .0
                    .evaluate("codemodeParity.stop()", Duration::from_secs(5))
                    .await;
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// One script's line in the report.
pub struct ScriptReport {
    pub name: String,
    pub v8: Result<HostOutcome, String>,
    pub browser: Result<HostOutcome, String>,
    /// Set when both hosts ran the script.
    pub comparison: Option<Comparison>,
    pub tool_calls: (Vec<ToolCallRecord>, Vec<ToolCallRecord>),
    /// Its tool calls were answered from a cassette.
    pub replayed: bool,
}

impl ScriptReport {
    pub fn verdict_label(&self) -> String {
        match &self.comparison {
            Some(c) => c.verdict.label(),
            None => "ERROR".into(),
        }
    }

    pub fn is_same(&self) -> bool {
        matches!(&self.comparison, Some(c) if c.verdict == Verdict::Same)
    }

    /// A script neither host could run, and why.
    fn unable(name: String, message: String) -> Self {
        Self {
            name,
            v8: Err(message.clone()),
            browser: Err(message),
            comparison: None,
            tool_calls: Default::default(),
            replayed: false,
        }
    }
}

/// The `parity` command. Exit code: 0 every script behaved the same, 1 some did not (or could
/// not run), 2 a usage or setup error (Chromium missing, bad config, no scripts).
pub async fn main(args: ParityArgs) -> anyhow::Result<ExitCode> {
    let scripts = collect_scripts(&args.paths)?;
    let chromium = browser::find_chromium(args.chromium.as_deref()).map_err(anyhow::Error::msg)?;
    let scratch_root = tempfile::Builder::new()
        .prefix("mcp-code-mode-parity-")
        .tempdir()
        .context("cannot make a scratch folder")?;
    let scratch = scratch_root.path().join("scratch");
    let config = match &args.config {
        Some(path) => {
            let scratch_text = scratch.to_string_lossy().into_owned();
            Some(config::load_with_env(path, &|name| {
                if name == SCRATCH_VAR {
                    Some(scratch_text.clone())
                } else {
                    std::env::var(name).ok()
                }
            })?)
        }
        None => None,
    };
    if let Some(dir) = args.replay.as_ref().filter(|d| !d.is_dir()) {
        bail!("--replay {}: no such folder", dir.display());
    }
    let record = match &args.record {
        Some(dir) => {
            let redactor = Redactor::for_config(config.as_ref(), &[]);
            let record = RecordDir::open(dir, redactor)
                .with_context(|| format!("cannot keep cassettes in --record {}", dir.display()))?;
            Some(record)
        }
        None => None,
    };
    let server = http::Server::start()
        .await
        .context("cannot start the loopback HTTP server for Chromium")?;
    let browser = browser::Browser::launch(&chromium).await?;
    let runner = Runner {
        limits: Limits {
            timeout: Duration::from_secs_f64(args.timeout),
            memory_mb: args.memory_mb,
            max_output: args.max_output,
        },
        seed: args.seed,
        // The V8 host's own default (the embedded snapshot), which the browser must restore too:
        // a fresh boot and a restored one differ in hash seed, random state and environment.
        snapshot: (!args.no_snapshot).then(crate::assets::snapshot),
        config,
        scratch,
        server,
        browser,
        replay: args.replay.clone(),
        record,
    };

    let width = scripts
        .iter()
        .map(|s| display_name(s).chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "parity: {} script(s), seed {}, {}, V8 (deno_core) vs {}{}",
        scripts.len(),
        args.seed,
        if args.no_snapshot {
            "fresh boots"
        } else {
            "both restoring the embedded snapshot"
        },
        chromium.display(),
        match &args.replay {
            Some(dir) => format!(", tool calls answered from cassettes in {}", dir.display()),
            None => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "{:<width$}  {:>9}  {:>13}  {:<24}  first difference",
        "script", "V8 ms", "Chromium ms", "verdict"
    );
    let mut reports = Vec::new();
    let started = Instant::now();
    for script in &scripts {
        let report = runner.run_script(script).await;
        let ms = |r: &Result<HostOutcome, String>| match r {
            Ok(o) => format!("{:.1}", o.ms),
            Err(_) => "-".into(),
        };
        let first = first_difference(&report);
        let _ = writeln!(
            out,
            "{:<width$}  {:>9}  {:>13}  {:<24}  {}",
            report.name,
            ms(&report.v8),
            ms(&report.browser),
            report.verdict_label(),
            first
        );
        let _ = out.flush();
        reports.push(report);
    }
    runner.browser.shutdown().await;

    print_details(&mut out, &reports, args.verbose);
    let same = reports.iter().filter(|r| r.is_same()).count();
    let inherent = reports
        .iter()
        .filter(|r| matches!(&r.comparison, Some(c) if matches!(c.verdict, Verdict::Inherent(_))))
        .count();
    let errors = reports.iter().filter(|r| r.comparison.is_none()).count();
    let different = reports.len() - same - inherent - errors;
    let _ = writeln!(
        out,
        "\nparity: {} script(s): {same} same, {different} different, {inherent} inherent, {errors} could not run ({:.1} s)",
        reports.len(),
        started.elapsed().as_secs_f64()
    );
    let count = |pick: fn(&ScriptReport) -> &Vec<ToolCallRecord>| {
        let calls = reports.iter().flat_map(|r| pick(r).iter());
        let ok = calls.clone().filter(|c| c.ok).count();
        (calls.count(), ok)
    };
    let ((v8_calls, v8_ok), (browser_calls, browser_ok)) =
        (count(|r| &r.tool_calls.0), count(|r| &r.tool_calls.1));
    let _ = writeln!(
        out,
        "tool calls: {v8_calls} in V8 ({v8_ok} succeeded), {browser_calls} in Chromium ({browser_ok} succeeded)"
    );
    if let Some(dir) = &args.replay {
        let replayed = reports.iter().filter(|r| r.replayed).count();
        let _ = writeln!(
            out,
            "cassettes: {replayed} script(s) replayed from {}",
            dir.display()
        );
    }
    Ok(if same == reports.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The scripts named, folders expanded to their *.py files in name order.
fn collect_scripts(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut scripts = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot list {}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "py"))
                .collect();
            if found.is_empty() {
                bail!("{}: no *.py scripts in this folder", path.display());
            }
            found.sort();
            scripts.extend(found);
        } else if path.is_file() {
            scripts.push(path.clone());
        } else {
            bail!("{}: no such script or folder", path.display());
        }
    }
    Ok(scripts)
}

fn first_difference(report: &ScriptReport) -> String {
    match (&report.v8, &report.browser, &report.comparison) {
        (Err(e), _, _) => format!("V8 host failed: {}", one_line(e, 100)),
        (_, Err(e), _) => format!("browser host failed: {}", one_line(e, 100)),
        (_, _, Some(c)) => c.fields.first().map(|f| f.summary(40)).unwrap_or_default(),
        _ => String::new(),
    }
}

fn one_line(s: &str, width: usize) -> String {
    crate::text::shorten(s.lines().next().unwrap_or_default(), width)
}

fn print_details(out: &mut impl Write, reports: &[ScriptReport], verbose: bool) {
    for report in reports.iter().filter(|r| !r.is_same()) {
        let _ = writeln!(out, "\n--- {}: {}", report.name, report.verdict_label());
        if let Err(e) = &report.v8 {
            let _ = writeln!(out, "V8 host failed: {e}");
        }
        if let Err(e) = &report.browser {
            let _ = writeln!(out, "browser host failed: {e}");
        }
        let Some(comparison) = &report.comparison else {
            continue;
        };
        for field in &comparison.fields {
            let why = match &field.explained {
                Some(causes) => format!(
                    " (inherent: {})",
                    causes
                        .iter()
                        .map(|c| c.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "{} differs from line {}{why}:",
                field.field, field.line
            );
            let line = |s: &Option<String>| s.clone().unwrap_or_else(|| "(no line)".into());
            let _ = writeln!(out, "  V8:       {:?}", line(&field.v8));
            let _ = writeln!(out, "  Chromium: {:?}", line(&field.browser));
        }
        if verbose {
            if let (Ok(v8), Ok(browser)) = (&report.v8, &report.browser) {
                let _ = writeln!(out, "V8 outcome:\n{}", indent(&describe(v8)));
                let _ = writeln!(out, "Chromium outcome:\n{}", indent(&describe(browser)));
            }
        }
    }
}

fn describe(o: &HostOutcome) -> String {
    let mut s = format!(
        "stdout: {:?}\nstderr: {:?}\nresult: {}\n",
        o.stdout, o.stderr, o.result
    );
    match &o.error {
        Some(e) => s.push_str(&format!(
            "error: {}: {}\n{}",
            e.kind, e.message, e.traceback
        )),
        None => s.push_str("error: none\n"),
    }
    s
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

struct Runner {
    limits: Limits,
    seed: u64,
    snapshot: Option<Snapshot>,
    config: Option<Config>,
    scratch: PathBuf,
    server: http::Server,
    browser: browser::Browser,
    /// `--replay`: the folder of the scripts' cassettes.
    replay: Option<PathBuf>,
    /// `--record`: where the V8 host's tool traffic is kept, per script.
    record: Option<RecordDir>,
}

impl Runner {
    async fn run_script(&self, path: &Path) -> ScriptReport {
        let name = display_name(path);
        let code = match std::fs::read_to_string(path) {
            Ok(code) => code,
            Err(e) => {
                let message = format!("cannot read {}: {e}", path.display());
                return ScriptReport::unable(name, message);
            }
        };
        let cassette = match self.cassette(path) {
            Ok(cassette) => cassette,
            Err(message) => return ScriptReport::unable(name, message),
        };
        let job = Job {
            filename: name.clone(),
            ..Job::new(code.clone())
        };
        // A script that never names `tools` cannot call one: it runs without starting the servers.
        let needs_tools = self.config.is_some() && code.contains("tools");

        // Both hosts boot at once (boot does not touch downstream state); the jobs then run one
        // after the other, each against a fresh hub and scratch folder, and are timed alone.
        let mut sandbox_config = SandboxConfig::new(self.limits, self.snapshot.clone());
        sandbox_config.seed = Some(self.seed);
        let (sandbox, page) = tokio::join!(Sandbox::new(sandbox_config), self.boot_browser());

        let mut v8_calls = Vec::new();
        let v8 = match sandbox {
            Ok(sandbox) => {
                let hub = self.fresh_hub(needs_tools).await;
                let host = tool_host(&hub, &cassette);
                let recorder = match (&self.record, &hub) {
                    (Some(record), Some(_)) => Some(Arc::new(Recorder::new(
                        host.clone(),
                        record.redactor.clone(),
                    ))),
                    _ => None,
                };
                sandbox.set_tools(match &recorder {
                    Some(recorder) => recorder.clone(),
                    None => host,
                });
                let outcome = sandbox.execute(job.clone()).await;
                stop_hub(hub).await;
                v8_calls = outcome.tool_calls.clone();
                let saved = match (&recorder, &self.record) {
                    (Some(recorder), Some(record)) => self.save(recorder, record, path, &job),
                    _ => Ok(()),
                };
                saved.map(|()| HostOutcome::from(outcome))
            }
            Err(e) => Err(crate::text::Chain(&e).to_string()),
        };

        let mut browser_calls = Vec::new();
        let mut facts = BrowserFacts::default();
        let browser = match page {
            Ok((page, session, found)) => {
                facts = found;
                let hub = self.fresh_hub(needs_tools).await;
                session.tools.set_host(tool_host(&hub, &cassette));
                let outcome = engine::execute_elsewhere(
                    &Tab(&page),
                    &job,
                    &self.limits,
                    &session.output,
                    &session.tools,
                )
                .await;
                stop_hub(hub).await;
                let outcome = outcome.map(|outcome| {
                    browser_calls = outcome.tool_calls.clone();
                    HostOutcome::from(outcome)
                });
                page.close().await;
                self.server.close_session(&session);
                outcome
            }
            Err(e) => Err(e),
        };

        let comparison = match (&v8, &browser) {
            (Ok(a), Ok(b)) => {
                let mut c = compare(a, b, &facts);
                add_tool_call_diff(&mut c, &v8_calls, &browser_calls);
                Some(c)
            }
            _ => None,
        };
        ScriptReport {
            name,
            v8,
            browser,
            comparison,
            tool_calls: (v8_calls, browser_calls),
            replayed: cassette.is_some(),
        }
    }

    /// The script's cassette when replaying and the folder holds one (`<stem>.jsonl`), with its
    /// name for messages.
    fn cassette(&self, script: &Path) -> Result<Option<(Cassette, String)>, String> {
        let Some(dir) = &self.replay else {
            return Ok(None);
        };
        let file = dir.join(cassette_name(script));
        if !file.exists() {
            return Ok(None);
        }
        let cassette = Cassette::load(&file).map_err(|e| format!("{e:#}"))?;
        Ok(Some((cassette, replay::label(&file))))
    }

    /// Saves what `recorder` heard as the script's cassette in the record folder.
    fn save(
        &self,
        recorder: &Recorder,
        record: &RecordDir,
        script: &Path,
        job: &Job,
    ) -> Result<(), String> {
        let cassette = recorder.cassette(RunInfo {
            execution_id: replay::new_execution_id(),
            seed: Some(self.seed),
            script: Some(Script {
                filename: job.filename.clone(),
                code: job.code.clone(),
            }),
            limits: Some(RecordedLimits::from(&self.limits)),
        });
        let path = record.dir().join(cassette_name(script));
        cassette.save(&path).map_err(|e| format!("{e:#}"))
    }

    /// A new tab with Pyodide booted in its worker, ready for one job.
    async fn boot_browser(
        &self,
    ) -> Result<(browser::Page, Arc<http::Session>, BrowserFacts), String> {
        let session = self.server.open_session(&http::RunSettings {
            limits: self.limits,
            seed: self.seed,
            snapshot: self.snapshot.clone(),
        })?;
        let booted = async {
            let page = self
                .browser
                .open(&self.server.page_url(&session))
                .await
                .map_err(|e| e.to_string())?;
            let booted = async {
                let facts = page
                    .evaluate(
                        "({userAgent: navigator.userAgent, language: codemodeParity.language})",
                        Duration::from_secs(30),
                    )
                    .await
                    .map_err(|e| format!("the page did not load main_browser.js: {e}"))?;
                let error = page
                    .evaluate("codemodeParity.boot()", BROWSER_BOOT_TIMEOUT)
                    .await
                    .map_err(|e| e.to_string())?;
                match error.as_str() {
                    Some("") => Ok(BrowserFacts {
                        user_agent: str_of(&facts, "userAgent"),
                        language: str_of(&facts, "language"),
                    }),
                    Some(message) => Err(message.to_owned()),
                    None => Err(format!("boot() answered {error}, not a string")),
                }
            }
            .await;
            match booted {
                Ok(facts) => Ok((page, facts)),
                Err(e) => {
                    page.close().await;
                    Err(e)
                }
            }
        }
        .await;
        match booted {
            Ok((page, facts)) => Ok((page, session, facts)),
            Err(e) => {
                self.server.close_session(&session);
                Err(e)
            }
        }
    }

    /// A hub of the configured servers over an emptied scratch folder, when the script needs one.
    async fn fresh_hub(&self, needs_tools: bool) -> Option<Arc<Hub>> {
        let config = self.config.as_ref().filter(|_| needs_tools)?;
        if self.scratch.exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.scratch) {
                tracing::warn!("cannot empty {}: {e}", self.scratch.display());
            }
        }
        if let Err(e) = std::fs::create_dir_all(&self.scratch) {
            tracing::warn!("cannot make {}: {e}", self.scratch.display());
        }
        let hub = Hub::start(Some(config));
        hub.wait_started().await;
        for status in hub.status() {
            if !matches!(
                status.state,
                ServerState::Running { .. } | ServerState::Disabled
            ) {
                tracing::warn!(
                    "parity: MCP server \"{}\" is {}: scripts calling it will fail alike in both hosts",
                    status.name,
                    status.state
                );
            }
        }
        Some(hub)
    }
}

/// What a host's tool calls reach: the script's cassette when replaying (a fresh player for each
/// host), else the fresh hub, else nothing.
fn tool_host(hub: &Option<Arc<Hub>>, cassette: &Option<(Cassette, String)>) -> Arc<dyn ToolHost> {
    match (cassette, hub) {
        (Some((cassette, label)), _) => {
            Arc::new(Player::new(cassette.clone(), label, MatchMode::Strict))
        }
        (None, Some(hub)) => hub.clone(),
        (None, None) => Arc::new(NoTools),
    }
}

/// A script's cassette file: `tools_notes.py` → `tools_notes.jsonl`.
fn cassette_name(script: &Path) -> String {
    let stem = script.file_stem().unwrap_or(script.as_os_str());
    format!("{}.jsonl", stem.to_string_lossy())
}

async fn stop_hub(hub: Option<Arc<Hub>>) {
    if let Some(hub) = hub {
        hub.shutdown().await;
    }
}

fn str_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The tools each host called, with success: the same calls must reach the servers. Compared as a
/// multiset, in sorted order: the log records calls as they complete, and calls a script runs
/// concurrently (asyncio.gather) complete in an order set by the servers' timing, not the host.
/// What a script does with the results is still compared byte for byte through its output.
fn add_tool_call_diff(c: &mut Comparison, v8: &[ToolCallRecord], browser: &[ToolCallRecord]) {
    let text = |calls: &[ToolCallRecord]| -> String {
        let mut lines: Vec<String> = calls
            .iter()
            .map(|r| {
                format!(
                    "{}.{} {}\n",
                    r.server,
                    r.tool,
                    if r.ok { "ok" } else { "error" }
                )
            })
            .collect();
        lines.sort();
        lines.concat()
    };
    let (a, b) = (text(v8), text(browser));
    if a == b {
        return;
    }
    let la: Vec<&str> = a.split_inclusive('\n').collect();
    let lb: Vec<&str> = b.split_inclusive('\n').collect();
    let first = (0..la.len().max(lb.len()))
        .find(|&i| la.get(i) != lb.get(i))
        .unwrap_or(0);
    c.fields.push(FieldDiff {
        field: "tool calls",
        line: first + 1,
        v8: la.get(first).map(|s| s.to_string()),
        browser: lb.get(first).map(|s| s.to_string()),
        explained: None,
    });
    c.verdict = Verdict::Different;
}
