//! Helpers shared by the test modules.

#![allow(dead_code)]

use mcp_code_mode::engine::{Job, Limits, Outcome, Sandbox, SandboxConfig};
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-code-mode");

/// Runs `code` in a fresh sandbox with default limits.
pub async fn execute(code: &str) -> Outcome {
    execute_with(config(Limits::default()), code).await
}

/// A sandbox with `limits` restoring the embedded snapshot, as the server's are.
pub fn config(limits: Limits) -> SandboxConfig {
    SandboxConfig::new(limits, Some(mcp_code_mode::assets::snapshot()))
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

/// A command without the user's own `MCP_CODE_MODE_*` settings (a config path, a log filter):
/// every test sees the defaults, whoever runs it. Every process a test starts is made here.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MCP_CODE_MODE_") {
            command.env_remove(key);
        }
    }
    command
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
    spawn_cli(bin, cwd, args, &[], stdin)
        .wait_with_output()
        .expect("the binary ends")
}

/// [`cli`] with these environment variables set.
pub fn cli_env(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
    let cwd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    spawn_cli(BIN, cwd, args, env, stdin)
        .wait_with_output()
        .expect("the binary ends")
}

/// [`cli_in`] with these environment variables set.
pub fn cli_in_env(
    cwd: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
) -> Output {
    spawn_cli(BIN, cwd, args, env, stdin)
        .wait_with_output()
        .expect("the binary ends")
}

/// The CLI started with piped streams, `stdin` written to it and closed.
fn spawn_cli(
    bin: &str,
    cwd: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
) -> std::process::Child {
    let mut child = command(bin)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    child
}

/// [`cli`], and the peak RSS of the binary in KiB (its own, from `wait4`: not the test's, and
/// not its children's, which are reaped by it).
pub fn cli_peak(args: &[&str], stdin: &str) -> (Output, u64) {
    // Reaped by wait4 below, which std's `wait` cannot do with the usage figures.
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    #[allow(clippy::zombie_processes)]
    let mut child = spawn_cli(BIN, manifest, args, &[], stdin);
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes)
                .map(|_| bytes)
                .unwrap_or_default()
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let output = Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    (output, usage.ru_maxrss as u64)
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

/// Runs one of the real-client drivers in tests/mcp_client (`python3 SCRIPT BIN ARGS...`); panics
/// with its output unless it exits 0 with stdout starting with `ok` (the driver's own verdict).
pub fn python_driver(script: &str, args: &[&str], ok: &str) {
    let script = format!("{}/tests/mcp_client/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = command("python3")
        .arg(&script)
        .arg(BIN)
        .args(args)
        .output()
        .expect("python3 runs (pip install mcp==2.3.0)");
    assert!(
        out.status.success() && text(&out.stdout).starts_with(ok),
        "{script} {args:?} failed\n--- stdout\n{}\n--- stderr\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
