//! The local executor (`--executor local`): scripts in a fresh host CPython process, not a
//! sandbox. The same checks a real MCP client runs against the sandbox (tests/mcp_client), and what
//! only a host process has: its packages, its processes (killed with the script), its interpreter.

use crate::util::{cli, cli_env, json, text};
use std::path::PathBuf;

fn check(name: &str, mode: &str, transport: &str) {
    crate::util::python_driver(
        "checks.py",
        &[
            name,
            "--mode",
            mode,
            "--transport",
            transport,
            "--executor",
            "local",
        ],
        &format!("ok: {name} ({mode}"),
    );
}

/// The real-client checks of tests/server.rs, with scripts in host Python.
mod checks {
    macro_rules! checks {
        ($mode:ident, $transport:literal: $($name:ident),* $(,)?) => {
            mod $mode { $( #[test] fn $name() { crate::local::check(stringify!($name), stringify!($mode), $transport); } )* }
        };
    }
    checks!(legacy, "stdio": local_notice, catalog, workflow, structured, dashed, errors, progress, cancel, concurrent, limits, list_changed, starting, record);
    checks!(auto, "stdio": local_notice, workflow, structured, errors);
    mod http {
        checks!(legacy, "http": local_notice, workflow, errors, cancel);
    }
}

/// `run --executor local --json` of `code` with these extra flags.
fn run(code: &str, flags: &[&str]) -> (serde_json::Value, std::process::Output) {
    let mut args = vec!["run", "--executor", "local", "--json"];
    args.extend_from_slice(flags);
    args.push("-");
    let out = cli(&args, code);
    (json(&out), out)
}

#[test]
fn outcome_has_the_sandbox_shape() {
    let code = "import sys\nprint('out')\nprint('err', file=sys.stderr)\n\nx = 1\ny = x / 0\n";
    let (report, out) = run(code, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(report["stdout"], "out\n");
    assert_eq!(report["stderr"], "err\n");
    let error = &report["error"];
    assert_eq!(error["type"], "ZeroDivisionError", "{report}");
    let traceback = error["traceback"].as_str().unwrap();
    assert!(
        traceback.contains("File \"<stdin>\", line 6") && !traceback.contains("<codemode>"),
        "the script's own line, none of ours: {traceback}"
    );
    for key in ["result", "duration_ms", "tool_calls"] {
        assert!(report.get(key).is_some(), "no {key}: {report}");
    }
    // Top-level await, the last expression as result, sys.exit's status.
    let (report, out) = run(
        "import asyncio\nawait asyncio.sleep(0.01)\n{'n': sum(range(10))}",
        &[],
    );
    assert!(out.status.success(), "{report}");
    assert_eq!(report["result"], serde_json::json!({"n": 45}));
    let (_, out) = run("import sys\nsys.exit(3)", &[]);
    assert_eq!(out.status.code(), Some(3));
    // A syntax error names the script's line.
    let (report, _) = run("x = 1\nif x\n", &[]);
    assert_eq!(report["error"]["type"], "SyntaxError", "{report}");
    assert!(report["error"]["traceback"]
        .as_str()
        .unwrap()
        .contains("line 2"));
}

#[test]
fn warns_at_start_up() {
    let (report, out) = run("print(1)", &[]);
    assert_eq!(report["stdout"], "1\n");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("WARNING") && stderr.contains("NOT sandboxed"),
        "{stderr}"
    );
}

#[test]
fn output_and_result_are_capped() {
    let (report, _) = run(
        "import sys\nprint('x' * 5000)\nsys.stderr.write('y' * 5000)\n'z' * 5000",
        &["--max-output", "1000"],
    );
    let stdout = report["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with(&"x".repeat(1000))
            && stdout.contains("stdout truncated: 4001 more bytes were dropped"),
        "{stdout}"
    );
    assert!(report["stderr"]
        .as_str()
        .unwrap()
        .contains("stderr truncated: 4000 more bytes"));
    assert!(report["result"]
        .as_str()
        .unwrap()
        .contains("result truncated: its JSON is 5002 bytes"));
}

/// Whether process `pid` is gone (or a zombie: dead, waiting to be reaped).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

fn wait_gone(pid: u32) -> bool {
    for _ in 0..100 {
        if gone(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn timeout_kills_the_script_and_the_processes_it_started() {
    let code = "import subprocess, sys\n\
                child = subprocess.Popen(['sleep', '300'])\n\
                print(child.pid, flush=True)\n\
                while True:\n    pass\n";
    let started = std::time::Instant::now();
    let (report, out) = run(code, &["--timeout", "2"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(report["error"]["type"], "TimeoutError", "{report}");
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than its 2 s limit"),
        "{report}"
    );
    assert!(took.as_secs_f64() < 10.0, "took {took:?}");
    let pid: u32 = report["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the child's pid: {report}"));
    assert!(
        wait_gone(pid),
        "the script's child {pid} survived its timeout"
    );
}

#[test]
fn processes_a_script_leaves_behind_end_with_it() {
    let (report, out) = run(
        "import subprocess\nsubprocess.Popen(['sleep', '300']).pid",
        &[],
    );
    assert!(out.status.success(), "{report}");
    let pid = report["result"].as_u64().expect("a pid") as u32;
    assert!(wait_gone(pid), "the script's child {pid} outlived it");
}

#[test]
fn the_script_and_its_processes_die_with_the_server() {
    use std::io::BufRead;
    let code = "import os, subprocess\n\
                child = subprocess.Popen(['sleep', '300'])\n\
                print(os.getpid(), child.pid, flush=True)\n\
                while True:\n    pass\n";
    let mut run = crate::util::command(crate::util::BIN)
        .args(["run", "--executor", "local", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut run.stdin.take().unwrap(), code.as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{line:?}");
    run.kill().unwrap(); // SIGKILL: nothing of ours runs after it
    run.wait().unwrap();
    for pid in pids {
        assert!(wait_gone(pid), "process {pid} outlived the server");
    }
}

#[test]
fn a_package_only_on_the_host_imports() {
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("hostonly_pkg");
    std::fs::create_dir(&package).unwrap();
    std::fs::write(package.join("__init__.py"), "VALUE = 'from the host'\n").unwrap();
    // `mcp` is installed in the host's site-packages (the tests' MCP client); Pyodide has neither.
    let code = "import hostonly_pkg, mcp\n(hostonly_pkg.VALUE, mcp.__name__)";
    let path = dir.path().to_str().unwrap();
    let out = cli_env(
        &["run", "--executor", "local", "--json", "-"],
        &[("PYTHONPATH", path)],
        code,
    );
    let report = json(&out);
    assert_eq!(
        report["result"],
        serde_json::json!(["from the host", "mcp"]),
        "{report}"
    );
    // The sandbox cannot: the test tells the two executors apart.
    let out = cli_env(&["run", "--json", "-"], &[("PYTHONPATH", path)], code);
    assert_eq!(json(&out)["error"]["type"], "ModuleNotFoundError");
    // A module the host lacks is the host's plain error: the sandbox's wheelhouse plays no part.
    let (report, _) = run("import no_such_module_here", &[]);
    assert_eq!(report["error"]["type"], "ModuleNotFoundError", "{report}");
    assert!(
        !report["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("wheelhouse"),
        "{report}"
    );
    let out = cli(
        &["run", "--executor", "local", "--wheels", "/tmp", "-"],
        "1",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--wheels applies only to the sandbox"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn seed_pins_random_and_the_hash_seed() {
    let code = "import random\n[random.random(), hash('abc')]";
    let a = run(code, &["--seed", "7"]).0["result"].clone();
    let b = run(code, &["--seed", "7"]).0["result"].clone();
    let c = run(code, &["--seed", "8"]).0["result"].clone();
    assert_eq!(a, b, "the same seed, the same values");
    assert_ne!(a[0], c[0], "another seed, another random stream");
    assert_ne!(a[1], c[1], "another seed, another hash seed");
}

#[test]
fn tool_calls_plain_awaited_and_capped() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    let everything = crate::util::fixture("server-everything/dist/index.js");
    std::fs::write(
        &config,
        serde_json::json!({"servers": {"everything": {"command": "node", "args": [everything, "stdio"]}}})
            .to_string(),
    )
    .unwrap();
    let code = "import asyncio\n\
                plain = tools.everything.get_sum(a=1, b=2)\n\
                awaited = await tools.everything.get_sum(a=2, b=2)\n\
                try:\n    tools.everything.get_sum(a=1, c=2)\nexcept TypeError as e:\n    typo = str(e)\n\
                results = await asyncio.gather(*(tools.everything.get_sum.aio(a=i, b=0) for i in range(1005)), return_exceptions=True)\n\
                failed = [r for r in results if isinstance(r, ToolError)]\n\
                [str(plain), str(awaited), typo, len(results) - len(failed), len(failed), failed[0].message if failed else None]";
    let (report, out) = run(
        code,
        &["--config", config.to_str().unwrap(), "--timeout", "120"],
    );
    assert!(out.status.success(), "{report}");
    let r = &report["result"];
    assert!(
        r[0].as_str().unwrap().contains('3') && r[1].as_str().unwrap().contains('4'),
        "{r}"
    );
    assert!(r[2]
        .as_str()
        .unwrap()
        .contains("unexpected keyword argument 'c'"));
    // Two calls before the gather (and, if the server was still starting, one wait for it) took
    // slots of the 1000: the rest of the gather is refused.
    let (done, refused) = (r[3].as_u64().unwrap(), r[4].as_u64().unwrap());
    assert!(done + refused == 1005 && (7..=8).contains(&refused), "{r}");
    assert!(
        r[5].as_str()
            .unwrap()
            .contains("already started 1000 tool calls"),
        "{r}"
    );
    assert_eq!(report["tool_calls"].as_array().unwrap().len(), 1007);
}

/// A real interpreter from pyenv, when this machine has that version.
fn pyenv(version: &str) -> Option<PathBuf> {
    let root = std::env::var("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".pyenv")
        });
    let versions = std::fs::read_dir(root.join("versions")).ok()?;
    versions
        .flatten()
        .map(|e| e.path().join("bin/python3"))
        .find(|p| {
            p.is_file()
                && p.parent()
                    .and_then(|b| b.parent())
                    .and_then(|v| v.file_name())
                    .is_some_and(|v| v.to_string_lossy().starts_with(version))
        })
}

#[test]
fn python_is_checked_and_the_oldest_supported_one_runs() {
    let local = |python: &str| {
        cli(
            &["run", "--executor", "local", "--python", python, "-"],
            "1",
        )
    };
    let out = local("/nonexistent/python3");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--python /nonexistent/python3: no such file"),
        "{}",
        text(&out.stderr)
    );
    let out = local("/bin/true");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--python /bin/true: is not a Python interpreter"),
        "{}",
        text(&out.stderr)
    );
    // The sandbox's own flags are refused, not ignored.
    let out = cli(
        &["run", "--executor", "local", "--sandbox", "thread", "-"],
        "1",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--sandbox applies only to the sandbox"),
        "{}",
        text(&out.stderr)
    );
    let out = cli(&["run", "--python", "python3", "-"], "1");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--python applies only to the local executor"));
    match pyenv("3.9.") {
        Some(old) => {
            let out = local(old.to_str().unwrap());
            assert_eq!(out.status.code(), Some(2));
            let stderr = text(&out.stderr);
            assert!(
                stderr.contains("is Python 3.9.") && stderr.contains("needs Python 3.10 or later"),
                "{stderr}"
            );
        }
        None => eprintln!("no Python 3.9 under ~/.pyenv: its refusal is not checked here"),
    }
    match pyenv("3.10.") {
        Some(oldest) => {
            // Plain and awaited calls rely on the bytecode of the call site (codemode.py).
            let (report, out) = run(
                "import sys\nasync def f():\n    return sys.version_info[:2]\nv = await f()\nlist(v)",
                &["--python", oldest.to_str().unwrap()],
            );
            assert!(out.status.success(), "{report} {}", text(&out.stderr));
            assert_eq!(report["result"], serde_json::json!([3, 10]));
        }
        None => eprintln!("no Python 3.10 under ~/.pyenv: the oldest supported is not run here"),
    }
}

#[test]
fn config_chooses_the_executor() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    std::fs::write(&config, r#"{"servers": {}, "executor": "local"}"#).unwrap();
    let out = cli(
        &["run", "--json", "--config", config.to_str().unwrap(), "-"],
        "import sys\nsys.platform",
    );
    assert_eq!(json(&out)["result"], "linux", "{}", text(&out.stderr));
    // --executor wins over the file.
    let out = cli(
        &[
            "run",
            "--json",
            "--executor",
            "sandbox",
            "--config",
            config.to_str().unwrap(),
            "-",
        ],
        "import sys\nsys.platform",
    );
    assert_eq!(json(&out)["result"], "emscripten");
    std::fs::write(&config, r#"{"servers": {}, "executor": "host"}"#).unwrap();
    let out = cli(&["run", "--config", config.to_str().unwrap(), "-"], "1");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(r#""executor" must be "sandbox" (the default) or "local""#),
        "{}",
        text(&out.stderr)
    );
}
