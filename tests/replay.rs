//! Record and replay (`run --record/--replay`, `serve --record-dir`, `parity --record/--replay`):
//! recorded against the real servers of tests/fixtures, replayed with none of them there (no
//! config, the servers' data deleted, an empty PATH), byte for byte; every divergence named;
//! secrets kept out of cassettes.

#[cfg(feature = "parity")]
use crate::parity::{parity, row, tool_call_counts};
use crate::util::{cli, cli_env, cli_in_env, fixture, json, text};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

/// An environment variable the config expands into a server's `env`: a secret.
const TOKEN_VAR: &str = "REPLAY_TEST_TOKEN";
const TOKEN: &str = "tok-5f3a9c1e-do-not-record";
/// A server `env` value written in the config itself: a secret too.
const PLAIN_SECRET: &str = "plain-secret-value-77";

/// A folder with data files and a config naming the real filesystem, memory and everything
/// servers (filesystem under `fs`, so names in messages are the config's, not the package's).
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("a.txt"), "alpha one\nalpha two\n").unwrap();
        std::fs::write(data.join("b.txt"), "beta\n").unwrap();
        let servers = serde_json::json!({"servers": {
            "fs": {"command": "node", "args": [fixture("server-filesystem/dist/index.js"), data]},
            "memory": {"command": "node", "args": [fixture("server-memory/dist/index.js")],
                       "env": {"MEMORY_FILE_PATH": dir.path().join("memory.jsonl")}},
            "everything": {"command": "node",
                           "args": [fixture("server-everything/dist/index.js"), "stdio"],
                           "env": {"API_TOKEN": format!("${{{TOKEN_VAR}}}"),
                                   "PLAIN_SECRET": PLAIN_SECRET}},
        }});
        std::fs::write(dir.path().join("servers.json"), servers.to_string()).unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn data(&self, name: &str) -> String {
        self.path("data").join(name).to_string_lossy().into_owned()
    }

    fn script(&self, name: &str, code: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, code).unwrap();
        path.to_string_lossy().into_owned()
    }

    /// `run --config servers.json --record CASSETTE` plus `args`, with the secret variable set.
    fn record(&self, cassette: &str, args: &[&str]) -> Output {
        let config = self.path("servers.json");
        let cassette = self.path(cassette);
        let mut all = vec![
            "run",
            "--config",
            config.to_str().unwrap(),
            "--record",
            cassette.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let out = cli_env(&all, &[(TOKEN_VAR, TOKEN)], "");
        assert!(
            cassette.is_file(),
            "no cassette was written:\n{}",
            text(&out.stderr)
        );
        out
    }

    /// Removes everything the servers could have read, so a replay can only use the cassette.
    fn remove_server_data(&self) {
        std::fs::remove_dir_all(self.path("data")).unwrap();
        let _ = std::fs::remove_file(self.path("memory.jsonl"));
    }

    /// `run --replay CASSETTE` plus `args`, from an empty folder (no config/mcp_servers.json to
    /// find) with an empty PATH (no `node` to start).
    fn replay(&self, cassette: &str, args: &[&str]) -> Output {
        let cassette = self.path(cassette);
        let mut all = vec!["run", "--replay", cassette.to_str().unwrap()];
        all.extend_from_slice(args);
        cli_in_env(&self.path("empty"), &all, &[("PATH", "")], "")
    }
}

/// The script of the byte-for-byte test: every server, concurrent calls with seeded random
/// arguments, a tool error handled, output on both streams, a result.
const WORKOUT: &str = r#"import asyncio, random, sys
fs, mem, ev = tools.fs, tools.memory, tools.everything
root = fs.list_allowed_directories()["content"].splitlines()[1]
names = sorted(line.split("] ", 1)[1] for line in fs.list_directory(path=root)["content"].splitlines())
for name in names:
    print(name, fs.read_text_file(path=f"{root}/{name}")["content"].split())
sums = await asyncio.gather(*(ev.get_sum.aio(a=i, b=random.randint(0, 99)) for i in range(5)))
print(sums)
mem.create_entities(entities=[{"name": "replay", "entityType": "test", "observations": [str(random.random())]}])
print(mem.read_graph())
print("to stderr", random.random(), file=sys.stderr)
try:
    fs.read_text_file(path=f"{root}/missing.txt")
except ToolError as e:
    print("ToolError:", e.tool, e.message.replace(root, "<root>")[:70])
{"files": names, "sums": len(sums)}
"#;

/// What `--json` prints, without what is timed (the run's and each call's milliseconds).
fn untimed(out: &Output) -> Value {
    let mut v = json(out);
    v["duration_ms"] = Value::Null;
    for call in v["tool_calls"].as_array_mut().unwrap() {
        call["ms"] = Value::Null;
    }
    v
}

#[test]
fn a_recorded_run_replays_byte_for_byte_with_no_server_at_all() {
    let s = Setup::new();
    let script = s.script("workout.py", WORKOUT);
    let live = s.record("workout.jsonl", &["--seed", "5", &script]);
    let stdout = text(&live.stdout);
    assert_eq!(live.status.code(), Some(0), "{}", text(&live.stderr));
    assert!(
        stdout.contains("a.txt ['alpha', 'one', 'alpha', 'two']"),
        "{stdout}"
    );
    assert!(stdout.contains("'entityType': 'test'"), "{stdout}");
    assert!(stdout.contains("ToolError: read_text_file "), "{stdout}");
    s.remove_server_data();

    // The seed comes from the cassette; the script from the command line or the cassette.
    for args in [&[script.as_str()][..], &[], &["--sandbox", "thread"]] {
        let replayed = s.replay("workout.jsonl", args);
        assert_eq!(
            (text(&replayed.stdout), text(&replayed.stderr)),
            (stdout.clone(), text(&live.stderr)),
            "replayed with {args:?}"
        );
        assert_eq!(replayed.status.code(), Some(0));
    }

    let first = s.replay("workout.jsonl", &["--json"]);
    let second = s.replay("workout.jsonl", &["--json"]);
    assert_eq!(untimed(&first), untimed(&second));
    assert_eq!(
        json(&first)["stdout"],
        stdout.split("{\"files\"").next().unwrap()
    );
    assert_eq!(json(&first)["tool_calls"].as_array().unwrap().len(), 12);
    // Another seed gives other random arguments: the first of them is not in the cassette.
    let reseeded = s.replay("workout.jsonl", &["--json", "--seed", "6"]);
    assert_eq!(
        json(&reseeded)["error"]["type"],
        "ToolError",
        "{}",
        text(&reseeded.stdout)
    );
}

#[test]
fn a_replay_keeps_the_recorded_seed_and_limits_unless_given_others() {
    let s = Setup::new();
    let code = "import random\nprint(random.random())\nprint('x' * 3000)\n";
    let script = s.script("limits.py", code);
    let cassette = s.path("limits.jsonl");
    // Without servers: the cassette holds no call, only the script, seed and limits.
    let live = cli_in_env(
        &s.path("empty"),
        &[
            "run",
            "--seed",
            "3",
            "--max-output",
            "1000",
            "--record",
            cassette.to_str().unwrap(),
            &script,
        ],
        &[],
        "",
    );
    let stdout = text(&live.stdout);
    assert!(stdout.contains("bytes were dropped"), "{stdout}");
    assert_eq!(text(&s.replay("limits.jsonl", &[]).stdout), stdout);
    let wider = s.replay("limits.jsonl", &["--max-output", "5000", "--seed", "4"]);
    let wider = text(&wider.stdout);
    assert!(!wider.contains("bytes were dropped"), "{wider}");
    assert_ne!(wider.lines().next(), stdout.lines().next(), "another seed");
}

/// The script the divergence tests record: two reads, then a sum.
fn sequence(s: &Setup) -> String {
    format!(
        "print(tools.fs.read_text_file(path={a:?})['content'])\n\
         print(tools.fs.read_text_file(path={b:?})['content'])\n\
         print(tools.everything.get_sum(a=1, b=2))\n",
        a = s.data("a.txt"),
        b = s.data("b.txt")
    )
}

/// Replays `code` against `cassette` with `--json` (and `args`); the error's type and message.
fn diverge(s: &Setup, cassette: &str, code: &str, args: &[&str]) -> (String, String, Output) {
    let script = s.script("variant.py", code);
    let mut all = vec!["--json", script.as_str()];
    all.extend_from_slice(args);
    let out = s.replay(cassette, &all);
    let v = json(&out);
    let field = |key: &str| v["error"][key].as_str().unwrap_or_default().to_owned();
    (field("type"), field("message"), out)
}

#[test]
fn each_divergence_raises_a_tool_error_naming_it_and_the_nearest_recorded_call() {
    let s = Setup::new();
    let recorded = sequence(&s);
    let live = s.record("seq.jsonl", &[&s.script("seq.py", &recorded)]);
    assert_eq!(live.status.code(), Some(0), "{}", text(&live.stderr));
    s.remove_server_data();
    let (a, b, c) = (s.data("a.txt"), s.data("b.txt"), s.data("c.txt"));

    // Other arguments.
    let (kind, message, out) = diverge(&s, "seq.jsonl", &recorded.replace(&a, &c), &[]);
    assert_eq!(kind, "ToolError");
    assert_eq!(
        message,
        format!(
            "fs.read_text_file: replay: fs.read_text_file(path={c:?}) is not in seq.jsonl: argument 'path': recorded {a:?}, called with {c:?}; nearest recorded call: #1 fs.read_text_file(path={a:?})"
        )
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("replay: 3 recorded call(s) were not made: #1 fs.read_text_file"),
        "{}",
        text(&out.stderr)
    );

    // Another order: refused strictly, accepted with --replay-match any.
    let swapped = recorded.replace(&a, "@A").replace(&b, &a).replace("@A", &b);
    let (kind, message, _) = diverge(&s, "seq.jsonl", &swapped, &[]);
    assert_eq!(kind, "ToolError");
    assert!(
        message.starts_with(&format!(
            "fs.read_text_file: replay: fs.read_text_file(path={b:?}) came in another order than recorded in seq.jsonl: it is recorded call #2, made after #1 fs.read_text_file(path={a:?}), which this run has not made"
        )),
        "{message}"
    );
    let (kind, _, out) = diverge(&s, "seq.jsonl", &swapped, &["--replay-match", "any"]);
    assert_eq!(kind, "", "{}", text(&out.stdout));
    assert_eq!(
        json(&out)["stdout"],
        "beta\n\nalpha one\nalpha two\n\nThe sum of 1 and 2 is 3.\n"
    );

    // One call more than recorded.
    let more = format!("{recorded}print(tools.everything.get_sum(a=1, b=2))\n");
    let (kind, message, _) = diverge(&s, "seq.jsonl", &more, &[]);
    assert_eq!(kind, "ToolError");
    assert_eq!(
        message,
        "everything.get-sum: replay: everything.get-sum(a=1, b=2) is one call more than recorded: seq.jsonl holds 3 call(s), all made already; the last recorded: #3 everything.get-sum(a=1, b=2)"
    );

    // A tool of the recorded catalogue that was never called.
    let unknown = format!("tools.fs.list_directory(path={:?})\n", s.data(""));
    let (kind, message, _) = diverge(&s, "seq.jsonl", &unknown, &[]);
    assert_eq!(kind, "ToolError");
    assert!(
        message.contains("is not in seq.jsonl (it holds no call to fs.list_directory): tool: recorded 'read_text_file', called 'list_directory'; nearest recorded call: #1"),
        "{message}"
    );
    // A tool the recorded catalogue does not have fails as it would live.
    let (kind, message, _) = diverge(&s, "seq.jsonl", "tools.fs.read_txt_file(path='x')", &[]);
    assert_eq!(kind, "AttributeError");
    assert!(
        message.contains("Did you mean: read_text_file?"),
        "{message}"
    );
}

#[test]
fn secrets_and_redacted_keys_stay_out_of_the_cassette() {
    let s = Setup::new();
    let code = r#"ev, mem = tools.everything, tools.memory
env = ev.get_env()
print(sorted(k for k in env if k in ("API_TOKEN", "PLAIN_SECRET")))
print(ev.echo(message="token " + env["API_TOKEN"]))
mem.create_entities(entities=[{"name": "vault", "entityType": "safe", "observations": ["pw hunter2-hunter2"]}])
print(mem.read_graph()["entities"][0]["name"])
print(ev.echo(message="echoed: pw hunter2-hunter2"))
"#;
    let live = s.record(
        "secret.jsonl",
        &["--redact", "observations", &s.script("secret.py", code)],
    );
    assert_eq!(live.status.code(), Some(0), "{}", text(&live.stderr));
    let stdout = text(&live.stdout);
    assert!(stdout.contains(&format!("Echo: token {TOKEN}")), "{stdout}");
    let cassette = std::fs::read_to_string(s.path("secret.jsonl")).unwrap();
    for secret in [TOKEN, PLAIN_SECRET, "hunter2-hunter2"] {
        assert!(!cassette.contains(secret), "{secret} is in the cassette");
    }
    assert!(cassette.contains("[redacted: API_TOKEN]"), "{cassette}");
    assert!(cassette.contains("[redacted: PLAIN_SECRET]"), "{cassette}");
    assert!(
        cassette.contains(r#""observations":"[redacted]""#),
        "{cassette}"
    );
    assert!(cassette.contains(r#""redacted_keys":["observations"]"#));
    assert!(!text(&live.stderr).contains(TOKEN));

    // The redacted cassette still replays: the recorded script, redacted alike, makes the same
    // calls, and the markers stand where the secrets were.
    let replayed = s.replay("secret.jsonl", &[]);
    assert_eq!(
        replayed.status.code(),
        Some(0),
        "{}",
        text(&replayed.stderr)
    );
    assert!(
        text(&replayed.stdout).contains("Echo: token [redacted: API_TOKEN]"),
        "{}",
        text(&replayed.stdout)
    );
}

#[test]
fn bad_cassettes_and_flag_mixes_are_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str], says: &str| {
        let out = cli(args, "print(1)");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    let missing = dir.path().join("missing.jsonl");
    let missing = missing.to_str().unwrap();
    refused(
        &["run", "--replay", missing, "-"],
        &format!("cannot read cassette {missing}"),
    );
    let header = serde_json::json!({"format": "mcp-code-mode cassette", "version": 1,
        "execution_id": "x", "recorded_at": "now", "calls": 1});
    let corrupt = dir.path().join("corrupt.jsonl");
    std::fs::write(&corrupt, format!("{header}\n{{\"seq\": 1, \"server\": \n")).unwrap();
    let corrupt = corrupt.to_str().unwrap();
    refused(
        &["run", "--replay", corrupt, "-"],
        &format!("cassette {corrupt}: line 2: not a call: EOF while parsing"),
    );
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(
        &empty,
        format!("{}\n", header.to_string().replace(":1}", ":0}")),
    )
    .unwrap();
    let empty = empty.to_str().unwrap();
    refused(
        &["run", "--replay", empty],
        &format!("cassette {empty} holds no script: name the script to run against it"),
    );
    refused(
        &["run", "--record", "x.jsonl", "--replay", empty, "-"],
        "cannot be used with",
    );
    refused(
        &["run", "--replay", empty, "--config", "c.json", "-"],
        "cannot be used with",
    );
    refused(&["run", "--replay-match", "any", "-"], "--replay <FILE>");
    refused(&["run", "--redact", "password", "-"], "--record <FILE>");
    refused(
        &["run", "--record", "/no/such/folder/x.jsonl", "-"],
        "cannot record to /no/such/folder/x.jsonl: there is no folder /no/such/folder",
    );
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    refused(
        &["serve", "--record-dir", file.to_str().unwrap()],
        "cannot keep cassettes in --record-dir",
    );
    refused(&["serve", "--redact", "password"], "--record-dir <DIR>");
}

/// `serve --record-dir` through the real MCP client: the report names the execution id, and
/// `run --replay` of its cassette, with no server, prints what the execution printed.
#[test]
fn a_served_execution_is_recorded_under_its_id_and_replays() {
    crate::util::python_driver(
        "checks.py",
        &["record", "--mode", "legacy", "--transport", "stdio"],
        "ok: record (legacy",
    );
    crate::util::python_driver(
        "checks.py",
        &["record", "--mode", "auto", "--transport", "http"],
        "ok: record (auto",
    );
}

/// The parity corpus's tool scripts, and tests/parity_replay's own (whose tools answer
/// differently on every live run, or not at all), compared in both hosts from cassettes alone.
#[test]
#[cfg(feature = "parity")]
fn parity_replays_tool_scripts_in_both_hosts_from_cassettes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut scripts: Vec<String> = std::fs::read_dir(root.join("tests/parity"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tools_") && n.ends_with(".py"))
        .map(|n| format!("tests/parity/{n}"))
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 8, "{scripts:?}");
    let mut args: Vec<&str> = scripts.iter().map(String::as_str).collect();
    args.extend([
        "tests/parity_replay",
        "--replay",
        "tests/parity_replay",
        "--timeout",
        "60",
    ]);
    let out = parity(&args);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    let total = scripts.len() + 2;
    for script in [
        "tools_file_times.py",
        "tools_server_down.py",
        "tools_async_fanout.py",
    ] {
        assert!(row(&stdout, script).contains(" same "), "{stdout}");
    }
    assert!(
        stdout.contains(&format!(
            "cassettes: {total} script(s) replayed from tests/parity_replay"
        )),
        "{stdout}"
    );
    let calls = tool_call_counts(&stdout);
    assert_eq!((calls[0], calls[1]), (calls[2], calls[3]), "{stdout}");
    assert!(
        calls[1] >= 50,
        "only {} calls succeeded:\n{stdout}",
        calls[1]
    );
}

/// `parity --record` keeps the V8 host's traffic per script; `--replay` of that folder then
/// behaves as the live run did, in both hosts.
#[test]
#[cfg(feature = "parity")]
fn parity_records_what_it_replays() {
    let dir = tempfile::tempdir().unwrap();
    let cassettes = dir.path().to_str().unwrap();
    let script = "tests/parity/tools_memory_graph.py";
    let live = parity(&[
        script,
        "--config",
        "tests/parity/servers.json",
        "--record",
        cassettes,
    ]);
    assert_eq!(live.status.code(), Some(0), "{}", text(&live.stdout));
    assert!(dir.path().join("tools_memory_graph.jsonl").is_file());
    let replayed = parity(&[script, "--replay", cassettes]);
    let stdout = text(&replayed.stdout);
    assert_eq!(replayed.status.code(), Some(0), "{stdout}");
    assert_eq!(
        tool_call_counts(&stdout),
        tool_call_counts(&text(&live.stdout)),
        "{stdout}"
    );
}
