//! Helpers shared by the test modules.

#![allow(dead_code)]

use mcp_code_mode::engine::{Job, Limits, Outcome, Sandbox, SandboxConfig};
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-code-mode");

/// Runs `code` in a fresh sandbox with default limits.
pub async fn execute(code: &str) -> Outcome {
    execute_with(SandboxConfig::new(Limits::default()), code).await
}

pub async fn execute_with(config: SandboxConfig, code: &str) -> Outcome {
    let sandbox = Sandbox::new(config).await.expect("sandbox boots");
    sandbox.execute(Job::new(code)).await
}

pub fn limits(timeout_s: f64) -> Limits {
    Limits {
        timeout: Duration::from_secs_f64(timeout_s),
        ..Limits::default()
    }
}

/// Runs the CLI with `args`, feeding `stdin`, from `cwd` (default: this crate).
pub fn cli(args: &[&str], stdin: &str) -> Output {
    cli_in(
        BIN,
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        args,
        stdin,
    )
}

pub fn cli_in(bin: &str, cwd: &std::path::Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().expect("the binary ends")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&out.stdout)))
}

/// A real MCP server from tests/fixtures (installed from npm by `.ci/run`).
pub fn fixture(path: &str) -> String {
    format!(
        "{}/tests/fixtures/node_modules/@modelcontextprotocol/{path}",
        env!("CARGO_MANIFEST_DIR")
    )
}
