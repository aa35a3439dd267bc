//! cli — the `mcp-code-mode` command: parses flags, sets up logging (stderr only: stdout is the
//! MCP channel), and hands off to the engine or the server.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use mcp_code_mode::bridge::Stream;
use mcp_code_mode::engine::{Job, Limits, Outcome, Sandbox, SandboxConfig};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "mcp-code-mode",
    version,
    about = "Run Python (Pyodide in a V8 sandbox) that calls MCP tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Python script in a fresh sandbox and print what it prints.
    Run(RunArgs),
}

#[derive(Args, Clone)]
struct LimitArgs {
    /// Seconds a script may run before it is stopped.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS", value_parser = parse_timeout)]
    timeout: f64,
    /// MiB of memory a sandbox may use (Pyodide's heap; V8's JS heap is capped separately at the same size).
    #[arg(long = "memory-mb", default_value_t = 512, value_name = "MIB", value_parser = clap::value_parser!(u64).range(64..=16384))]
    memory_mb: u64,
    /// Bytes of stdout, and of stderr, kept; the rest is dropped with a notice saying how much.
    #[arg(long = "max-output", default_value_t = 1 << 20, value_name = "BYTES")]
    max_output: usize,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_secs_f64(self.timeout),
            memory_mb: self.memory_mb,
            max_output: self.max_output,
        }
    }
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if v.is_finite() && v > 0.0 && v <= 86400.0 {
        Ok(v)
    } else {
        Err(format!(
            "'{s}' is out of range: use more than 0 and at most 86400 seconds"
        ))
    }
}

#[derive(Args)]
struct RunArgs {
    /// The script to run, or - for standard input.
    script: PathBuf,
    /// Print one JSON object {stdout, stderr, result, error, duration_ms, tool_calls} instead of the output.
    #[arg(long)]
    json: bool,
    /// Derive all randomness from N (random, uuid4, os.urandom, hash seed) for identical runs.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    #[command(flatten)]
    limits: LimitArgs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MCP_CODE_MODE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run(args).await,
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

/// Exit codes: 0 the script succeeded, 1 it raised (or was stopped), 2 usage or configuration error.
async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (code, filename) = if args.script.as_os_str() == "-" {
        let mut code = String::new();
        std::io::stdin()
            .read_to_string(&mut code)
            .context("cannot read the script from standard input")?;
        (code, "<stdin>".to_owned())
    } else {
        let code = std::fs::read_to_string(&args.script)
            .with_context(|| format!("cannot read script '{}'", args.script.display()))?;
        let name = args
            .script
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        (code, name)
    };
    let mut config = SandboxConfig::new(args.limits.limits());
    config.seed = args.seed;
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
    let sandbox = Sandbox::new(config).await?;
    let outcome = sandbox
        .execute(Job {
            code,
            filename,
            timeout: None,
        })
        .await;
    if args.json {
        println!("{}", serde_json::to_string(&outcome)?);
    } else {
        print_tail(&outcome);
    }
    Ok(ExitCode::from(outcome.exit_code.clamp(0, 255) as u8))
}

/// After streaming: the truncation notices and the error, as Python would print them.
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
    if let Some(error) = &outcome.error {
        if error.traceback.is_empty() {
            eprintln!("{}: {}", error.kind, error.message);
        } else {
            eprint!("{}", error.traceback);
        }
    }
}
