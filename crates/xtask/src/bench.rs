//! `cargo xtask bench` — measures what the README's Performance tables report, all in one run on
//! one machine, through the release binary as its clients see it: MCP round trips, tool-call
//! overhead, cold start, memory, a CPU-bound loop, a Deno + Pyodide peer, forked sandboxes beside
//! threads, HTTP, the local executor and package imports. A benchmark, never a test: it asserts
//! nothing about speed and prints tables (progress goes to stderr).
//!
//! Every row drives the binary as a child process (over MCP stdio, `run -` or HTTP), exactly as a
//! client would; what only a process of its own can time (a sandbox made ready, row 1 and 8a) is
//! `cargo bench --bench sandbox` (benches/sandbox.rs). A row whose prerequisite is missing (the
//! npm fixtures, the Deno peer) is printed as skipped with the command to fix it.

mod http;

use anyhow::{bail, Context};
use parking_lot::Mutex;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The binary measured, set once by [`run`].
static BINARY: OnceLock<PathBuf> = OnceLock::new();

fn binary() -> &'static Path {
    BINARY.get().expect("bench::run sets the binary first")
}

/// The variable naming the config file; set empty, no config is read (plain Python).
const CONFIG_ENV: &str = "MCP_CODE_MODE_CONFIG";
/// How far apart row 2a's calls are: time for `--pool-size 2` to restore both sandboxes again
/// (a restore took 200–400 ms p50 on the machines measured so far).
const SPACED_GAP: Duration = Duration::from_millis(1000);
/// The Deno + Pyodide peer's script, copied into the peer folder before each run.
const PEER_SCRIPT: &str = include_str!("../../../bench/peer/peer.mjs");
/// Where the zygote's "warm" line comes from, and how it starts (see engine/zygote/mod.rs).
const ZYGOTE_LOG_TARGET: &str = "mcp_code_mode_sandbox::engine::zygote";
const ZYGOTE_WARM_LINE: &str = "sandbox zygote warm after";
/// The CPU-bound loop of row 6 (and its value, to check the run did the work).
const HEAVY: &str = "sum(i*i for i in range(10**6))";
const HEAVY_RESULT: i64 = 333_332_833_333_500_000;
/// What the memory-growth loop runs: a little more than print(1), so more of Python is touched.
const GROWTH_SCRIPT: &str = "import json\nd = {'n': list(range(1000))}\nprint(len(json.dumps(d)))";
const GROWTH_STDOUT: &str = "4897\n";
/// The warm round-trip figure the issue quotes for a Deno + Pyodide peer reusing one instance.
const PEER_REFERENCE_MS: f64 = 1.8;

/// How many samples each measurement takes.
struct Plan {
    round_trips: usize,
    tool_calls: usize,
    cold_runs: usize,
    heavy_runs: usize,
    peer_cold_runs: usize,
    executions: usize,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Plan {
                round_trips: 20,
                tool_calls: 50,
                cold_runs: 5,
                heavy_runs: 5,
                peer_cold_runs: 3,
                executions: 200,
            }
        } else {
            Plan {
                round_trips: 100,
                tool_calls: 300,
                cold_runs: 20,
                heavy_runs: 20,
                peer_cold_runs: 10,
                executions: 2000,
            }
        }
    }
}

/// A measurement's samples, or why there are none ("skipped: …", "unavailable: …", "failed: …").
type Samples = Result<Vec<f64>, String>;

fn failed(e: anyhow::Error) -> String {
    format!("failed: {e:#}")
}

/// The p-th percentile (nearest rank) of `samples`; NaN when there are none.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (s.len() - 1) as f64).round() as usize;
    s[rank.min(s.len() - 1)]
}

fn p50(samples: &Samples) -> Option<f64> {
    samples.as_ref().ok().map(|s| percentile(s, 50.0))
}

/// One line of the table, already formatted.
pub struct Row {
    /// The row number (2-7), which `--only` selects by.
    pub group: u8,
    pub name: String,
    pub n: String,
    pub p50: String,
    pub p95: String,
    pub target: String,
    pub compare: String,
}

impl Row {
    fn sampled(
        group: u8,
        name: impl Into<String>,
        unit: &str,
        target: impl Into<String>,
        samples: &Samples,
        compare: Option<String>,
    ) -> Self {
        let (n, p50, p95) = match samples {
            Ok(s) if !s.is_empty() => (
                s.len().to_string(),
                value(percentile(s, 50.0), unit),
                value(percentile(s, 95.0), unit),
            ),
            Ok(_) => ("0".into(), "no samples".into(), "—".into()),
            Err(why) => ("—".into(), why.clone(), "—".into()),
        };
        Row {
            group,
            name: name.into(),
            n,
            p50,
            p95,
            target: target.into(),
            compare: compare.unwrap_or_else(|| "—".into()),
        }
    }
}

fn value(v: f64, unit: &str) -> String {
    if v.abs() < 10.0 && unit == "ms" {
        format!("{v:.2} {unit}")
    } else if v.abs() < 100.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

pub fn print_table(rows: &[Row], notes: &[String]) {
    // With `--only 8,11`, say, none of rows 2-7 ran: the notes (the machine's) alone.
    if !rows.is_empty() {
        println!("| measurement | n | p50 | p95 | target | compared |");
        println!("|---|---:|---:|---:|---|---|");
        for r in rows {
            let cells = [&r.name, &r.n, &r.p50, &r.p95, &r.target, &r.compare].map(|c| cell(c));
            println!("| {} |", cells.join(" | "));
        }
        println!();
    }
    for n in notes {
        println!("- {n}");
    }
}

/// Text made safe for one table cell: one line, no column breaks, not too long.
fn cell(text: &str) -> String {
    let text = text.replace('|', "\\|").replace(['\n', '\r'], " ");
    match text.char_indices().nth(400) {
        None => text,
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn progress(what: &str) {
    eprintln!("bench: {what}");
}

// ---------------------------------------------------------------------------------------------
// Our server as a child, driven over MCP stdio.

/// `mcp-code-mode serve` started from our own executable, with no configuration (plain Python),
/// and an MCP client connected to it.
struct ServerChild {
    client: RunningService<RoleClient, ()>,
    pid: u32,
    stderr: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl ServerChild {
    async fn start(pool_size: usize) -> anyhow::Result<ServerChild> {
        Self::start_with(pool_size, "thread").await
    }

    /// `serve` with `--sandbox kind` (`thread` keeps `pool_size` ready; `fork` ignores it).
    async fn start_with(pool_size: usize, kind: &str) -> anyhow::Result<ServerChild> {
        Self::start_full(pool_size, kind, None).await
    }

    /// As [`ServerChild::start_with`], serving the downstream servers of `config` (JSON).
    async fn start_full(
        pool_size: usize,
        kind: &str,
        config: Option<&Value>,
    ) -> anyhow::Result<ServerChild> {
        // An empty folder as the working directory: no config/mcp_servers.json is found there,
        // and an empty $MCP_CODE_MODE_CONFIG names none.
        let dir = tempfile::tempdir()?;
        let config_path = match config {
            Some(config) => {
                let path = dir.path().join("servers.json");
                std::fs::write(&path, config.to_string())?;
                path.display().to_string()
            }
            None => String::new(),
        };
        let mut command = tokio::process::Command::new(binary());
        // `local`: the local executor (a host python3 per script), which refuses the sandbox's flags.
        let pool_size = pool_size.to_string();
        let args = match kind {
            "local" => vec!["serve", "--executor", "local"],
            sandbox => vec!["serve", "--pool-size", &pool_size, "--sandbox", sandbox],
        };
        command
            .args(args)
            .current_dir(dir.path())
            .env(CONFIG_ENV, config_path)
            // The zygote's "warm" line, which `wait_steady` waits for.
            .env(
                "MCP_CODE_MODE_LOG",
                format!("warn,{ZYGOTE_LOG_TARGET}=info"),
            );
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start `mcp-code-mode serve`")?;
        let pid = transport.id().context("the server has no process id")?;
        let log = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = stderr {
            let log = log.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut log = log.lock();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let client = match ().serve(transport).await {
            Ok(client) => client,
            Err(e) => bail!(
                "the MCP handshake with `serve --pool-size {pool_size}` failed: {e}; its stderr: {}",
                log.lock()
            ),
        };
        Ok(ServerChild {
            client,
            pid,
            stderr: log,
            _dir: dir,
        })
    }

    /// Waits until a `--sandbox fork` server's zygote has finished its warm-up (it logs so), so
    /// that what follows measures the steady state rather than the first seconds after start.
    async fn wait_steady(&self, kind: &str) -> anyhow::Result<()> {
        if kind != "fork" {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.stderr.lock().contains(ZYGOTE_WARM_LINE) {
            if Instant::now() > deadline {
                bail!(
                    "the sandbox zygote did not finish warming up in 120 s; server stderr: {}",
                    self.stderr.lock()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// One `execute_code` call; an error unless the script ran and printed `expect_stdout`.
    /// Returns the report's `duration_ms` (the sandbox's own time).
    async fn execute(&self, code: &str, expect_stdout: &str) -> anyhow::Result<f64> {
        let Value::Object(args) = json!({ "code": code }) else {
            unreachable!("a json object")
        };
        let result = self
            .client
            .call_tool(CallToolRequestParams::new("execute_code").with_arguments(args))
            .await
            .with_context(|| {
                format!(
                    "tools/call execute_code failed; server stderr: {}",
                    self.stderr.lock()
                )
            })?;
        let report = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) || report["stdout"] != expect_stdout {
            bail!("execute_code did not run the script as expected: {report}");
        }
        Ok(report["duration_ms"].as_f64().unwrap_or(f64::NAN))
    }

    /// One `execute_code` call that must succeed; returns its report.
    async fn execute_report(&self, code: &str) -> anyhow::Result<Value> {
        let Value::Object(args) = json!({ "code": code }) else {
            unreachable!("a json object")
        };
        let result = self
            .client
            .call_tool(CallToolRequestParams::new("execute_code").with_arguments(args))
            .await?;
        let report = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) {
            bail!("execute_code failed: {report}");
        }
        Ok(report)
    }

    /// One `execute_code` call that must succeed; returns what it printed.
    async fn execute_any(&self, code: &str) -> anyhow::Result<String> {
        let Value::Object(args) = json!({ "code": code }) else {
            unreachable!("a json object")
        };
        let result = self
            .client
            .call_tool(CallToolRequestParams::new("execute_code").with_arguments(args))
            .await?;
        let report = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) {
            bail!("execute_code failed: {report}");
        }
        Ok(report["stdout"].as_str().unwrap_or_default().to_owned())
    }

    fn rss_mib(&self) -> anyhow::Result<f64> {
        rss_mib(self.pid)
    }

    /// The `--sandbox fork` server's zygote: its child running `__zygote`.
    fn zygote(&self) -> anyhow::Result<u32> {
        children_of(self.pid)
            .into_iter()
            .find(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("__zygote"))
                    .unwrap_or(false)
            })
            .context("no zygote among the server's children")
    }

    /// Waits until the server is idle: at least `min`, then until its RSS holds still for a
    /// while (pool refilled, used isolates torn down), at most 15 s.
    async fn settle(&self, min: Duration) -> anyhow::Result<()> {
        tokio::time::sleep(min).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut last = self.rss_mib()?;
        let mut still = 0;
        while still < 4 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let now = self.rss_mib()?;
            still = if (now - last).abs() < 0.5 {
                still + 1
            } else {
                0
            };
            last = now;
        }
        Ok(())
    }

    /// A few RSS readings of the idle server.
    async fn rss_samples(&self) -> anyhow::Result<Vec<f64>> {
        let mut samples = Vec::new();
        for _ in 0..5 {
            samples.push(self.rss_mib()?);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(samples)
    }

    async fn stop(self) {
        let _ = self.client.cancel().await;
    }
}

/// VmRSS of a process, in MiB.
fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/<pid>/status")?;
    Ok(kb / 1024.0)
}

/// Rows 2 and 5: what a client of `serve` sees, and the server's memory.
struct ServerResults {
    spaced: Samples,
    /// The `duration_ms` the server reported for each of the `spaced` calls.
    spaced_inside: Samples,
    back_to_back: Samples,
    rss_pool2: Samples,
    rss_pool0: Samples,
    /// (executions so far, RSS in MiB)
    growth: Result<Vec<(usize, f64)>, String>,
    gap: Duration,
}

async fn server_rows(plan: &Plan, gap: Duration, round_trips: bool, memory: bool) -> ServerResults {
    let not_run = || Err::<Vec<f64>, String>("not run".into());
    let mut results = ServerResults {
        spaced: not_run(),
        spaced_inside: not_run(),
        back_to_back: not_run(),
        rss_pool2: not_run(),
        rss_pool0: not_run(),
        growth: Err("not run".into()),
        gap,
    };
    if !round_trips && !memory {
        return results;
    }
    if let Err(e) = pool2_rows(plan, gap, round_trips, memory, &mut results).await {
        let why = failed(e);
        let wanted = [
            (&mut results.spaced, round_trips),
            (&mut results.back_to_back, round_trips),
            (&mut results.rss_pool2, memory),
        ];
        for (slot, wanted) in wanted {
            if wanted && slot.is_err() {
                *slot = Err(why.clone());
            }
        }
        if memory && results.growth.is_err() {
            results.growth = Err(why);
        }
    }
    if memory {
        progress("server RSS with --pool-size 0");
        results.rss_pool0 = async {
            let server = ServerChild::start(0).await?;
            server.execute("print(1)", "1\n").await?;
            server.settle(Duration::from_millis(500)).await?;
            let rss = server.rss_samples().await;
            server.stop().await;
            rss
        }
        .await
        .map_err(failed);
    }
    results
}

async fn pool2_rows(
    plan: &Plan,
    gap: Duration,
    round_trips: bool,
    memory: bool,
    results: &mut ServerResults,
) -> anyhow::Result<()> {
    progress("execute_code round trips over MCP stdio (serve --pool-size 2)");
    let server = ServerChild::start(2).await?;
    server.settle(Duration::from_secs(1)).await?;
    for _ in 0..3 {
        server.execute("print(1)", "1\n").await?;
        tokio::time::sleep(gap).await;
    }
    if memory {
        server.settle(Duration::from_millis(200)).await?;
        results.rss_pool2 = Ok(server.rss_samples().await?);
    }

    if round_trips {
        let mut spaced = Vec::new();
        let mut inside = Vec::new();
        for _ in 0..plan.round_trips {
            tokio::time::sleep(gap).await;
            let started = Instant::now();
            inside.push(server.execute("print(1)", "1\n").await?);
            spaced.push(ms(started.elapsed()));
        }
        results.spaced = Ok(spaced);
        results.spaced_inside = Ok(inside);

        server.settle(Duration::from_millis(500)).await?;
        let mut back_to_back = Vec::new();
        for _ in 0..plan.round_trips {
            let started = Instant::now();
            server.execute("print(1)", "1\n").await?;
            back_to_back.push(ms(started.elapsed()));
        }
        results.back_to_back = Ok(back_to_back);
    }

    if memory {
        let every = (plan.executions / 10).max(1);
        progress(&format!(
            "server RSS over {} executions (back to back; RSS read when idle every {every})",
            plan.executions
        ));
        server.settle(Duration::from_millis(500)).await?;
        let mut growth = vec![(0, server.rss_mib()?)];
        for done in 1..=plan.executions {
            server.execute(GROWTH_SCRIPT, GROWTH_STDOUT).await?;
            if done % every == 0 {
                server.settle(Duration::from_millis(300)).await?;
                growth.push((done, server.rss_mib()?));
            }
        }
        results.growth = Ok(growth);
    }
    server.stop().await;
    Ok(())
}

/// Least-squares slope of `points`, in MiB per 1000 executions.
fn slope_per_1000(points: &[(usize, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return f64::NAN;
    }
    let mx = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 as f64 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 as f64 - mx).powi(2)).sum();
    sxy / sxx * 1000.0
}

// ---------------------------------------------------------------------------------------------
// Row 3: a tool call from Python vs the same call made directly.

/// The checkout this runner was built in (`cargo xtask` runs it from there): its fixtures, its
/// peer script, its binary.
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixtures_entry() -> PathBuf {
    source_dir()
        .join("tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

struct ToolResults {
    direct: Samples,
    through_us: Samples,
}

async fn tool_rows(plan: &Plan) -> ToolResults {
    let entry = fixtures_entry();
    if !entry.is_file() {
        let why = format!(
            "skipped: no {} (`cd tests/fixtures && npm ci` first)",
            entry.display()
        );
        return ToolResults {
            direct: Err(why.clone()),
            through_us: Err(why),
        };
    }
    progress("get-sum directly (rmcp client → server-everything)");
    let direct = direct_calls(&entry, plan.tool_calls).await.map_err(failed);
    progress("get-sum from Python (sandbox → hub → server-everything)");
    let through_us = python_tool_calls("thread", plan.tool_calls)
        .await
        .map_err(failed);
    ToolResults { direct, through_us }
}

async fn direct_calls(entry: &Path, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut command = tokio::process::Command::new("node");
    command.arg(entry).arg("stdio");
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start node (is Node.js installed?)")?;
    let client = ().serve(transport).await.context("MCP handshake with server-everything")?;
    let call = || async {
        let Value::Object(args) = json!({"a": 1, "b": 2}) else {
            unreachable!("a json object")
        };
        let result = client
            .call_tool(CallToolRequestParams::new("get-sum").with_arguments(args))
            .await?;
        if result.is_error == Some(true) {
            bail!("get-sum failed: {result:?}");
        }
        Ok(())
    };
    for _ in 0..20 {
        call().await?;
    }
    let mut samples = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        call().await?;
        samples.push(ms(started.elapsed()));
    }
    let _ = client.cancel().await;
    Ok(samples)
}

/// Times `n` calls of server-everything's get-sum from Python (after 20 not timed); prints the
/// milliseconds as a JSON list.
fn tool_call_script(n: usize) -> String {
    format!(
        "import json, time\n\
         f = tools.everything.get_sum\n\
         for _ in range(20):\n    f(a=1, b=2)\n\
         ms = []\n\
         for _ in range({n}):\n    t = time.perf_counter()\n    f(a=1, b=2)\n    ms.append((time.perf_counter() - t) * 1000)\n\
         print(json.dumps(ms))"
    )
}

// ---------------------------------------------------------------------------------------------
// Rows 4 and 6: cold process start, and the CPU-bound loop.

/// An error naming what a cold start printed, unless it exited well and `printed_right`.
fn expect_ran(out: &std::process::Output, printed_right: bool, who: &str) -> anyhow::Result<()> {
    if !out.status.success() || !printed_right {
        bail!(
            "{who} printed {:?} and {:?} ({})",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            out.status
        );
    }
    Ok(())
}

async fn cold_starts(n: usize) -> anyhow::Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let mut samples = Vec::new();
    // The first run (not counted) brings the binary into the page cache.
    for i in 0..=n {
        let started = Instant::now();
        let mut child = tokio::process::Command::new(binary())
            .args(["run", "-"])
            .current_dir(dir.path())
            .env(CONFIG_ENV, "")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start `mcp-code-mode run -`")?;
        let mut stdin = child.stdin.take().context("no stdin")?;
        stdin.write_all(b"print(1)\n").await?;
        drop(stdin);
        let out = child.wait_with_output().await?;
        let elapsed = ms(started.elapsed());
        expect_ran(&out, out.stdout == b"1\n", "`run -`")?;
        if i > 0 {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

// ---------------------------------------------------------------------------------------------
// Row 7: the Deno + Pyodide peer (bench/peer/setup.sh installs it).

/// The Pyodide release the binary embeds (the peer must load the same), from its `--version`:
/// `mcp-code-mode 0.1.0 (Pyodide 314.0.8)`.
fn pyodide_version() -> anyhow::Result<String> {
    let out = std::process::Command::new(binary())
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {} --version", binary().display()))?;
    let line = String::from_utf8_lossy(&out.stdout);
    line.split_once("(Pyodide ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(version, _)| version.to_owned())
        .with_context(|| {
            format!(
                "`{} --version` names no Pyodide release: {line:?}",
                binary().display()
            )
        })
}

fn peer_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MCP_CODE_MODE_BENCH_PEER").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    Path::new(&home).join(".cache/mcp-code-mode/bench-peer")
}

struct PeerResults {
    cold: Samples,
    /// Request line in, reply line out, timed from this process (the row we compare against).
    warm_pipe: Samples,
    /// `runPython` timed inside Deno, for reference.
    warm_in_process: Samples,
    heavy: Samples,
    rss: Option<f64>,
}

struct Peer {
    deno: PathBuf,
    dir: PathBuf,
    script: PathBuf,
}

impl Peer {
    /// The installed peer, or why it cannot run.
    fn find() -> Result<Peer, String> {
        let dir = peer_dir();
        let skipped = || "skipped: run `bash bench/peer/setup.sh`".to_owned();
        let deno = dir.join("node_modules/deno/deno");
        let pyodide = dir.join("node_modules/pyodide/package.json");
        if !deno.is_file() || !pyodide.is_file() {
            return Err(skipped());
        }
        let version = std::fs::read_to_string(&pyodide)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v["version"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let ours = pyodide_version().map_err(|e| format!("unavailable: {e:#}"))?;
        if version != ours {
            return Err(format!(
                "unavailable: the peer has pyodide {version}, not {ours}; {}",
                skipped().trim_start_matches("skipped: ")
            ));
        }
        let script = dir.join("bench-peer.mjs");
        if std::fs::read_to_string(&script).ok().as_deref() != Some(PEER_SCRIPT) {
            std::fs::write(&script, PEER_SCRIPT)
                .map_err(|e| format!("unavailable: cannot write {}: {e}", script.display()))?;
        }
        Ok(Peer { deno, dir, script })
    }

    /// `deno run` with read access to the peer folder only: no network, env, writes or prompts,
    /// and no remote module may be fetched (`--cached-only`).
    fn command(&self, mode: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.deno);
        command
            .arg("run")
            .arg("--cached-only")
            .arg("--no-prompt")
            .arg("--no-config")
            .arg(format!("--allow-read={}", self.dir.display()))
            .arg(&self.script)
            .arg(mode)
            .current_dir(&self.dir)
            .env("DENO_DIR", self.dir.join("deno-dir"))
            .env("NO_COLOR", "1")
            .kill_on_drop(true);
        command
    }

    async fn cold(&self, n: usize) -> anyhow::Result<Vec<f64>> {
        let mut samples = Vec::new();
        // The first run (not counted) fills the page cache and Deno's own caches.
        for i in 0..=n {
            let started = Instant::now();
            let out = self
                .command("cold")
                .stdin(Stdio::null())
                .output()
                .await
                .context("cannot start deno")?;
            let elapsed = ms(started.elapsed());
            let reply: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            expect_ran(&out, reply["stdout"] == "1\n", "the peer")?;
            if i > 0 {
                samples.push(elapsed);
            }
        }
        Ok(samples)
    }

    async fn warm(&self, plan: &Plan) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>, f64)> {
        let mut child = self
            .command("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start deno")?;
        let pid = child.id().context("deno has no process id")?;
        let mut stdin = child.stdin.take().context("no stdin")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let mut ask = async |request: Value| -> anyhow::Result<Value> {
            if !request.is_null() {
                stdin.write_all(format!("{request}\n").as_bytes()).await?;
                stdin.flush().await?;
            }
            let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
                .await
                .context("the peer did not answer within 120 s")??
                .context("the peer exited")?;
            Ok(serde_json::from_str(&line)?)
        };
        let ready = ask(Value::Null).await?;
        if ready["ready"] != true {
            bail!("the peer did not start: {ready}");
        }
        let print = json!({"code": "print(1)"});
        for _ in 0..5 {
            ask(print.clone()).await?;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rss = rss_mib(pid)?;
        let mut pipe = Vec::new();
        for _ in 0..plan.round_trips {
            let started = Instant::now();
            let reply = ask(print.clone()).await?;
            pipe.push(ms(started.elapsed()));
            if reply["stdout"] != "1\n" {
                bail!("the peer answered {reply}");
            }
        }
        let in_process = ask(json!({"code": "print(1)", "repeat": plan.round_trips})).await?;
        let heavy = ask(json!({"code": HEAVY, "repeat": plan.heavy_runs})).await?;
        let list = |v: &Value| -> anyhow::Result<Vec<f64>> {
            serde_json::from_value(v["ms"].clone()).with_context(|| format!("peer reply {v}"))
        };
        let (in_process, heavy) = (list(&in_process)?, list(&heavy)?);
        drop(stdin);
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        let _ = child.kill().await;
        Ok((pipe, in_process, heavy, rss))
    }
}

async fn peer_rows(plan: &Plan) -> PeerResults {
    let peer = match Peer::find() {
        Ok(peer) => peer,
        Err(why) => {
            return PeerResults {
                cold: Err(why.clone()),
                warm_pipe: Err(why.clone()),
                warm_in_process: Err(why.clone()),
                heavy: Err(why),
                rss: None,
            }
        }
    };
    progress("Deno + Pyodide peer: cold starts");
    let cold = peer.cold(plan.peer_cold_runs).await.map_err(failed);
    progress("Deno + Pyodide peer: warm round trips");
    match peer.warm(plan).await {
        Ok((pipe, in_process, heavy, rss)) => PeerResults {
            cold,
            warm_pipe: Ok(pipe),
            warm_in_process: Ok(in_process),
            heavy: Ok(heavy),
            rss: Some(rss),
        },
        Err(e) => {
            let why = failed(e);
            PeerResults {
                cold,
                warm_pipe: Err(why.clone()),
                warm_in_process: Err(why.clone()),
                heavy: Err(why),
                rss: None,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cpu}, {cores} cores")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// `a / b`, or None when either side is missing.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// A ratio as "0.42×", "2.4×", "49×".
fn times(r: f64) -> String {
    if r < 1.0 {
        format!("{r:.2}×")
    } else if r < 10.0 {
        format!("{r:.1}×")
    } else {
        format!("{r:.0}×")
    }
}

fn difference(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? - b?)
}

/// Runs the measurements of the rows in `only` (all when empty) and prints the table.
/// Measures `binary` (rows 2-11 but 8a, or those in `only`) and prints the tables.
pub async fn run(binary: PathBuf, quick: bool, only: &[u8]) -> anyhow::Result<()> {
    if only.contains(&1) {
        bail!("row 1 (a fresh sandbox made ready) is measured in-process: `cargo bench --bench sandbox`");
    }
    BINARY
        .set(binary)
        .map_err(|_| anyhow::anyhow!("bench::run runs once"))?;
    let want = |row: u8| only.is_empty() || only.contains(&row);
    let not_run = || Err::<Vec<f64>, String>("not run".into());
    let plan = Plan::new(quick);
    let load_before = load_average();
    let started = Instant::now();

    let server = server_rows(&plan, SPACED_GAP, want(2), want(5)).await;
    let tools = if want(3) {
        tool_rows(&plan).await
    } else {
        ToolResults {
            direct: not_run(),
            through_us: not_run(),
        }
    };
    let cold = if want(4) {
        progress("cold process starts (`mcp-code-mode run -` with print(1))");
        cold_starts(plan.cold_runs).await.map_err(failed)
    } else {
        not_run()
    };
    let heavy = if want(6) {
        progress(&format!("{HEAVY} in fresh sandboxes"));
        heavy_over_mcp("thread", plan.heavy_runs)
            .await
            .map(|(outcome, _)| outcome)
            .map_err(failed)
    } else {
        not_run()
    };
    let peer = if want(7) {
        peer_rows(&plan).await
    } else {
        PeerResults {
            cold: not_run(),
            warm_pipe: not_run(),
            warm_in_process: not_run(),
            heavy: not_run(),
            rss: None,
        }
    };
    let load_after = load_average();

    let spaced_vs_peer = ratio(p50(&server.spaced), p50(&peer.warm_pipe));
    let overhead = difference(p50(&tools.through_us), p50(&tools.direct));
    let cold_vs_peer = ratio(p50(&cold), p50(&peer.cold));
    let heavy_vs_peer = ratio(p50(&heavy), p50(&peer.heavy));
    let pool_cost = difference(p50(&server.rss_pool2), p50(&server.rss_pool0));
    let compared = |r: Option<f64>, what: &str| r.map(|r| format!("{} {what}", times(r)));

    let mut rows = vec![
        Row::sampled(
            2,
            format!(
                "2a. `execute_code(\"print(1)\")` over MCP stdio, warm: calls {} ms apart, fresh sandbox each",
                server.gap.as_millis()
            ),
            "ms",
            format!("≤ 1.5 ms p50 (peer: {PEER_REFERENCE_MS} ms reusing one instance)"),
            &server.spaced,
            compared(spaced_vs_peer, "the Deno peer's warm round trip"),
        ),
        Row::sampled(
            2,
            "2b. `execute_code(\"print(1)\")` over MCP stdio, back to back (pool drained)",
            "ms",
            "(restore-bound throughput)",
            &server.back_to_back,
            p50(&server.back_to_back).map(|p| format!("≈ {:.0} calls/s, one at a time", 1000.0 / p)),
        ),
        Row::sampled(
            3,
            "3. `get-sum` called directly (rmcp client → server-everything)",
            "ms",
            "(baseline)",
            &tools.direct,
            None,
        ),
        Row::sampled(
            3,
            "3. `tools.everything.get_sum(a=1, b=2)` from Python (sandbox → hub → server-everything)",
            "ms",
            "overhead ≤ 0.5 ms p50",
            &tools.through_us,
            overhead.map(|o| format!("overhead {o:+.2} ms p50")),
        ),
        Row::sampled(
            4,
            "4. cold process start to first result (`mcp-code-mode run -`, `print(1)`)",
            "ms",
            "≤ 300 ms p50",
            &cold,
            compared(cold_vs_peer, "the Deno peer's cold start"),
        ),
        Row::sampled(
            5,
            "5. server RSS, idle, pool of 2 ready (`serve --pool-size 2`)",
            "MiB",
            "≤ 150 MiB",
            &server.rss_pool2,
            pool_cost.map(|c| format!("{c:+.1} MiB over no pool ({:.1} MiB per sandbox)", c / 2.0)),
        ),
        Row::sampled(
            5,
            "5. server RSS, idle, no pool (`serve --pool-size 0`)",
            "MiB",
            "(comparison)",
            &server.rss_pool0,
            peer.rss.map(|r| format!("Deno peer, one instance: {r:.1} MiB")),
        ),
    ];
    let mut notes = Vec::new();
    let growth_name = format!(
        "5. server RSS over {} executions (pool of 2, read when idle)",
        plan.executions
    );
    match &server.growth {
        Ok(points) => {
            let first = points.first().map(|p| p.1).unwrap_or(f64::NAN);
            let last = points.last().map(|p| p.1).unwrap_or(f64::NAN);
            let max = points.iter().map(|p| p.1).fold(f64::NAN, f64::max);
            let slope = slope_per_1000(points);
            let late = slope_per_1000(&points[points.len() / 2..]);
            rows.push(Row {
                group: 5,
                name: growth_name,
                n: points.len().to_string(),
                p50: format!("{first:.1} → {last:.1} MiB"),
                p95: format!("max {max:.1} MiB"),
                target: "no growth trend".into(),
                compare: format!("slope {slope:+.2} MiB / 1000 runs (second half {late:+.2})"),
            });
            let series: Vec<String> = points.iter().map(|(n, r)| format!("{n}: {r:.1}")).collect();
            notes.push((
                5,
                format!(
                    "RSS growth (row 5): executions → MiB, each read once the server is idle again \
                     (pool refilled): {}. Each run is `{}`, sent back to back.",
                    series.join(", "),
                    GROWTH_SCRIPT.replace('\n', "; ")
                ),
            ));
        }
        Err(why) => rows.push(Row {
            group: 5,
            name: growth_name,
            n: "—".into(),
            p50: why.clone(),
            p95: "—".into(),
            target: "no growth trend".into(),
            compare: "—".into(),
        }),
    }
    rows.push(Row::sampled(
        6,
        format!("6. `{HEAVY}`, `duration_ms` of the outcome (fresh sandbox each)"),
        "ms",
        "≤ 100 ms p50",
        &heavy,
        compared(heavy_vs_peer, "the Deno peer (same loop, in-process)"),
    ));
    rows.push(Row::sampled(
        7,
        "7. Deno + Pyodide peer: cold, `deno run` to the result of `print(1)`",
        "ms",
        "(peer)",
        &peer.cold,
        None,
    ));
    rows.push(Row::sampled(
        7,
        "7. Deno + Pyodide peer: warm, one JSON line over stdin/stdout per `print(1)` (instance reused)",
        "ms",
        format!("(peer; issue quotes {PEER_REFERENCE_MS} ms)"),
        &peer.warm_pipe,
        None,
    ));
    rows.push(Row::sampled(
        7,
        "7. Deno + Pyodide peer: warm, `runPython(\"print(1)\")` timed inside Deno",
        "ms",
        "(peer, in-process)",
        &peer.warm_in_process,
        None,
    ));
    rows.retain(|r| want(r.group));

    let versus = |a: Option<f64>, b: Option<f64>| ratio(a, b).map(times).unwrap_or("n/a".into());
    notes.push((
        2,
        format!(
            "Row 2: our binary as `serve --pool-size 2` (no config: plain Python) driven by an rmcp \
             client; each sample is one `tools/call execute_code` request → response, on a fresh \
             sandbox taken from the pool. 2a waits {} ms before each call so the pool is full again \
             (time for both to be restored again); 2b sends the next call as soon as the last \
             returns, so after two calls each one waits for a restore. Of 2a's p50, the \
             sandbox's own `duration_ms` (job hand-off to report, inside the server) is {}; the \
             rest is MCP, stdio and taking the sandbox from the pool.",
            server.gap.as_millis(),
            fmt_opt(p50(&server.spaced_inside)),
        ),
    ));
    if want(2) && want(7) {
        notes.push((
            2,
            format!(
                "Warm round trip, compared: ours (2a) p50 {} vs the Deno peer's p50 {} over a pipe \
                 ({}) and {} in-process ({}); against the issue's {PEER_REFERENCE_MS} ms: {}. \
                 The fair pairing is 2a against the peer's pipe row: both time a request written by \
                 another process to a long-running server's stdin until the reply (with the captured \
                 stdout) is read back. Ours also speaks MCP JSON-RPC and restores a fresh sandbox per \
                 call; the peer answers a bare JSON line and reuses one Pyodide instance (state \
                 carries over between calls).",
                fmt_opt(p50(&server.spaced)),
                fmt_opt(p50(&peer.warm_pipe)),
                versus(p50(&server.spaced), p50(&peer.warm_pipe)),
                fmt_opt(p50(&peer.warm_in_process)),
                versus(p50(&server.spaced), p50(&peer.warm_in_process)),
                versus(p50(&server.spaced), Some(PEER_REFERENCE_MS)),
            ),
        ));
    }
    notes.push((
        3,
        format!(
            "Tool-call overhead (row 3): Python's `time.perf_counter()` around each \
             `tools.everything.get_sum(a=1, b=2)` (one script through `serve --sandbox thread`, \
             {n} calls after 20 unmeasured) minus \
             an rmcp client's own `get-sum` round trip to a second server-everything process \
             ({n} calls after 20 unmeasured): {} p50 (target ≤ 0.5 ms).",
            overhead
                .map(|o| format!("{o:+.2} ms"))
                .unwrap_or_else(|| "n/a".into()),
            n = plan.tool_calls,
        ),
    ));
    notes.push((
        4,
        format!(
            "Cold start (row 4, p50): ours {} vs Deno + Pyodide {} = {}. Each sample is a new \
             process, spawn to exit, stdout checked (one unmeasured run first). Ours restores the \
             embedded snapshot; the peer loads Pyodide from node_modules with `deno run \
             --cached-only --allow-read=<peer dir>` (no network permission) and runs `print(1)`.",
            fmt_opt(p50(&cold)),
            fmt_opt(p50(&peer.cold)),
            versus(p50(&cold), p50(&peer.cold)),
        ),
    ));
    if let Some(c) = pool_cost {
        notes.push((
            5,
            format!(
                "Memory (row 5): VmRSS of the `serve` process once idle after its first calls \
                 (3 with a pool of 2, 1 without); a pool of 2 costs {c:+.1} MiB over no pool.{}",
                peer.rss
                    .map(|r| format!(" The Deno peer holding one Pyodide instance: {r:.1} MiB."))
                    .unwrap_or_default()
            ),
        ));
    }
    let peer_first_heavy = peer.heavy.as_ref().ok().and_then(|h| h.first().copied());
    notes.push((
        6,
        format!(
            "Heavy loop (row 6, p50): ours {} (through `serve --sandbox thread`, each run in a \
             fresh sandbox; the outcome's `duration_ms`, job hand-off to report) vs the Deno peer {} (`runPython` timed inside Deno, the same \
             instance each time; its first run took {}) = {}.",
            fmt_opt(p50(&heavy)),
            fmt_opt(p50(&peer.heavy)),
            fmt_opt(peer_first_heavy),
            versus(p50(&heavy), p50(&peer.heavy)),
        ),
    ));
    if let Some(deno) = peer.rss.and(deno_version()) {
        notes.push((
            7,
            format!(
                "Deno peer (row 7): deno {} and pyodide {} from {} (bench/peer/setup.sh), \
             script bench/peer/peer.mjs; `deno run --cached-only --no-prompt --no-config \
             --allow-read=<that folder>`: no network, env or write permission.",
                deno,
                pyodide_version().unwrap_or_default(),
                peer_dir().display()
            ),
        ));
    }
    notes.sort_by_key(|(group, _)| *group);
    let mut notes: Vec<String> = notes
        .into_iter()
        .filter(|(group, _)| want(*group))
        .map(|(_, note)| note)
        .collect();
    notes.insert(
        0,
        format!(
            "Machine: {}; load average {load_before} before rows 2-7, {load_after} after them \
             ({:.0} s){}. Everything here was measured in this one run.",
            machine(),
            started.elapsed().as_secs_f64(),
            if quick { "; --quick (few samples)" } else { "" }
        ),
    );
    print_table(&rows, &notes);
    if want(8) {
        fork_section(&plan, quick).await;
    }
    if want(9) {
        http::section(quick).await;
    }
    if want(10) {
        local_section(&plan).await;
    }
    if want(11) {
        packages_section(quick).await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Row 10: the local executor (host CPython, not sandboxed) beside the forked sandbox.

async fn local_section(plan: &Plan) {
    println!("\n### The local executor (`--executor local`, not sandboxed) beside the sandbox (`--sandbox fork`)\n");
    println!("| measurement | local (host python3) | sandbox (fork) |");
    println!("|---|---|---|");
    let line = |what: &str, local: String, fork: String| println!("| {what} | {local} | {fork} |");
    let show = |r: &anyhow::Result<Vec<f64>>| match r {
        Ok(s) => format!("{} p50, {} p95 (n={})", p(s, 50.0), p(s, 95.0), s.len()),
        Err(e) => format!("failed: {e:#}"),
    };
    progress("the local executor beside the sandbox: print(1) back to back");
    let n = plan.round_trips;
    let local_rt = back_to_back("local", n).await;
    let fork_rt = back_to_back("fork", n).await;
    line(
        "10a. `execute_code(\"print(1)\")` over MCP stdio, back to back, client-side",
        show(&local_rt),
        show(&fork_rt),
    );
    progress(&format!("the local executor beside the sandbox: {HEAVY}"));
    let local_heavy = heavy_over_mcp("local", plan.heavy_runs).await;
    let fork_heavy = heavy_over_mcp("fork", plan.heavy_runs).await;
    let part = |r: &anyhow::Result<(Vec<f64>, Vec<f64>)>, inner: bool| match r {
        Ok((outcome, loop_ms)) => Ok(if inner {
            loop_ms.clone()
        } else {
            outcome.clone()
        }),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    line(
        &format!(
            "10b. `{HEAVY}` over MCP stdio, `duration_ms` of the outcome (process start included)"
        ),
        show(&part(&local_heavy, false)),
        show(&part(&fork_heavy, false)),
    );
    line(
        "10c. the same loop alone, timed inside the script (`time.perf_counter`)",
        show(&part(&local_heavy, true)),
        show(&part(&fork_heavy, true)),
    );
}

/// The CPU-bound loop through `serve` with executor `kind`: the outcome's own `duration_ms`, and
/// the loop alone as the script times it.
async fn heavy_over_mcp(kind: &str, n: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let server = ServerChild::start_with(2, kind).await?;
    server.wait_steady(kind).await?;
    let code = format!(
        "import time\nt = time.perf_counter()\nassert {HEAVY} == {HEAVY_RESULT}\nprint((time.perf_counter() - t) * 1000)"
    );
    let (mut outcome, mut inner) = (Vec::new(), Vec::new());
    for i in 0..=n {
        let report = server.execute_report(&code).await?;
        let loop_ms: f64 = report["stdout"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .parse()
            .with_context(|| format!("the loop printed no time: {report}"))?;
        if i > 0 {
            outcome.push(report["duration_ms"].as_f64().unwrap_or(f64::NAN));
            inner.push(loop_ms);
        }
    }
    server.stop().await;
    Ok((outcome, inner))
}

// ---------------------------------------------------------------------------------------------
// Row 11: importing a wheelhouse package in a fresh sandbox.

/// `import MOD` in a fresh sandbox: the whole import, and the part spent installing the wheels
/// (the wheelhouse finder's own time; folders are filled in and files read later, as the import
/// opens them).
/// With `installed`, the package is installed and every file of it read and written back as it
/// was (times too) before the clock starts, so each is a plain file of the in-memory filesystem:
/// what is left is the package's own import, as if its files had always been there.
fn import_script(module: &str, installed: bool) -> String {
    let setup = if installed {
        format!(
            "import os\ncodemode._WHEELHOUSE.install(codemode._WHEELHOUSE.package_for({module:?}))\n\
             for folder, _, files in os.walk(codemode._site_packages()):\n    \
             for name in files:\n        \
             path = os.path.join(folder, name)\n        \
             times = os.stat(path)\n        \
             with open(path, 'rb') as f: data = f.read()\n        \
             with open(path, 'wb') as f: f.write(data)\n        \
             os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))\n"
        )
    } else {
        String::new()
    };
    format!(
        "import time, codemode\n{setup}started = time.perf_counter()\nimport {module}\n\
         [(time.perf_counter() - started) * 1000, codemode._WHEELHOUSE.install_ms]"
    )
}

/// (whole import, finder) from an `execute_code` report of [`import_script`].
fn import_sample(report: &Value, module: &str) -> anyhow::Result<(f64, f64)> {
    let pair = report["result"].as_array().filter(|a| a.len() == 2);
    match pair.map(|a| (a[0].as_f64(), a[1].as_f64())) {
        Some((Some(total), Some(install))) => Ok((total, install)),
        _ => bail!("import {module}: unexpected report {report}"),
    }
}

async fn packages_section(quick: bool) {
    let modules = [("tabulate", 10), ("pydantic", 10), ("sympy", 10)];
    let n = |full: usize| if quick { 3 } else { full };
    println!();
    println!("| 11. import in a fresh sandbox | kind | n | whole import p50 | installing (finder) p50 | the package's own import p50 | over its own import | target |");
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    for kind in ["fork", "thread"] {
        // `serve` as a client runs it: the embedded wheels with the bytecode build.rs compiled.
        // Threads with no pool: each sandbox is restored when its call comes, so no restore of
        // the next one runs on the other core while an import is timed (a fork server's spares
        // are forked ahead, and copy their pages before the job, off its clock).
        let server = async {
            let pool_size = if kind == "thread" { 0 } else { 2 };
            let server = ServerChild::start_with(pool_size, kind).await?;
            server.wait_steady(kind).await?;
            anyhow::Ok(server)
        }
        .await;
        for (module, full) in modules {
            progress(&format!("import {module} in fresh {kind} sandboxes"));
            // Fresh and pre-installed samples alternate, so both see the same machine.
            let mut samples: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
            let mut failure = None;
            'samples: for _ in 0..n(full) {
                for (installed, kept) in samples.iter_mut().enumerate() {
                    let sample = match &server {
                        Ok(server) => server
                            .execute_report(&import_script(module, installed == 1))
                            .await
                            .and_then(|report| import_sample(&report, module)),
                        Err(e) => Err(anyhow::anyhow!("{e:#}")),
                    };
                    match sample {
                        Ok(sample) => kept.push(sample),
                        Err(e) => {
                            failure = Some(format!("{e:#}"));
                            break 'samples;
                        }
                    }
                }
            }
            let [fresh, installed] = samples;
            let total: Vec<f64> = fresh.iter().map(|s| s.0).collect();
            let finder: Vec<f64> = fresh.iter().map(|s| s.1).collect();
            let own: Vec<f64> = installed.iter().map(|s| s.0).collect();
            let cell = |s: &[f64]| {
                if s.is_empty() {
                    "—".to_owned()
                } else {
                    value(percentile(s, 50.0), "ms")
                }
            };
            let over = if total.is_empty() || own.is_empty() {
                "—".to_owned()
            } else {
                value(percentile(&total, 50.0) - percentile(&own, 50.0), "ms")
            };
            println!(
                "| `import {module}` | {kind} | {} | {} | {} | {} | {over} | ≤ 50 ms over its own import |{}",
                fresh.len(),
                cell(&total),
                cell(&finder),
                cell(&own),
                failure
                    .map(|f| format!(" failed: {}", cell_text(&f)))
                    .unwrap_or_default()
            );
        }
        if let Ok(server) = server {
            server.stop().await;
        }
    }
    println!();
    println!("- Row 11: each sample is one `execute_code` through `serve --sandbox fork` or `--sandbox thread --pool-size 0` (a fresh sandbox each: a child forked from the warmed zygote, or a thread sandbox restored from the snapshot when the call comes) running `import MOD` timed with `time.perf_counter()`. \"Installing (finder)\" is the wheelhouse finder's own time (laying out the package and its dependencies, with their bytecode, unread: a folder's files are made when something first looks into it, a file's bytes unpacked by the host when it is first read); the whole import also does that for what it opens. \"The package's own import\" is timed in sandboxes where the package was installed and all its files read and written back as they were (so plain files in memory) before the clock started (samples alternate with the fresh ones); \"over its own import\" is the difference of the two p50s, what the target bounds.");
}

fn cell_text(text: &str) -> String {
    cell(text)
}

// ---------------------------------------------------------------------------------------------
// Row 8: the forked sandbox beside the thread one, measured in the same run.

fn p(samples: &[f64], q: f64) -> String {
    value(percentile(samples, q), "ms")
}

async fn fork_section(plan: &Plan, quick: bool) {
    println!("\n### Forked sandboxes (`--sandbox fork`, the default) beside threads (`--sandbox thread`)\n");
    println!("(8a, a fresh sandbox made ready, is `cargo bench --bench sandbox`.)\n");
    println!("| measurement | fork | thread |");
    println!("|---|---|---|");
    let line =
        |what: &str, fork: String, thread: String| println!("| {what} | {fork} | {thread} |");
    let n = plan.round_trips;
    let fork_rt = back_to_back("fork", n).await;
    let thread_rt = back_to_back("thread", n.min(50)).await;
    let show = |r: &anyhow::Result<Vec<f64>>| match r {
        Ok(s) => format!("{} p50, {} p95 (n={})", p(s, 50.0), p(s, 95.0), s.len()),
        Err(e) => format!("failed: {e:#}"),
    };
    line(
        "8b. `execute_code(\"print(1)\")` over MCP stdio, back to back, client-side",
        show(&fork_rt),
        show(&thread_rt) + " (`--pool-size 2`)",
    );
    let (calls, threads_calls) = if quick { (200, 40) } else { (1000, 100) };
    let fork_burst = burst("fork", calls, 8).await;
    let thread_burst = burst("thread", threads_calls, 8).await;
    let show_burst = |r: &anyhow::Result<Burst>| match r {
        Ok(b) => format!(
            "{:.0} executions/s, {} p50, {} p95, {} failed of {}",
            b.per_second,
            p(&b.latencies, 50.0),
            p(&b.latencies, 95.0),
            b.failures,
            b.latencies.len() + b.failures
        ),
        Err(e) => format!("failed: {e:#}"),
    };
    line(
        "8c. `execute_code` at concurrency 8, every fourth calling server-everything's get-sum",
        show_burst(&fork_burst),
        show_burst(&thread_burst),
    );
    match idle_rss_with_zygote().await {
        Ok((server, zygote)) => line(
            "8d. idle server RSS (fork: server + zygote)",
            format!("{server:.1} + {zygote:.1} = {:.1} MiB", server + zygote),
            "row 5".into(),
        ),
        Err(e) => line("8d. idle server RSS", failed(e), String::new()),
    }
    match child_memory().await {
        Ok(((uss, pss), spares)) => line(
            "8e. private memory of a child running a script (USS; PSS), and of each spare waiting for a job",
            format!(
                "{uss:.1} MiB USS, {pss:.1} MiB PSS; spares: {}",
                spares
                    .iter()
                    .map(|(uss, _)| format!("{uss:.1} MiB"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "one isolate each: row 5".into(),
        ),
        Err(e) => line("8e. private memory of a child", failed(e), String::new()),
    }
    let entry = fixtures_entry();
    let calls = plan.tool_calls;
    let direct = direct_calls(&entry, calls).await;
    let overhead = |through: anyhow::Result<Vec<f64>>| match (&direct, through) {
        (Ok(direct), Ok(through)) => format!(
            "+{} p50 ({} from Python, {} direct; n={calls})",
            value(percentile(&through, 50.0) - percentile(direct, 50.0), "ms"),
            p(&through, 50.0),
            p(direct, 50.0)
        ),
        (Err(e), _) => format!("direct calls failed: {e:#}"),
        (_, Err(e)) => failed(e),
    };
    line(
        "8f. a tool call from Python over calling server-everything's get-sum directly",
        overhead(python_tool_calls("fork", calls).await),
        overhead(python_tool_calls("thread", calls).await),
    );
    match fork_growth(if quick { plan.executions } else { 10_000 }).await {
        Ok(points) => {
            let server: Vec<(usize, f64)> = points.iter().map(|&(n, s, _)| (n, s)).collect();
            let zygote: Vec<(usize, f64)> = points.iter().map(|&(n, _, z)| (n, z)).collect();
            let (first, last) = (points[0], points[points.len() - 1]);
            line(
                &format!("8g. RSS over {} executions back to back (server; zygote)", last.0),
                format!(
                    "server {:.1} → {:.1} MiB ({:+.2} MiB/1000); zygote {:.1} → {:.1} MiB ({:+.2} MiB/1000)",
                    first.1,
                    last.1,
                    slope_per_1000(&server),
                    first.2,
                    last.2,
                    slope_per_1000(&zygote)
                ),
                "row 5".into(),
            )
        }
        Err(e) => line("8g. RSS over executions", failed(e), String::new()),
    }
    let starts = if quick { 2 } else { 8 };
    let show_early = |r: anyhow::Result<Vec<f64>>| match r {
        Ok(s) => format!(
            "{} p50, {} p95, {} max (n={}, {starts} starts)",
            p(&s, 50.0),
            p(&s, 95.0),
            value(s.iter().copied().fold(0.0, f64::max), "ms"),
            s.len()
        ),
        Err(e) => failed(e),
    };
    line(
        "8h. `execute_code(\"print(1)\")` every 100 ms from a server's first result to 5 s after its start (the zygote warms up meanwhile), client-side",
        show_early(first_seconds("fork", starts).await),
        show_early(first_seconds("thread", starts).await) + " (`--pool-size 2`)",
    );
}

/// Round trips in the first seconds of `starts` servers: from each one's first result (a cold
/// start, not counted) a `print(1)` every 100 ms until 5 s after the server started, while a
/// zygote is still warming up.
async fn first_seconds(kind: &str, starts: usize) -> anyhow::Result<Vec<f64>> {
    let mut samples = Vec::new();
    for _ in 0..starts {
        let started = Instant::now();
        let server = ServerChild::start_with(2, kind).await?;
        server.execute("print(1)", "1\n").await?;
        while started.elapsed() < Duration::from_secs(5) {
            let call = Instant::now();
            server.execute("print(1)", "1\n").await?;
            samples.push(ms(call.elapsed()));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        server.stop().await;
    }
    Ok(samples)
}

async fn back_to_back(kind: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let server = ServerChild::start_with(2, kind).await?;
    server.wait_steady(kind).await?;
    for _ in 0..5 {
        server.execute("print(1)", "1\n").await?;
    }
    let mut samples = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        server.execute("print(1)", "1\n").await?;
        samples.push(ms(started.elapsed()));
    }
    server.stop().await;
    Ok(samples)
}

struct Burst {
    per_second: f64,
    latencies: Vec<f64>,
    failures: usize,
}

/// `calls` executions, `concurrency` at a time; every fourth calls server-everything's get-sum.
async fn burst(kind: &str, calls: usize, concurrency: usize) -> anyhow::Result<Burst> {
    use futures::StreamExt;
    let entry = fixtures_entry();
    if !entry.is_file() {
        bail!("no {} (cd tests/fixtures && npm ci)", entry.display());
    }
    let config = json!({"servers": {"everything": {"command": "node", "args": [entry]}}});
    let server = ServerChild::start_full(2, kind, Some(&config)).await?;
    const TOOL: &str = "print(tools.everything.get_sum(a=1, b=2))";
    let tool_stdout = server.execute_any(TOOL).await?;
    server.wait_steady(kind).await?;
    server.execute("print(1)", "1\n").await?;
    let started = Instant::now();
    let results: Vec<Result<f64, anyhow::Error>> = futures::stream::iter(0..calls)
        .map(|i| {
            let (code, expect) = if i % 4 == 3 {
                (TOOL, tool_stdout.as_str())
            } else {
                ("print(1)", "1\n")
            };
            let server = &server;
            async move {
                let t = Instant::now();
                server.execute(code, expect).await.map(|_| ms(t.elapsed()))
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    server.stop().await;
    let failures = results.iter().filter(|r| r.is_err()).count();
    Ok(Burst {
        per_second: calls as f64 / elapsed,
        latencies: results.into_iter().filter_map(Result::ok).collect(),
        failures,
    })
}

/// RSS of an idle `serve --sandbox fork` and of its zygote, in MiB.
async fn idle_rss_with_zygote() -> anyhow::Result<(f64, f64)> {
    let server = ServerChild::start_with(0, "fork").await?;
    server.execute("print(1)", "1\n").await?;
    server.wait_steady("fork").await?;
    server.settle(Duration::from_millis(500)).await?;
    let rss = (server.rss_mib()?, rss_mib(server.zygote()?)?);
    server.stop().await;
    Ok(rss)
}

/// The children of `pid` (of all its threads).
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let listed = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(
            listed
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    children
}

/// A process's private memory (USS: Private_Clean + Private_Dirty) and PSS, in MiB.
fn uss_pss_mib(pid: u32) -> anyhow::Result<(f64, f64)> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .with_context(|| format!("cannot read /proc/{pid}/smaps_rollup"))?;
    let kb = |key: &str| -> f64 {
        rollup
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0)
    };
    Ok((
        (kb("Private_Clean:") + kb("Private_Dirty:")) / 1024.0,
        kb("Pss:") / 1024.0,
    ))
}

/// CPU time a process has used so far, in clock ticks (utime + stime).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit_once(") ").map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// What forked children hold privately: one running a script (1.5 s of a busy loop, measured
/// half-way) and the spares waiting for a job. (USS MiB, PSS MiB) of the running child, then of
/// each spare.
async fn child_memory() -> anyhow::Result<((f64, f64), Vec<(f64, f64)>)> {
    let server = ServerChild::start_with(2, "fork").await?;
    server.execute("print(1)", "1\n").await?;
    server.wait_steady("fork").await?;
    // The pool replaces spares forked before the zygote warmed up within a second of it.
    server.settle(Duration::from_millis(1500)).await?;
    let zygote = server.zygote()?;
    let busy = "import time\nt = time.time()\nwhile time.time() - t < 1.5:\n    pass\nprint(2)";
    let (ran, measured) = tokio::join!(server.execute(busy, "2\n"), async {
        tokio::time::sleep(Duration::from_millis(750)).await;
        let mut children = children_of(zygote);
        // The running child is the one using the CPU; the others wait for a job.
        children.sort_by_key(|&pid| std::cmp::Reverse(cpu_ticks(pid)));
        let (running, spares) = children
            .split_first()
            .context("the zygote has no children")?;
        let spares: anyhow::Result<Vec<_>> = spares.iter().map(|&pid| uss_pss_mib(pid)).collect();
        anyhow::Ok((uss_pss_mib(*running)?, spares?))
    });
    ran?;
    server.stop().await;
    measured
}

/// A tool call from Python (rows 3 and 8f): `n` calls of server-everything's get-sum timed inside
/// one script, through `serve --sandbox kind`.
async fn python_tool_calls(kind: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let entry = fixtures_entry();
    if !entry.is_file() {
        bail!("no {} (cd tests/fixtures && npm ci)", entry.display());
    }
    let config = json!({"servers": {"everything": {"command": "node", "args": [entry]}}});
    let server = ServerChild::start_full(2, kind, Some(&config)).await?;
    server
        .execute_any("tools.everything.get_sum(a=1, b=2)")
        .await?;
    server.wait_steady(kind).await?;
    let stdout = server.execute_any(&tool_call_script(n)).await?;
    server.stop().await;
    serde_json::from_str::<Vec<f64>>(stdout.trim())
        .with_context(|| format!("unexpected output: {stdout}"))
}

/// Server and zygote RSS over `n` executions back to back (fork), read when idle every n/10:
/// (executions so far, server MiB, zygote MiB).
async fn fork_growth(n: usize) -> anyhow::Result<Vec<(usize, f64, f64)>> {
    let server = ServerChild::start_with(2, "fork").await?;
    server.execute(GROWTH_SCRIPT, GROWTH_STDOUT).await?;
    server.wait_steady("fork").await?;
    server.settle(Duration::from_millis(500)).await?;
    let zygote = server.zygote()?;
    let every = (n / 10).max(1);
    let mut points = vec![(0, server.rss_mib()?, rss_mib(zygote)?)];
    for done in 1..=n {
        server.execute(GROWTH_SCRIPT, GROWTH_STDOUT).await?;
        if done % every == 0 {
            server.settle(Duration::from_millis(300)).await?;
            points.push((done, server.rss_mib()?, rss_mib(zygote)?));
        }
    }
    server.stop().await;
    Ok(points)
}

/// The peer's deno version, from its npm package.
fn deno_version() -> Option<String> {
    let text = std::fs::read_to_string(peer_dir().join("node_modules/deno/package.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_owned)
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|v| value(v, "ms")).unwrap_or_else(|| "n/a".into())
}
