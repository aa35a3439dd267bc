//! The `mcp-code-mode run` command as a user runs it: streams, --json, exit codes, stdin.

use crate::util::{cli, cli_in, fixture, json, text, BIN};
use std::process::Stdio;

#[test]
fn run_prints_the_scripts_output_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hello.py");
    std::fs::write(
        &script,
        "import sys\nprint('hi there')\nprint('oops', file=sys.stderr)\n",
    )
    .unwrap();
    let out = cli(&["run", script.to_str().unwrap()], "");
    assert_eq!(text(&out.stdout), "hi there\n");
    assert_eq!(text(&out.stderr), "oops\n");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn run_json_prints_one_object_and_exit_code_1_on_a_python_error() {
    let out = cli(&["run", "--json", "-"], "print('a')\nx = 1\nx / 0\n");
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["stdout"], "a\n");
    assert_eq!(v["result"], serde_json::Value::Null);
    assert_eq!(v["error"]["type"], "ZeroDivisionError");
    assert!(v["error"]["traceback"]
        .as_str()
        .unwrap()
        .contains("File \"<stdin>\", line 3"));
    assert!(v["duration_ms"].as_f64().unwrap() > 0.0);
    let ok = json(&cli(&["run", "--json", "-"], "21 * 2"));
    assert_eq!(ok["result"], 42);
    assert_eq!(ok["error"], serde_json::Value::Null);
}

#[test]
fn a_python_error_prints_its_traceback_on_stderr() {
    let out = cli(
        &["run", "-"],
        "def f():\n    raise ValueError('bad value')\nf()\n",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("Traceback (most recent call last):\n"),
        "{err}"
    );
    assert!(err.ends_with("ValueError: bad value\n"), "{err}");
}

/// `--version` names the Pyodide release inside (`cargo xtask bench` reads it to match its peer).
#[test]
fn the_version_names_the_pyodide_release() {
    let out = cli(&["--version"], "");
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!(
            "mcp-code-mode {} (Pyodide {})",
            env!("CARGO_PKG_VERSION"),
            mcp_code_mode::assets::PYODIDE_VERSION
        )
    );
}

#[test]
fn usage_and_input_errors_exit_2_and_say_what_is_wrong() {
    let out = cli(&["run", "/no/such/script.py"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot read script '/no/such/script.py'"),
        "{}",
        text(&out.stderr)
    );
    let out = cli(&["run", "--timeout", "soon", "-"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("'soon' is not a number of seconds"));
    let out = cli(&["run", "--memory-mb", "1", "-"], "");
    assert_eq!(out.status.code(), Some(2));
    let out = cli(&["frobnicate"], "");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_binary_is_self_contained() {
    // A copy in an empty folder, run from another empty folder: no assets beside it, no network.
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = home.path().join("mcp-code-mode");
    std::fs::copy(BIN, &copy).unwrap();
    let out = cli_in(
        copy.to_str().unwrap(),
        elsewhere.path(),
        &["run", "-"],
        "import sys; print(sys.version_info[:2])",
    );
    assert_eq!(text(&out.stdout), "(3, 14)\n", "{}", text(&out.stderr));
}

#[test]
fn seeded_runs_give_identical_bytes() {
    let script = "import random, uuid\nprint(random.randint(0, 10**9), uuid.uuid4())";
    let a = cli(&["run", "--seed", "7", "-"], script);
    let b = cli(&["run", "--seed", "7", "-"], script);
    assert_eq!(a.stdout, b.stdout);
    assert!(!a.stdout.is_empty());
}

#[test]
fn a_bad_config_exits_2_naming_the_file_the_server_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {"files": {"command": "node", "args": 7}}}"#,
    )
    .unwrap();
    let out = cli(&["serve", "--config", config.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("servers.json") && err.contains("\"files\"") && err.contains("\"args\""),
        "{err}"
    );
    let out = cli(
        &[
            "run",
            "--config",
            dir.path().join("missing.json").to_str().unwrap(),
            "-",
        ],
        "1",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("missing.json"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn serving_without_a_config_says_so_and_serves_plain_python() {
    let dir = tempfile::tempdir().unwrap();
    // stdin closes at once: the server starts, says what it serves, and ends cleanly.
    let out = cli_in(BIN, dir.path(), &[], "");
    assert!(
        text(&out.stderr).contains("no configuration"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "nothing but MCP may reach stdout: {}",
        text(&out.stdout)
    );
}

#[test]
fn run_with_a_config_calls_real_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hi from disk").unwrap();
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"servers": {"fs": {"command": "node",
        "args": [fixture("server-filesystem/dist/index.js"), dir.path()]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let script = format!(
        "tools.fs.read_text_file(path={:?})['content']",
        dir.path().join("hello.txt")
    );
    let out = cli(
        &["run", "--json", "--config", config.to_str().unwrap(), "-"],
        &script,
    );
    assert_eq!(
        json(&out)["result"],
        "hi from disk",
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn debug_drives_the_server_end_to_end_and_prints_a_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a.txt"), "one\ntwo\n").unwrap();
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"servers": {"filesystem": {"command": "node",
        "args": [fixture("server-filesystem/dist/index.js"), data]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let out = cli(&["debug", "--config", config.to_str().unwrap()], "");
    let transcript = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{transcript}\n{}",
        text(&out.stderr)
    );
    assert!(transcript.contains("» tools/list: 6 tools"), "{transcript}");
    assert!(
        transcript.contains("tool call: filesystem.read_text_file"),
        "{transcript}"
    );
    assert!(
        transcript.contains("\"chars_read\":{\"a.txt\":8}"),
        "{transcript}"
    );
    assert!(
        transcript.contains("✓ the server works end to end"),
        "{transcript}"
    );
}

#[test]
fn debug_names_a_configured_server_that_is_not_running_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"servers": {
        "filesystem": {"command": "nodejs-nope-not-installed"},
        "memory": {"command": "node", "args": [fixture("server-memory/dist/index.js")],
                   "env": {"MEMORY_FILE_PATH": dir.path().join("m.jsonl")}}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let out = cli(&["debug", "--config", config.to_str().unwrap()], "");
    let transcript = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{transcript}");
    assert!(
        transcript.contains("» configured servers that are not running\n  - filesystem: "),
        "{transcript}"
    );
    assert!(
        transcript.contains("✗ 1 configured server(s) not running"),
        "{transcript}"
    );
    assert!(
        !transcript.contains("no filesystem server configured"),
        "{transcript}"
    );
}

/// A configured server that is down is still `tools.<name>`: calls raise ToolError saying why.
#[test]
fn a_server_that_is_down_or_disabled_raises_tool_error_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"servers": {
        "filesystem": {"command": "nodejs-nope-not-installed"},
        "memory": {"command": "node", "disabled": true}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let script = r#"out = []
for call in (lambda: tools.filesystem.read_text_file(path='/x'), lambda: tools.memory.read_graph()):
    try:
        call()
    except ToolError as e:
        out.append([e.server, e.tool, e.message, e.kind])
out"#;
    let out = cli(
        &["run", "--json", "--config", config.to_str().unwrap(), "-"],
        script,
    );
    let result = json(&out)["result"].clone();
    assert_eq!(result[0][0], "filesystem", "{result}");
    assert_eq!(result[0][1], "read_text_file", "{result}");
    assert_eq!(result[0][3], "unavailable", "{result}");
    assert_eq!(result[1][3], "unavailable", "{result}");
    let why = result[0][2].as_str().unwrap_or_default();
    assert!(
        why.contains("not running") && why.contains("'nodejs-nope-not-installed' was not found"),
        "{why}"
    );
    let why = result[1][2].as_str().unwrap_or_default();
    assert!(
        why.contains("is disabled") && why.contains("servers.json"),
        "{why}"
    );
    assert!(
        !why.contains(dir.path().to_str().unwrap()),
        "no host path: {why}"
    );
}

#[test]
fn sys_exit_sets_the_exit_code_as_python_does() {
    let out = cli(&["run", "-"], "print('bye')\nimport sys\nsys.exit(3)");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        (text(&out.stdout), text(&out.stderr)),
        ("bye\n".into(), String::new())
    );
    let out = cli(&["run", "-"], "import sys\nsys.exit('fatal: no input')");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "fatal: no input\n");
    assert_eq!(
        cli(&["run", "-"], "import sys\nsys.exit(0)").status.code(),
        Some(0)
    );
}

#[test]
fn an_invalid_log_filter_is_named_not_ignored() {
    let out = crate::util::command(BIN)
        .args(["run", "-"])
        .env("MCP_CODE_MODE_LOG", "info,[[[")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(b"print(1)")?;
            child.wait_with_output()
        })
        .expect("the binary runs");
    assert_eq!(text(&out.stdout), "1\n");
    assert!(
        text(&out.stderr).contains("MCP_CODE_MODE_LOG=\"info,[[[\" is not a log filter"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_prints_the_last_expressions_value_unless_it_is_none() {
    let out = cli(
        &["run", "-"],
        "print('hi', end='')\n{'sum': sum(range(10))}\n",
    );
    assert_eq!(
        text(&out.stdout),
        "hi\n{\"sum\":45}\n",
        "{}",
        text(&out.stderr)
    );
    let out = cli(&["run", "-"], "print('hi')\n[].append(1)\n");
    assert_eq!(text(&out.stdout), "hi\n");
}

/// `run` finds its servers as `serve` does: --config, else $MCP_CODE_MODE_CONFIG, else
/// config/mcp_servers.json in the working directory.
#[test]
fn run_finds_the_config_as_serve_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("config")).unwrap();
    let servers = serde_json::json!({"servers": {"fs": {"command": "node",
        "args": [fixture("server-filesystem/dist/index.js"), dir.path()]}}});
    let by_default = dir.path().join("config/mcp_servers.json");
    std::fs::write(&by_default, servers.to_string()).unwrap();
    let script = "sorted(n for n in dir(tools))";
    let found = |cwd: &std::path::Path, env: Option<&std::path::Path>| {
        let mut command = crate::util::command(BIN);
        command.args(["run", "--json", "-"]).current_dir(cwd);
        command.env_remove("MCP_CODE_MODE_CONFIG");
        if let Some(path) = env {
            command.env("MCP_CODE_MODE_CONFIG", path);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        json(&child.wait_with_output().unwrap())["result"].clone()
    };
    assert_eq!(found(dir.path(), None), serde_json::json!(["fs"]));
    let elsewhere = tempfile::tempdir().unwrap();
    assert_eq!(found(elsewhere.path(), None), serde_json::json!([]));
    assert_eq!(
        found(elsewhere.path(), Some(&by_default)),
        serde_json::json!(["fs"])
    );
}

/// A server that never answers (`node` with no script waits on stdin: the `"arg"` typo) does not
/// delay a run: the servers start in the background, and only a call to that server waits, for
/// its timeout_s, then raises ToolError saying it is still starting.
#[test]
fn a_hung_server_does_not_delay_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"servers": {"hung": {"command": "node", "timeout_s": 2}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let config = config.to_str().unwrap();
    let timed = |args: &[&str], script: &str| {
        let started = std::time::Instant::now();
        let out = cli(args, script);
        (started.elapsed().as_secs_f64(), out)
    };
    let (healthy, _) = timed(&["run", "-"], "print(1)");
    let (hung, out) = timed(&["run", "--config", config, "-"], "print(1)");
    assert_eq!(text(&out.stdout), "1\n", "{}", text(&out.stderr));
    // Before the fix this took the 30 s init timeout; the margin absorbs a loaded machine.
    assert!(
        hung < healthy + 3.0,
        "print(1) took {hung:.1} s with a hung server configured, {healthy:.1} s without"
    );
    let out = cli(
        &["run", "--json", "--config", config, "-"],
        "message = None\ntry:\n    tools.hung.anything()\nexcept ToolError as e:\n    message = str(e)\nmessage",
    );
    let message = json(&out)["result"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains("MCP server 'hung' is still starting after 2 s"),
        "{message}"
    );
}

#[test]
fn a_huge_result_is_capped_like_the_output() {
    let out = cli(
        &["run", "--json", "--max-output", "1000", "-"],
        "list(range(100_000))",
    );
    let result = json(&out)["result"].as_str().unwrap_or_default().to_owned();
    assert!(
        result.starts_with("[0, 1, 2") || result.starts_with("[0,1,2"),
        "{result:.100}"
    );
    assert!(
        result.len() < 1300
            && result.contains("[mcp-code-mode: result truncated: its JSON is 588891 bytes"),
        "{result}"
    );
}

/// The smaller first-hour stumbles: each error says what is wrong, once, and what to do.
#[test]
fn first_hour_errors_say_what_is_wrong_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let missing = missing.to_str().unwrap();
    for args in [
        vec!["run", "--config", missing, "-"],
        vec!["debug", "--config", missing],
    ] {
        let out = cli(&args, "print(1)");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot read config file"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            stderr.matches("No such file or directory").count(),
            1,
            "{args:?}: {stderr}"
        );
    }
    // Something that is not an MCP client on stdin: say what `serve` is.
    let out = cli_in(BIN, dir.path(), &["serve"], "hello?\n");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no MCP client on stdin") && stderr.contains("mcp-code-mode run script.py"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty() || text(&out.stdout).starts_with('{'));
    // A host path: the error says where host files are.
    let out = cli(&["run", "-"], "open('/etc/hostname')");
    assert!(
        text(&out.stderr).contains("not the host's: reach host files through"),
        "{}",
        text(&out.stderr)
    );
    let out = cli(&["run", "-"], "open('data.csv')");
    assert!(
        !text(&out.stderr).contains("host files"),
        "{}",
        text(&out.stderr)
    );
}

/// The binary embeds each large blob once: the compressed snapshot, and Pyodide's wasm (a
/// `const` would be copied in at every use; four 30 MB snapshot copies once were).
#[test]
fn the_binary_holds_one_copy_of_each_embedded_blob() {
    let binary = std::fs::read(crate::util::BIN).unwrap();
    let embedded = |name| mcp_code_mode::assets::pyodide_file_embedded(name).unwrap();
    let snapshot = mcp_code_mode::assets::snapshot_packed();
    for (what, blob) in [
        ("snapshot", snapshot),
        ("pyodide.asm.wasm", embedded("pyodide.asm.wasm")),
        ("python_stdlib.zip", embedded("python_stdlib.zip")),
    ] {
        // A window from the middle: its start may be shared with other data.
        let needle = &blob[blob.len() / 2..blob.len() / 2 + 64];
        let copies = memchr::memmem::find_iter(&binary, needle).count();
        assert_eq!(copies, 1, "the binary holds {copies} copies of the {what}");
    }
}
