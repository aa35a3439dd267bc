//! cli — the `mcp-code-mode` command: parses flags, sets up logging (stderr only: stdout is the
//! MCP channel), and hands off to the engine or the server.

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use mcp_code_mode::bridge::Stream;
use mcp_code_mode::bridge::{NoTools, ToolHost};
use mcp_code_mode::config::{self, Config};
use mcp_code_mode::engine::pool::SPARE_CHILDREN;
use mcp_code_mode::engine::{Job, Limits, Outcome, Pool, SandboxConfig, Snapshot, ZygoteCommand};
use mcp_code_mode::hub::Hub;
use mcp_code_mode::local::LocalPython;
use mcp_code_mode::replay::{self, Cassette, MatchMode, Player, Recorder, Redactor};
use mcp_code_mode::server::sessions::{SessionLimits, Sessions};
use mcp_code_mode::server::{DataOptions, ServeOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "mcp-code-mode",
    // `bench` (cargo xtask) reads the Pyodide release from here for its Deno + Pyodide peer.
    version = concat!(env!("CARGO_PKG_VERSION"), " (Pyodide ", mcp_code_mode_sandbox::pyodide_version!(), ")"),
    about = "An MCP server that runs one Python script (Pyodide in a V8 sandbox) calling your MCP servers' tools",
    after_help = "With no command, `serve` runs: what an MCP client's config launches.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over stdio (the default): execute_code plus tool discovery.
    Serve(ServeArgs),
    /// Run a Python script in a fresh sandbox and print what it prints.
    Run(RunArgs),
    /// Start the server as a child, drive it as an MCP client, and print a transcript.
    Debug(DebugArgs),
    /// Sign in to a remote server that uses OAuth, ahead of time (tokens kept for serve and run).
    Login(LoginArgs),
    /// Run Python scripts in this V8 host and in headless Chromium and compare them byte for byte.
    #[cfg(feature = "parity")]
    Parity(mcp_code_mode::parity::ParityArgs),
    /// The sandbox zygote `serve` and `run` start (internal: its control socket is fd 3).
    #[command(name = "__zygote", hide = true)]
    Zygote(ZygoteArgs),
}

#[derive(Args)]
struct ZygoteArgs {
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    packages: PackageArgs,
    #[arg(long = "no-snapshot")]
    no_snapshot: bool,
    /// No warm-up rounds between forks (`run` forks one child and is done).
    #[arg(long = "no-warm-up")]
    no_warm_up: bool,
}

/// Where each execution's sandbox runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SandboxKind {
    /// A child process forked from a pre-booted zygote and sealed by the kernel (seccomp, rlimits,
    /// empty namespaces where allowed): milliseconds per sandbox.
    Fork,
    /// A V8 isolate on a thread of this process, restored from the snapshot for each execution
    /// (for platforms without fork, and for comparison).
    Thread,
}

#[derive(Args, Clone, Copy)]
struct SandboxArg {
    /// Where each execution runs: `fork` (a sealed child process) or `thread` (in this process).
    #[arg(long, value_enum, default_value_t = SandboxKind::Fork, value_name = "KIND")]
    sandbox: SandboxKind,
}

/// Where scripts run, chosen per start (`--executor`, else the config's `"executor"`).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExecutorKind {
    /// Pyodide in a V8 isolate (the default): sandboxed.
    Sandbox,
    /// A fresh host python3 process per script: NOT sandboxed (your files, network, packages).
    Local,
}

#[derive(Args, Clone)]
struct ExecutorArgs {
    /// Where scripts run: `sandbox` (Pyodide in V8, the default) or `local` (a fresh host python3
    /// process per script, as you, with your files, network and packages: NOT sandboxed).
    /// Default: the config's "executor", else `sandbox`.
    #[arg(long, value_enum, value_name = "KIND")]
    executor: Option<ExecutorKind>,
    /// With the local executor: the Python to run scripts with (3.10 or later; default: the
    /// config's "python", else python3 on PATH).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// The sandbox's own flags given on the command line (see [`sandbox_flags_given`]): refused
    /// with the local executor rather than silently ignored.
    #[arg(skip)]
    sandbox_flags: Vec<&'static str>,
}

/// Which of the sandbox's own flags `matches` (of `serve` or `run`) holds from the command line.
fn sandbox_flags_given(matches: &ArgMatches) -> Vec<&'static str> {
    [
        ("sandbox", "--sandbox"),
        ("pool_size", "--pool-size"),
        ("no_snapshot", "--no-snapshot"),
        ("memory_mb", "--memory-mb"),
        ("wheels", "--wheels"),
        ("preload", "--preload"),
        ("code_session_memory_mb", "--code-session-memory-mb"),
    ]
    .into_iter()
    .filter(|(id, _)| {
        matches
            .try_get_raw(id)
            .is_ok_and(|_| matches.value_source(id) == Some(ValueSource::CommandLine))
    })
    .map(|(_, flag)| flag)
    .collect()
}

impl ExecutorArgs {
    /// The local executor's interpreter, checked, when scripts are to run locally; None for the
    /// sandbox. Says so loudly on stderr: scripts are then not sandboxed.
    async fn local(&self, config: Option<&Config>) -> anyhow::Result<Option<LocalPython>> {
        let local = match self.executor {
            Some(kind) => kind == ExecutorKind::Local,
            None => config.and_then(|c| c.executor) == Some(config::Executor::Local),
        };
        if !local {
            if self.python.is_some() {
                anyhow::bail!(
                    "--python applies only to the local executor: add --executor local (or \"executor\": \"local\" in the config)"
                );
            }
            return Ok(None);
        }
        if let Some(flag) = self.sandbox_flags.first() {
            anyhow::bail!(
                "{flag} applies only to the sandbox, and scripts run in host Python here (the local executor, \
                 from --executor local or the config's \"executor\"): leave {flag} out"
            );
        }
        let python = self
            .python
            .as_deref()
            .or_else(|| config.and_then(|c| c.python.as_deref()));
        let found = LocalPython::find(python).await?;
        eprintln!(
            "mcp-code-mode: WARNING: the local executor is on: scripts are NOT sandboxed. Each runs in a fresh {}, \
             with that user's files, network and installed packages",
            found.describe()
        );
        Ok(Some(found))
    }
}

/// Packages beyond the embedded wheelhouse (also `"packages"` in the config file).
#[derive(Args, Clone, Default)]
struct PackageArgs {
    /// A directory of your own wheels (pure, or cp314-cp314-pyemscripten_2026_0_wasm32; Pyodide
    /// 314.0.8's own builds are checked against its lock), importable beside the wheelhouse.
    #[arg(long, value_name = "DIR")]
    wheels: Option<PathBuf>,
    /// Packages installed and imported into every sandbox ahead of its script (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "PACKAGES")]
    preload: Vec<String>,
}

impl PackageArgs {
    /// The flags, else the config file's `"packages"`.
    fn or_config(&self, config: Option<&mcp_code_mode::config::Config>) -> PackageArgs {
        let from_config = config.map(|c| &c.packages);
        PackageArgs {
            wheels: self
                .wheels
                .clone()
                .or_else(|| from_config.and_then(|p| p.wheels.clone())),
            preload: if self.preload.is_empty() {
                from_config.map(|p| p.preload.clone()).unwrap_or_default()
            } else {
                self.preload.clone()
            },
        }
    }

    /// Makes these the process's packages (before any sandbox starts); a refused wheel stops
    /// start-up, naming it and why.
    fn apply(&self) -> anyhow::Result<()> {
        use mcp_code_mode_sandbox::wheels::{use_wheelhouse, Wheelhouse};
        let house = Wheelhouse::with_user_wheels(self.wheels.as_deref(), &self.preload)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .with_bytecode(mcp_code_mode::assets::BYTECODE);
        use_wheelhouse(house);
        Ok(())
    }

    fn zygote_args(&self, args: &mut Vec<std::ffi::OsString>) {
        if let Some(dir) = &self.wheels {
            args.push("--wheels".into());
            args.push(dir.clone().into_os_string());
        }
        if !self.preload.is_empty() {
            args.push(format!("--preload={}", self.preload.join(",")).into());
        }
    }
}

/// The embedded snapshot, unless the user asked to boot from scratch.
fn snapshot(no_snapshot: bool) -> Option<Snapshot> {
    (!no_snapshot).then(mcp_code_mode::assets::snapshot)
}

/// The sandboxes `serve` and `run` take from. `ahead_of_demand`: for a server, how many thread
/// sandboxes to keep booted (forks keep [`SPARE_CHILDREN`]); `None` (`run`): none.
/// `local`: the local executor's interpreter, which then runs every script instead.
fn sandboxes(
    kind: SandboxArg,
    limits: &LimitArgs,
    packages: &PackageArgs,
    no_snapshot: bool,
    ahead_of_demand: Option<usize>,
    local: Option<LocalPython>,
) -> anyhow::Result<Arc<Pool>> {
    if let Some(python) = local {
        return Ok(Pool::local(python, limits.limits()));
    }
    packages.apply()?;
    sandbox_pool(kind, limits, packages, no_snapshot, ahead_of_demand)
}

/// [`sandboxes`] once the process's packages are set: a pool of thread or forked sandboxes.
fn sandbox_pool(
    kind: SandboxArg,
    limits: &LimitArgs,
    packages: &PackageArgs,
    no_snapshot: bool,
    ahead_of_demand: Option<usize>,
) -> anyhow::Result<Arc<Pool>> {
    Ok(match kind.sandbox {
        SandboxKind::Thread => {
            mcp_code_mode::engine::offer_compiled_code(
                mcp_code_mode::assets::COMPILED_WASM,
                mcp_code_mode::assets::COMPILED_JS,
            );
            Pool::new(
                limits.limits(),
                snapshot(no_snapshot),
                ahead_of_demand.unwrap_or(0),
            )
        }
        SandboxKind::Fork => {
            let program = std::env::current_exe()
                .context("cannot find this program to start the sandbox zygote")?;
            let mut args: Vec<std::ffi::OsString> = vec![
                "__zygote".into(),
                format!("--timeout={}", limits.timeout).into(),
                format!("--memory-mb={}", limits.memory_mb).into(),
                format!("--max-output={}", limits.max_output).into(),
            ];
            if no_snapshot {
                args.push("--no-snapshot".into());
            }
            if ahead_of_demand.is_none() {
                args.push("--no-warm-up".into());
            }
            packages.zygote_args(&mut args);
            Pool::forks(
                ZygoteCommand { program, args },
                limits.limits(),
                ahead_of_demand.map_or(0, |_| SPARE_CHILDREN),
            )
        }
    })
}

#[derive(Args)]
struct LoginArgs {
    /// The remote server to sign in to, by its name in the config.
    server: String,
    #[command(flatten)]
    config: ConfigArg,
}

#[derive(Args)]
struct ConfigArg {
    /// The servers to connect to (else $MCP_CODE_MODE_CONFIG, else config/mcp_servers.json if present).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    packages: PackageArgs,
    /// The longest timeout_s a client may ask execute_code for.
    #[arg(long = "max-timeout", default_value_t = 300.0, value_name = "SECONDS", value_parser = config::parse_timeout)]
    max_timeout: f64,
    /// Boot Pyodide from scratch instead of restoring the embedded snapshot (slower; for comparison).
    #[arg(long = "no-snapshot")]
    no_snapshot: bool,
    /// Derive every sandbox's randomness from N (random, uuid4, os.urandom, hash seed): the same
    /// calls, or the same session's calls, give the same output. For tests and replays, never for
    /// secrets; thread sandboxes then boot on demand (their seed is drawn at boot).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// With `--sandbox thread`: sandboxes kept booted and ready (each is used once, then discarded).
    #[arg(long = "pool-size", default_value_t = 2, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=64))]
    pool_size: u16,
    #[command(flatten)]
    sandbox: SandboxArg,
    #[command(flatten)]
    executor: ExecutorArgs,
    /// Keep each execution's cassette (its tool calls and the catalogue it saw) in DIR as
    /// <execution_id>.jsonl, for `run --replay` (the report names the id).
    #[arg(long = "record-dir", value_name = "DIR")]
    record_dir: Option<PathBuf>,
    /// With --record-dir: replace this key's value, wherever it appears in arguments and
    /// results, with "[redacted]" in cassettes (repeatable).
    #[arg(long, value_name = "KEY", requires = "record_dir")]
    redact: Vec<String>,
    /// Run every tool call whose policy is "ask" without asking anyone ("deny" still holds):
    /// for trusted, unattended use only.
    #[arg(long = "approve-all")]
    approve_all: bool,
    #[command(flatten)]
    data: DataArgs,
    #[command(flatten)]
    sessions: SessionFlags,
    #[command(flatten)]
    http: HttpArgs,
}

/// execute_code's files in and out, and what executions leave (also the config's `"data"`,
/// whose keys are these flags' names with `_`; a flag given here wins).
#[derive(Args)]
struct DataArgs {
    /// The most one file may have: one of execute_code's `files`, or one returned from /output/.
    #[arg(long = "max-file-bytes", default_value_t = DataOptions::default().max_file_bytes as u64, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    max_file_bytes: u64,
    /// The most all files of one call may have together: those in, and those returned.
    #[arg(long = "max-files-bytes", default_value_t = DataOptions::default().max_files_bytes as u64, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    max_files_bytes: u64,
    /// The most files one call returns from /output/.
    #[arg(long = "max-output-files", default_value_t = DataOptions::default().max_output_files as u64, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_output_files: u64,
    /// stdout, stderr or a result's JSON longer than this comes back cut (a result keeps its
    /// shape), with a resource link to the whole.
    #[arg(long = "inline-bytes", default_value_t = DataOptions::default().inline_bytes as u64, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(256..))]
    inline_bytes: u64,
    /// Seconds what an execution leaves (its /output/ files, a cut stdout's whole) is kept.
    #[arg(long = "keep-runs-s", default_value_t = DataOptions::default().keep.time.as_secs_f64(), value_name = "SECONDS", value_parser = config::parse_timeout)]
    keep_runs_s: f64,
    /// MiB of what executions leave kept in all; past it the oldest runs go first.
    #[arg(long = "keep-runs-mb", default_value_t = (DataOptions::default().keep.bytes >> 20) as u64, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..))]
    keep_runs_mb: u64,
    /// Which of these were given on the command line (they win over the config's "data").
    #[arg(skip)]
    given: Vec<&'static str>,
}

impl DataArgs {
    /// Notes which flags `matches` holds from the command line.
    fn note_given(&mut self, matches: &ArgMatches) {
        self.given = config::DATA_KEYS
            .into_iter()
            .filter(|id| {
                matches
                    .try_get_raw(id)
                    .is_ok_and(|_| matches.value_source(id) == Some(ValueSource::CommandLine))
            })
            .collect();
    }

    /// The flags, else the config's "data", else the defaults.
    fn options(&self, config: Option<&Config>) -> anyhow::Result<DataOptions> {
        let file = config.map(|c| c.data).unwrap_or_default();
        let pick = |id: &str, flag: u64, from_file: Option<u64>| -> usize {
            let value = if self.given.contains(&id) {
                flag
            } else {
                from_file.unwrap_or(flag)
            };
            usize::try_from(value).unwrap_or(usize::MAX)
        };
        let keep_s = if self.given.contains(&"keep_runs_s") {
            self.keep_runs_s
        } else {
            file.keep_runs_s.unwrap_or(self.keep_runs_s)
        };
        let options = DataOptions {
            max_file_bytes: pick("max_file_bytes", self.max_file_bytes, file.max_file_bytes),
            max_files_bytes: pick(
                "max_files_bytes",
                self.max_files_bytes,
                file.max_files_bytes,
            ),
            max_output_files: pick(
                "max_output_files",
                self.max_output_files,
                file.max_output_files,
            ),
            inline_bytes: pick("inline_bytes", self.inline_bytes, file.inline_bytes),
            keep: mcp_code_mode::server::runs::Keep {
                time: Duration::from_secs_f64(keep_s),
                bytes: pick("keep_runs_mb", self.keep_runs_mb, file.keep_runs_mb)
                    .saturating_mul(1 << 20),
            },
        };
        anyhow::ensure!(
            options.max_files_bytes <= mcp_code_mode::engine::files::MAX_JOB_FILES_BYTES,
            "--max-files-bytes ({}) is more than {}, the most a script may be given",
            options.max_files_bytes,
            mcp_code_mode::engine::files::MAX_JOB_FILES_BYTES
        );
        anyhow::ensure!(
            options.max_file_bytes <= options.max_files_bytes,
            "--max-file-bytes ({}) is more than --max-files-bytes ({}), the most all files of a call may have",
            options.max_file_bytes,
            options.max_files_bytes
        );
        Ok(options)
    }
}

/// execute_code's sessions (see README, "Sessions"); each flag, else the config's "sessions".
#[derive(Args)]
struct SessionFlags {
    /// Sessions live at once, across all clients (default: the config's "sessions": {"max"},
    /// else 8).
    #[arg(long = "max-code-sessions", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_code_sessions: Option<u64>,
    /// Seconds without a call after which a session ends (default: the config's "idle_s", else
    /// 600).
    #[arg(long = "code-session-idle", value_name = "SECONDS", value_parser = config::parse_timeout)]
    code_session_idle: Option<f64>,
    /// MiB one session's sandbox may use in all, across its calls (default: the config's
    /// "memory_mb", else --memory-mb).
    #[arg(long = "code-session-memory-mb", value_name = "MIB", value_parser = clap::value_parser!(u64).range(MEMORY_MB))]
    code_session_memory_mb: Option<u64>,
}

impl SessionFlags {
    /// The flags, else the config file's, else the defaults.
    fn limits(&self, config: Option<&Config>, limits: &LimitArgs) -> SessionLimits {
        let file = config.map(|c| c.sessions).unwrap_or_default();
        SessionLimits {
            max: self
                .max_code_sessions
                .map(|n| n as usize)
                .or(file.max)
                .unwrap_or(SessionLimits::DEFAULT_MAX),
            idle: self
                .code_session_idle
                .or(file.idle_s)
                .map_or(SessionLimits::DEFAULT_IDLE, Duration::from_secs_f64),
            memory_mb: self
                .code_session_memory_mb
                .or(file.memory_mb)
                .unwrap_or(limits.memory_mb),
        }
    }
}

#[derive(Args)]
struct HttpArgs {
    /// Serve MCP over streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8000")]
    http: Option<std::net::SocketAddr>,
    /// With --http: no sessions, every request stands alone (replicas that share nothing).
    #[arg(long, requires = "http")]
    stateless: bool,
    /// With --http: the bearer token clients must send, the file's first line (else
    /// $MCP_CODE_MODE_AUTH_TOKEN). Required to bind a non-loopback address.
    #[arg(long = "auth-token-file", value_name = "PATH", requires = "http")]
    auth_token_file: Option<PathBuf>,
    /// With --http: a `Host` to accept besides localhost, 127.0.0.1 and ::1 (repeatable).
    #[arg(long = "allowed-host", value_name = "HOST", requires = "http")]
    allowed_hosts: Vec<String>,
    /// With --http: a browser origin to accept besides pages on localhost, 127.0.0.1 and [::1],
    /// as scheme://host:port (repeatable; a request from any other Origin is refused).
    #[arg(long = "allowed-origin", value_name = "ORIGIN", requires = "http")]
    allowed_origins: Vec<String>,
    /// With --http: the most sessions open at once.
    #[arg(long = "max-sessions", default_value_t = 256, value_name = "N")]
    max_sessions: usize,
    /// With --http: seconds after which a session nobody used is closed.
    #[arg(long = "session-idle", default_value_t = 1800.0, value_name = "SECONDS", value_parser = config::parse_timeout)]
    session_idle: f64,
    /// With --http: on SIGTERM/SIGINT, seconds running executions may take to finish.
    #[arg(long = "shutdown-grace", default_value_t = 30.0, value_name = "SECONDS", value_parser = config::parse_timeout)]
    shutdown_grace: f64,
}

impl HttpArgs {
    /// The HTTP front's options, or None to serve stdio.
    fn options(&self) -> anyhow::Result<Option<mcp_code_mode::server::http::HttpOptions>> {
        use mcp_code_mode::server::http::{AuthToken, HttpOptions};
        let Some(addr) = self.http else {
            return Ok(None);
        };
        let auth_token = match (
            &self.auth_token_file,
            std::env::var("MCP_CODE_MODE_AUTH_TOKEN"),
        ) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!("cannot read --auth-token-file '{}'", path.display())
                })?;
                let first = text.lines().next().unwrap_or_default();
                Some(AuthToken::new(first, &format!("'{}'", path.display()))?)
            }
            (None, Ok(text)) => Some(AuthToken::new(&text, "$MCP_CODE_MODE_AUTH_TOKEN")?),
            (None, Err(_)) => None,
        };
        let options = HttpOptions {
            addr,
            stateless: self.stateless,
            auth_token,
            allowed_hosts: self.allowed_hosts.clone(),
            allowed_origins: self.allowed_origins.clone(),
            max_sessions: self.max_sessions,
            session_idle: Duration::from_secs_f64(self.session_idle),
            grace: Duration::from_secs_f64(self.shutdown_grace),
        };
        options.check()?;
        Ok(Some(options))
    }
}

#[derive(Args)]
struct DebugArgs {
    #[command(flatten)]
    config: ConfigArg,
}

#[derive(Args, Clone)]
struct LimitArgs {
    /// Seconds a script may run before it is stopped.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS", value_parser = config::parse_timeout)]
    timeout: f64,
    /// MiB of memory a sandbox may use in all: V8's JS heap gets a quarter, Python and buffers the rest.
    #[arg(long = "memory-mb", default_value_t = 512, value_name = "MIB", value_parser = clap::value_parser!(u64).range(MEMORY_MB))]
    memory_mb: u64,
    /// Bytes of stdout, and of stderr, kept; the rest is dropped with a notice saying how much.
    #[arg(long = "max-output", default_value_t = 1 << 20, value_name = "BYTES")]
    max_output: usize,
}

/// The --memory-mb a sandbox may be given (a cassette's recorded limit is checked alike).
const MEMORY_MB: std::ops::RangeInclusive<u64> = 128..=16384;

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_secs_f64(self.timeout),
            memory_mb: self.memory_mb,
            max_output: self.max_output,
        }
    }
}

#[derive(Args)]
struct RunArgs {
    /// The script to run, or - for standard input (with --replay, default: the recorded script).
    #[arg(required_unless_present = "replay")]
    script: Option<PathBuf>,
    /// Print one JSON object {stdout, stderr, result, error, duration_ms, tool_calls} instead of the output.
    #[arg(long)]
    json: bool,
    /// Derive all randomness from N (random, uuid4, os.urandom, hash seed) for identical runs.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Boot Pyodide from scratch instead of restoring the embedded snapshot (slower; for comparison).
    #[arg(long = "no-snapshot")]
    no_snapshot: bool,
    #[command(flatten)]
    packages: PackageArgs,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    sandbox: SandboxArg,
    #[command(flatten)]
    executor: ExecutorArgs,
    /// Record the script's tool calls, with the catalogue it saw, to this cassette (JSON lines).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Start no server: answer every tool call from this cassette (made by --record or
    /// `serve --record-dir`). Its seed and limits apply unless given here.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    replay: Option<PathBuf>,
    /// With --replay: `strict`, calls as recorded, in the recorded order (calls made together in
    /// any order among themselves); `any`, in any order, each recorded call used once.
    #[arg(
        long = "replay-match",
        value_enum,
        value_name = "MODE",
        default_value_t,
        requires = "replay"
    )]
    replay_match: MatchMode,
    /// With --record: replace this key's value, wherever it appears in arguments and results,
    /// with "[redacted]" in the cassette (repeatable).
    #[arg(long, value_name = "KEY", requires = "record")]
    redact: Vec<String>,
    /// A file put in the script's working directory before it runs, under its own name, or as
    /// NAME with NAME=FILE (a relative path; repeatable).
    #[arg(long = "input", value_name = "[NAME=]FILE")]
    inputs: Vec<String>,
    /// Where the files the script writes under /output/ are saved (created if missing; a name
    /// that would leave DIR is refused).
    #[arg(long = "output-dir", value_name = "DIR")]
    output_dir: Option<PathBuf>,
}

/// Which limit flags `run` was given, by field: with --replay, the others come from the cassette.
#[derive(Clone, Copy, Default)]
struct LimitsGiven {
    timeout: bool,
    memory_mb: bool,
    max_output: bool,
}

impl LimitsGiven {
    fn of(matches: &ArgMatches) -> Self {
        let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        Self {
            timeout: given("timeout"),
            memory_mb: given("memory_mb"),
            max_output: given("max_output"),
        }
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    harden_process();
    // Parsed in two steps so `run` can tell a limit given from its default (see LimitsGiven).
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let (filter, bad_filter) = match std::env::var("MCP_CODE_MODE_LOG") {
        Err(_) => (tracing_subscriber::EnvFilter::new("warn"), None),
        Ok(spec) => match tracing_subscriber::EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(e) => (tracing_subscriber::EnvFilter::new("warn"), Some((spec, e))),
        },
    };
    tracing_subscriber::fmt()
        .with_writer(|| mcp_code_mode::log::RedactedStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .init();
    if let Some((spec, e)) = bad_filter {
        tracing::warn!(
            "MCP_CODE_MODE_LOG={spec:?} is not a log filter ({e}); logging warnings only. Examples: info, debug, warn,downstream=info"
        );
    }
    if let Some(Command::Zygote(args)) = cli.command {
        if let Err(e) = args.packages.apply() {
            eprintln!("mcp-code-mode: {e:#}");
            return ExitCode::from(2);
        }
        // Before any thread exists: the zygote forks itself.
        mcp_code_mode::engine::zygote::run(mcp_code_mode::engine::zygote::ZygoteOptions {
            limits: args.limits.limits(),
            // Restored once: a copy of its own, freed once restored (see assets::snapshot_once).
            snapshot: (!args.no_snapshot)
                .then(|| Box::new(mcp_code_mode::assets::snapshot_once) as _),
            warm_up: !args.no_warm_up,
            compiled_wasm: mcp_code_mode::assets::COMPILED_WASM,
            compiled_js: mcp_code_mode::assets::COMPILED_JS,
        });
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let command = cli.command.unwrap_or(Command::Serve(cli.serve));
    let result = runtime.block_on(async {
        match command {
            Command::Run(mut args) => {
                let run_matches = matches.subcommand_matches("run");
                let given = run_matches.map(LimitsGiven::of).unwrap_or_default();
                args.executor.sandbox_flags =
                    run_matches.map(sandbox_flags_given).unwrap_or_default();
                run(args, given).await
            }
            Command::Serve(mut args) => {
                let serve_matches = matches.subcommand_matches("serve").unwrap_or(&matches);
                args.executor.sandbox_flags = sandbox_flags_given(serve_matches);
                args.data.note_given(serve_matches);
                serve(args).await
            }
            #[cfg(feature = "parity")]
            Command::Parity(args) => mcp_code_mode::parity::main(args).await,
            Command::Zygote(_) => unreachable!("the zygote ran above"),
            Command::Login(args) => login(args).await,
            Command::Debug(args) => {
                let ok = mcp_code_mode::debug::run(args.config.config.as_deref()).await?;
                Ok(if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                })
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcp-code-mode: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Loads the configuration named by --config / $MCP_CODE_MODE_CONFIG / config/mcp_servers.json.
fn load_config(arg: &ConfigArg) -> anyhow::Result<Option<Config>> {
    match config::resolve_path(arg.config.as_deref()) {
        Some(path) => Ok(Some(config::load(&path)?)),
        None => Ok(None),
    }
}

/// `login SERVER`: exit 0 signed in (or nothing to do), 1 the sign-in failed, 2 no such remote
/// server.
async fn login(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let Some(config) = load_config(&args.config)? else {
        anyhow::bail!(
            "no configuration to find \"{}\" in: pass --config FILE, set {}, or create {}",
            args.server,
            config::PATH_ENV,
            config::DEFAULT_PATH
        );
    };
    let server = Hub::remote_server(&config, &args.server)?;
    match Hub::login(server).await {
        Ok(done) => {
            eprintln!("mcp-code-mode: {done}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "mcp-code-mode: cannot sign in to '{}': {}",
                args.server,
                mcp_code_mode::hub::error_words(&e)
            );
            Ok(ExitCode::from(1))
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.config)?;
    // Checked before anything starts: a refused address or token costs no boot.
    let http = args.http.options()?;
    match &config {
        None => eprintln!(
            "mcp-code-mode: no configuration (--config, $MCP_CODE_MODE_CONFIG or config/mcp_servers.json): \
             serving plain Python with no downstream servers"
        ),
        Some(c) => tracing::info!("configuration {}: {} servers", c.path.display(), c.servers.len()),
    }
    let limits = args.limits.limits();
    let data = args.data.options(config.as_ref())?;
    let local = args.executor.local(config.as_ref()).await?;
    let keeps_sessions = local.is_none();
    let packages = args.packages.or_config(config.as_ref());
    let pool = sandboxes(
        args.sandbox,
        &args.limits,
        &packages,
        args.no_snapshot,
        Some(args.pool_size as usize),
        local,
    )?;
    let sessions = keeps_sessions
        .then(|| {
            let session_limits = args.sessions.limits(config.as_ref(), &args.limits);
            // Sessions with a memory limit of their own take sandboxes from their own pool (a
            // second zygote, started on the first session), made on demand.
            let session_pool = if session_limits.memory_mb == args.limits.memory_mb {
                pool.clone()
            } else {
                let limits = LimitArgs {
                    memory_mb: session_limits.memory_mb,
                    ..args.limits.clone()
                };
                sandbox_pool(args.sandbox, &limits, &packages, args.no_snapshot, None)?
            };
            anyhow::Ok(Sessions::new(session_pool, session_limits))
        })
        .transpose()?;
    let record = match &args.record_dir {
        Some(dir) => {
            let redactor = Redactor::for_config(config.as_ref(), &args.redact);
            let record = replay::RecordDir::open(dir, redactor).with_context(|| {
                format!("cannot keep cassettes in --record-dir {}", dir.display())
            })?;
            Some(Arc::new(record))
        }
        None => None,
    };
    let hub = Hub::start(config.as_ref());
    let mut approvals = config
        .as_ref()
        .map(|c| c.approvals.clone())
        .unwrap_or_default();
    if args.approve_all {
        approvals.approve_all = true;
        eprintln!("mcp-code-mode: WARNING: --approve-all: tool calls whose policy is \"ask\" run WITHOUT ASKING ANYONE, destructive ones included (\"deny\" still holds); use it only for trusted, unattended runs");
        tracing::warn!("--approve-all: every \"ask\" tool call is approved without asking");
    }
    let options = ServeOptions {
        limits,
        max_timeout: Duration::from_secs_f64(args.max_timeout),
        record,
        approvals: Arc::new(approvals),
        data,
        sessions,
        seed: args.seed,
    };
    if let Some(http) = http {
        mcp_code_mode::server::http::serve_http(hub, pool, options, http).await?;
        return Ok(ExitCode::SUCCESS);
    }
    const NOT_A_CLIENT: &str =
        "`serve` is an MCP server speaking JSON-RPC on stdin/stdout, for an MCP client \
         to launch (see the README); to run a script yourself, use `mcp-code-mode run script.py`";
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprintln!("mcp-code-mode: waiting for an MCP client on stdin. {NOT_A_CLIENT}");
    }
    mcp_code_mode::server::serve_stdio(hub, pool, options)
        .await
        .map_err(|e| match e.downcast::<mcp_code_mode::server::Handshake>() {
            Ok(failed) => anyhow::anyhow!("no MCP client on stdin ({failed}). {NOT_A_CLIENT}"),
            Err(other) => other,
        })?;
    Ok(ExitCode::SUCCESS)
}

/// glibc gives each thread that allocates an arena of its own (up to eight per core), and an
/// arena seldom gives memory back: with `--sandbox thread` each sandbox's thread took one, and
/// a server's RSS grew from 424 to 586 MiB over bench row 5's 2,000 executions. With two arenas
/// it stayed at 306–338 MiB (four: 361–417), and forked sandboxes ran as fast. Set before any
/// thread exists; `MALLOC_ARENA_MAX` in the environment still decides.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: sets one of glibc's tunables, on the only thread.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
}

/// Kernel-level settings for the whole process, before any thread or child exists.
fn harden_process() {
    // SAFETY: prctl with these options only changes attributes of this process.
    unsafe {
        // Not dumpable: a same-user process (say, a downstream server) can no longer open
        // /proc/<our pid>/fd/1 and write into the MCP channel, nor ptrace us. Children are
        // unaffected (execve resets it).
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // A child subreaper: a server's descendant that escapes with setsid is reparented to
        // us, not init, so shutdown can still kill it (hub::server::kill_escapees).
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// Exit codes: 0 the script succeeded, 1 it raised (or was stopped), 2 usage or configuration error.
async fn run(args: RunArgs, given: LimitsGiven) -> anyhow::Result<ExitCode> {
    // A replay reads its cassette first: the script, seed and limits may come from it.
    let cassette = match &args.replay {
        Some(path) => Some(Cassette::load(path)?),
        None => None,
    };
    let (code, filename) = match (&args.script, cassette.as_ref().zip(args.replay.as_ref())) {
        (Some(script), _) => read_script(script)?,
        (None, Some((cassette, path))) => match &cassette.header.script {
            Some(script) => (script.code.clone(), script.filename.clone()),
            None => anyhow::bail!(
                "cassette {} holds no script: name the script to run against it",
                path.display()
            ),
        },
        (None, None) => unreachable!("clap requires a script unless --replay is given"),
    };
    let mut limits = args.limits.clone();
    let mut seed = args.seed;
    if let (Some(cassette), Some(path)) = (&cassette, &args.replay) {
        seed = seed.or(cassette.header.seed);
        if let Some(recorded) = cassette.header.limits {
            recorded_limits(&mut limits, recorded, given)
                .with_context(|| format!("cassette {}: \"limits\"", path.display()))?;
        }
    }
    let files = args
        .inputs
        .iter()
        .map(|input| read_input(input))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let input_bytes: usize = files.iter().map(|f| f.bytes.len()).sum();
    anyhow::ensure!(
        input_bytes <= mcp_code_mode::engine::files::MAX_JOB_FILES_BYTES,
        "--input: the files come to {input_bytes} bytes, more than the {} a script may be given",
        mcp_code_mode::engine::files::MAX_JOB_FILES_BYTES
    );
    if let Some(path) = &args.record {
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
        if folder.is_some_and(|f| !f.is_dir()) {
            anyhow::bail!(
                "cannot record to {}: there is no folder {}",
                path.display(),
                folder.unwrap_or(Path::new(".")).display()
            );
        }
    }

    let mut hub = None;
    let mut player = None;
    let local;
    let mut packages = args.packages.clone();
    let mut recorder = None;
    let tools: Arc<dyn ToolHost> = match (cassette, &args.replay) {
        (Some(cassette), Some(path)) => {
            let playing = Arc::new(Player::new(
                cassette,
                &replay::label(path),
                args.replay_match,
            ));
            player = Some(playing.clone());
            // A replay reads no config: its executor comes from the command line alone.
            local = args.executor.local(None).await?;
            playing
        }
        _ => {
            // The same lookup as `serve`; the servers start in the background, so a script that
            // calls no tools (or calls them later) does not wait for them.
            let servers = load_config(&args.config)?;
            // Checked before any server starts: a bad --python costs nothing.
            local = args.executor.local(servers.as_ref()).await?;
            packages = args.packages.or_config(servers.as_ref());
            let live: Arc<dyn ToolHost> = match servers.as_ref() {
                Some(servers) => {
                    let started = Hub::start(Some(servers));
                    hub = Some(started.clone());
                    started
                }
                None => Arc::new(NoTools),
            };
            match &args.record {
                Some(_) => {
                    let redactor = Redactor::for_config(servers.as_ref(), &args.redact);
                    let recording = Arc::new(Recorder::new(live, Arc::new(redactor)));
                    recorder = Some(recording.clone());
                    recording
                }
                None => live,
            }
        }
    };
    let script = recorder.is_some().then(|| replay::Script {
        filename: filename.clone(),
        code: code.clone(),
    });

    // Only a thread sandbox restores the snapshot in this process: the zygote inflates its own,
    // and the local executor restores none.
    let restore = (local.is_none() && args.sandbox.sandbox == SandboxKind::Thread)
        .then(|| snapshot(args.no_snapshot))
        .flatten();
    let sandboxes = sandboxes(
        args.sandbox,
        &limits,
        &packages,
        args.no_snapshot,
        None,
        local,
    )?;
    let mut config = SandboxConfig::new(limits.limits(), restore);
    config.seed = seed;
    config.tools = tools;
    if !args.json {
        config.live_output = Some(Box::new(|stream, bytes| {
            let _ = match stream {
                Stream::Stdout => std::io::stdout()
                    .write_all(bytes)
                    .and_then(|_| std::io::stdout().flush()),
                Stream::Stderr => std::io::stderr().write_all(bytes),
            };
        }));
    }
    let sandbox = sandboxes.take_for(config).await?;
    let outcome = sandbox
        .execute(Job {
            filename,
            files,
            ..Job::new(code)
        })
        .await;
    if args.json {
        println!("{}", serde_json::to_string(&outcome)?);
    } else {
        print_tail(&outcome);
    }
    let written = save_outputs(&outcome, args.output_dir.as_deref());
    let saved = match (&recorder, &args.record) {
        (Some(recorder), Some(path)) => recorder
            .cassette(replay::RunInfo {
                execution_id: replay::new_execution_id(),
                seed,
                script,
                limits: Some(replay::RecordedLimits::from(&limits.limits())),
            })
            .save(path),
        _ => Ok(()),
    };
    if let Some(player) = &player {
        let unused = player.unused();
        if !unused.is_empty() {
            const SHOWN: usize = 5;
            tracing::warn!(
                "replay: {} recorded call(s) were not made: {}{}",
                unused.len(),
                unused[..unused.len().min(SHOWN)].join("; "),
                if unused.len() > SHOWN { "; …" } else { "" }
            );
        }
    }
    // Explicitly, not on drop: the sandbox's thread may hold the hub past our exit, and then
    // nothing would stop the servers' escaped descendants.
    if let Some(hub) = &hub {
        hub.shutdown().await;
    }
    saved?;
    written?;
    Ok(ExitCode::from(outcome.exit_code.clamp(0, 255) as u8))
}

/// `--input [NAME=]FILE`: the file's bytes, named NAME or the file's own name.
fn read_input(input: &str) -> anyhow::Result<mcp_code_mode::engine::InputFile> {
    let (name, file) = match input.split_once('=') {
        Some((name, file)) => (name.to_owned(), PathBuf::from(file)),
        None => {
            let file = PathBuf::from(input);
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, file)
        }
    };
    mcp_code_mode::engine::files::check_relative_path(&name).map_err(|why| {
        anyhow::anyhow!(
            "--input {input}: {name:?} is not a usable name in the working directory: {why}"
        )
    })?;
    let bytes = std::fs::read(&file)
        .with_context(|| format!("--input {input}: cannot read '{}'", file.display()))?;
    Ok(mcp_code_mode::engine::InputFile { path: name, bytes })
}

/// Writes the files the script left under /output/ into `dir` (`--output-dir`); without one,
/// says on stderr which files were not saved.
fn save_outputs(outcome: &Outcome, dir: Option<&Path>) -> anyhow::Result<()> {
    for dropped in &outcome.outputs_dropped {
        eprintln!("mcp-code-mode: {dropped}");
    }
    let Some(dir) = dir else {
        if !outcome.outputs.is_empty() {
            let names: Vec<&str> = outcome.outputs.iter().map(|f| f.path.as_str()).collect();
            eprintln!(
                "mcp-code-mode: the script wrote {} under /output/, not saved: add --output-dir DIR to keep them",
                names.join(", ")
            );
        }
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--output-dir: cannot create '{}'", dir.display()))?;
    for file in &outcome.outputs {
        let target = output_path(dir, &file.path)?;
        if let Some(folder) = target.parent() {
            std::fs::create_dir_all(folder)
                .with_context(|| format!("--output-dir: cannot create '{}'", folder.display()))?;
        }
        std::fs::write(&target, &file.bytes)
            .with_context(|| format!("--output-dir: cannot write '{}'", target.display()))?;
    }
    Ok(())
}

/// Where /output/`name` goes under `dir`: refused when the name, or a symbolic link already
/// on its way, would take it out of `dir`.
fn output_path(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    mcp_code_mode::engine::files::check_relative_path(name).map_err(|why| {
        anyhow::anyhow!("/output/{name:?} not saved: it would leave --output-dir: {why}")
    })?;
    let mut path = dir.to_path_buf();
    for part in name.split('/') {
        path.push(part);
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            anyhow::bail!(
                "/output/{name} not saved: '{}' is a symbolic link, which could lead out of --output-dir",
                path.display()
            );
        }
    }
    Ok(path)
}

/// The script at `path` (`-`: standard input) and the name its tracebacks use.
fn read_script(path: &Path) -> anyhow::Result<(String, String)> {
    if path.as_os_str() == "-" {
        let mut code = String::new();
        std::io::stdin()
            .read_to_string(&mut code)
            .context("cannot read the script from standard input")?;
        return Ok((code, "<stdin>".to_owned()));
    }
    let code = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read script '{}'", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((code, name))
}

/// The limits a cassette was recorded with, as a replay applies them: each one not given on the
/// command line, checked as the flag would be.
fn recorded_limits(
    limits: &mut LimitArgs,
    recorded: replay::RecordedLimits,
    given: LimitsGiven,
) -> anyhow::Result<()> {
    if !given.timeout {
        limits.timeout = config::parse_timeout(&recorded.timeout_s.to_string())
            .map_err(|e| anyhow::anyhow!("timeout_s: {e}"))?;
    }
    if !given.memory_mb {
        if !MEMORY_MB.contains(&recorded.memory_mb) {
            anyhow::bail!(
                "memory_mb: {} is out of range ({} to {})",
                recorded.memory_mb,
                MEMORY_MB.start(),
                MEMORY_MB.end()
            );
        }
        limits.memory_mb = recorded.memory_mb;
    }
    if !given.max_output {
        limits.max_output = recorded.max_output;
    }
    Ok(())
}

/// After streaming: the truncation notices, the last expression's value (as JSON, on its own
/// line, unless it is None) and the error, as Python would print it.
fn print_tail(outcome: &Outcome) {
    for (text, is_stdout) in [(&outcome.stdout, true), (&outcome.stderr, false)] {
        if let Some(at) = text.rfind("\n[mcp-code-mode: ") {
            if is_stdout {
                print!("{}", &text[at..]);
            } else {
                eprint!("{}", &text[at..]);
            }
        }
    }
    if !outcome.result.is_null() {
        let open_line = !outcome.stdout.is_empty() && !outcome.stdout.ends_with('\n');
        println!("{}{}", if open_line { "\n" } else { "" }, outcome.result);
    }
    if let Some(error) = &outcome.error {
        if error.kind == "SystemExit" {
            // As Python does: `sys.exit(3)` prints nothing, `sys.exit("bye")` prints "bye".
            if error.message.parse::<i64>().is_err() {
                eprintln!("{}", error.message);
            }
        } else if error.traceback.is_empty() {
            eprintln!("{}: {}", error.kind, error.message);
        } else {
            eprint!("{}", error.traceback);
        }
    }
}
