//! Downstream servers are untrusted: real misbehaving server processes (tests/hostile/, raw
//! JSON-RPC in Python) configured beside a well-behaved one, driven through `run` as a user would.

use crate::util::{cli, fixture, json};

/// The most our process may hold at its peak while hostile servers answer (`run`, default
/// --memory-mb): measured ~260 MiB with the 20 MB answer; a server's output is bounded, so a
/// regression (an unbounded copy of what it sends) shows as hundreds of MiB more.
const PEAK_MIB: u64 = 512;

/// A config with `hostile` (the given script and args) and a real filesystem server over `dir`.
fn config_with(dir: &std::path::Path, script: &str, args: &[&str]) -> String {
    let hostile = format!("{}/tests/hostile/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut argv = vec![hostile];
    argv.extend(args.iter().map(|a| a.to_string()));
    let servers = serde_json::json!({"servers": {
        "hostile": {"command": "python3", "args": argv, "timeout_s": 30},
        "fs": {"command": "node", "args": [fixture("server-filesystem/dist/index.js"), dir]}}});
    let config = dir.join("servers.json");
    std::fs::write(&config, servers.to_string()).unwrap();
    config.to_str().unwrap().to_owned()
}

/// Every way of answering a call that the transport cannot read fails that call at once with
/// the reason (it used to be dropped, leaving the call pending until its timeout_s), and the
/// well-behaved server beside it answers as usual.
#[test]
fn unreadable_responses_fail_their_call_at_once_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hi").unwrap();
    let config = config_with(dir.path(), "wire_server.py", &[]);
    let script = format!(
        "out = {{}}\n\
         for n in ['ok', 'huge', 'deep', 'badutf8', 'noresult', 'both', 'errnomsg', 'v1', 'nullid', 'storm']:\n\
         \x20   try:\n\
         \x20       out[n] = ['ok', getattr(tools.hostile, n)()]\n\
         \x20   except ToolError as e:\n\
         \x20       out[n] = ['ToolError', e.message]\n\
         out['fs'] = tools.fs.read_text_file(path={:?})['content']\n\
         out",
        dir.path().join("hello.txt")
    );
    let (out, peak_kib) =
        crate::util::cli_peak(&["run", "--json", "--config", &config, "-"], &script);
    let v = json(&out);
    assert_eq!(v["error"], serde_json::Value::Null, "{v}");
    assert!(
        peak_kib < PEAK_MIB * 1024,
        "peak RSS {} MiB (bound {PEAK_MIB})",
        peak_kib / 1024
    );
    let r = &v["result"];
    let expect = [
        (
            "huge",
            "its response was too large (20.0 MB; the limit is 16.7 MB)",
        ),
        ("deep", "its response is nested deeper than 100 levels"),
        ("badutf8", "its response is not valid UTF-8"),
        (
            "noresult",
            "not valid JSON-RPC: it has neither a result nor an error",
        ),
        (
            "both",
            "not valid JSON-RPC: it has both a result and an error",
        ),
        (
            "errnomsg",
            "not valid JSON-RPC: its error lacks an integer code or a message",
        ),
        ("v1", "not valid JSON-RPC: it lacks \"jsonrpc\": \"2.0\""),
        ("nullid", "it answered without a request id: lost track"),
    ];
    for (tool, reason) in expect {
        assert_eq!(r[tool][0], "ToolError", "{tool}: {}", r[tool]);
        let message = r[tool][1].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{tool}: {message}");
    }
    assert_eq!(r["ok"], serde_json::json!(["ok", "fine"]));
    // 2,000 list_changed notifications at once: coalesced, the server and we keep answering.
    assert_eq!(r["storm"], serde_json::json!(["ok", "stormed"]));
    assert_eq!(r["fs"], "hi");
    let calls = v["tool_calls"].as_array().unwrap();
    assert!(
        calls.iter().all(|c| c["ms"].as_f64().unwrap() < 10_000.0),
        "a call waited as for a timeout: {calls:?}"
    );
}

/// Tools with broken schemas are degraded or skipped one by one, never the whole list; endless
/// pagination stops at a cap.
#[test]
fn a_bad_tool_costs_only_itself_and_listing_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(dir.path(), "wire_server.py", &[]);
    let script = "h = tools.hostile\n\
        {'names': sorted(dir(h)), 'doc': h.schema_is_a_string.__doc__, 'deep': h.schema_too_deep.__doc__}";
    let out = cli(&["run", "--json", "--config", &config, "-"], script);
    let v = json(&out);
    let r = &v["result"];
    assert_eq!(
        r["names"],
        serde_json::json!([
            "badutf8",
            "both",
            "deep",
            "errnomsg",
            "huge",
            "noresult",
            "nullid",
            "ok",
            "schema_is_a_string",
            "schema_too_deep",
            "storm",
            "v1"
        ]),
        "{v}"
    );
    assert!(
        r["doc"]
            .as_str()
            .unwrap()
            .contains("its inputSchema is a string, not an object"),
        "{r}"
    );
    assert!(
        r["deep"]
            .as_str()
            .unwrap()
            .contains("nested deeper than 32 levels"),
        "{r}"
    );
    let stderr = crate::util::text(&out.stderr);
    assert!(
        stderr.contains("skipped 3 tool(s) that cannot be used"),
        "{stderr}"
    );

    let config = config_with(dir.path(), "wire_server.py", &["endless"]);
    let (out, peak_kib) = crate::util::cli_peak(
        &["run", "--json", "--config", &config, "-"],
        "len(dir(tools.hostile))",
    );
    assert_eq!(json(&out)["result"], 50);
    assert!(
        peak_kib < PEAK_MIB * 1024,
        "peak RSS {} MiB",
        peak_kib / 1024
    );
    assert!(crate::util::text(&out.stderr).contains("stopped listing tools after 50 pages"));
}

/// A server whose tool names collide once mapped to Python, whose descriptions carry terminal
/// escapes and a `"""`, and whose stderr floods without a newline: every tool stays reachable
/// under a stable name, no control character reaches the script, and a well-behaved server
/// beside it keeps working.
#[test]
fn hostile_tool_names_and_descriptions_are_made_safe() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hi").unwrap();
    let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile/names_server.py");
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"servers": {
        "hostile": {"command": "python3", "args": [hostile]},
        "fs": {"command": "node", "args": [fixture("server-filesystem/dist/index.js"), dir.path()]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let script = format!(
        "h = tools.hostile\n\
         names = sorted(dir(h))\n\
         called = {{n: getattr(h, n)() for n in names}}\n\
         doc = h.a_b_2.__doc__\n\
         {{'names': names, 'called': called, 'doc_clean': not any(ord(c) < 32 and c != '\\n' for c in doc),\n\
          'doc': doc, 'fs': tools.fs.read_text_file(path={:?})['content']}}",
        dir.path().join("hello.txt")
    );
    let out = cli(
        &["run", "--json", "--config", config.to_str().unwrap(), "-"],
        &script,
    );
    let v = json(&out);
    assert_eq!(v["error"], serde_json::Value::Null, "{v}");
    let r = &v["result"];
    assert_eq!(
        r["names"],
        serde_json::json!(["_", "__2", "a_b", "a_b_2", "get_sum", "get_sum_2"])
    );
    assert_eq!(
        r["called"],
        serde_json::json!({"_": "", "__2": "\n", "a_b": "a_b", "a_b_2": "a.b",
                           "get_sum": "get_sum", "get_sum_2": "get-sum"})
    );
    let doc = r["doc"].as_str().unwrap();
    assert_eq!(r["doc_clean"], true, "{doc:?}");
    assert!(
        doc.contains("MCP name: \"a.b\"") && doc.contains("RED plain"),
        "{doc:?}"
    );
    assert!(!doc.contains('\u{202e}'), "{doc:?}");
    assert_eq!(r["fs"], "hi");
}

/// A downstream server cannot write into our MCP channel through /proc/<our pid>/fd/1, and a
/// descendant it leaves in a session of its own does not outlive us.
#[test]
fn a_server_cannot_reach_our_stdout_or_outlive_us() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(dir.path(), 0o777);
    // As root, every process may open every /proc/<pid>/fd: run as an unprivileged user, the
    // same for us and the server, as in production (a copy of the binary it can read).
    let as_root = unsafe { libc::geteuid() } == 0;
    let bin = if as_root {
        let copy = dir.path().join("mcp-code-mode");
        std::fs::copy(crate::util::BIN, &copy).unwrap();
        open(&copy, 0o755);
        copy
    } else {
        std::path::PathBuf::from(crate::util::BIN)
    };
    let script = dir.path().join("escape_server.py");
    for file in ["escape_server.py", "jsonrpc.py"] {
        let copy = dir.path().join(file);
        let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile");
        std::fs::copy(format!("{hostile}/{file}"), &copy).unwrap();
        open(&copy, 0o644);
    }
    let config = dir.path().join("servers.json");
    let servers = serde_json::json!({"servers": {"escape": {"command": "python3", "args": [&script, dir.path()]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    open(&config, 0o644);
    // Our stdout must be a pipe the server's user owns, as an MCP client's pipe is: `| cat`
    // makes one on that side (a pipe made by root could not be opened by `nobody` anyway).
    let mut command = crate::util::command(if as_root { "setpriv" } else { "sh" });
    if as_root {
        command.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
        ]);
    }
    command
        .args(["-c", "\"$0\" \"$@\" | cat"])
        .arg(&bin)
        .args(["run", "--json", "--config", config.to_str().unwrap(), "-"])
        .current_dir(dir.path())
        .env("HOME", dir.path());
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux) runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"tools.escape.ok()")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = crate::util::text(&out.stdout);
    let stderr = crate::util::text(&out.stderr);
    let forge = std::fs::read_to_string(dir.path().join("forge.txt")).unwrap_or_default();
    assert!(
        forge.starts_with("refused"),
        "the server reached our stdout: {forge:?}\n{stdout}"
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim_end())
        .unwrap_or_else(|e| panic!("stdout is not our one JSON object ({e}): {stdout}\n{stderr}"));
    assert_eq!(report["result"], "fine", "{report}");
    let escapee: i32 = std::fs::read_to_string(dir.path().join("escapee.pid"))
        .expect("the server left a descendant")
        .trim()
        .parse()
        .unwrap();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{escapee}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(") ")
                .is_some_and(|(_, s)| s.starts_with('Z'))
        })
    };
    for _ in 0..30 {
        if !alive() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    unsafe { libc::kill(escapee, libc::SIGKILL) };
    let status = std::fs::read_to_string(format!("/proc/{escapee}/status")).unwrap_or_default();
    panic!("the server's setsid descendant {escapee} outlived us\n{stderr}\n{status}");
}
