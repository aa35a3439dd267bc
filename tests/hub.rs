//! The hub against real MCP servers (tests/fixtures/node_modules, installed by `npm ci`): start,
//! catalogue, calls and their result shapes, failures, crashes and restarts, list changes, shutdown.

use mcp_code_mode::bridge::{ToolCallError, ToolHost};
use mcp_code_mode::config::{Config, ServerConfig, Transport};
use mcp_code_mode::hub::{Hub, ServerState};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A server run as `node <package's bin> <args>`.
/// server-memory keeping its graph in `dir` (each test its own, so tests cannot see each other's).
fn memory_server(dir: &std::path::Path) -> ServerConfig {
    let mut memory = node_server("memory", "server-memory", &[]);
    let file = dir.join("memory.jsonl").to_string_lossy().into_owned();
    let Transport::Stdio { env, .. } = &mut memory.transport else {
        unreachable!("node_server makes a local server")
    };
    env.insert("MEMORY_FILE_PATH".into(), file);
    memory
}

fn node_server(name: &str, package: &str, args: &[&str]) -> ServerConfig {
    let entry = fixtures()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run `npm ci` in tests/fixtures",
        entry.display()
    );
    let mut all = vec![entry.to_string_lossy().into_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    server(name, "node", all)
}

fn server(name: &str, command: &str, args: Vec<String>) -> ServerConfig {
    ServerConfig {
        name: name.to_owned(),
        transport: Transport::Stdio {
            command: command.to_owned(),
            args,
            env: BTreeMap::new(),
            cwd: None,
        },
        description: format!("the {name} test server"),
        disabled: false,
        timeout: Duration::from_secs(20),
        secrets: Vec::new(),
    }
}

fn config(servers: Vec<ServerConfig>) -> Config {
    Config {
        path: PathBuf::from("test-config.json"),
        servers,
        ..Default::default()
    }
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments must be an object, got {other}"),
    }
}

async fn call(
    hub: &Hub,
    server: &str,
    tool: &str,
    arguments: Value,
) -> Result<Value, ToolCallError> {
    hub.call(server, tool, args(arguments)).await
}

fn state(hub: &Hub, server: &str) -> ServerState {
    hub.status()
        .into_iter()
        .find(|s| s.name == server)
        .map(|s| s.state)
        .unwrap_or_else(|| panic!("no status for {server}"))
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn group_alive(pgid: u32) -> bool {
    // SAFETY: as above, for the whole process group.
    unsafe { libc::killpg(pgid as libc::pid_t, 0) == 0 }
}

fn kill(pid: u32) {
    // SAFETY: sends SIGKILL to a child of this test that we started.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// Shuts the hub down and checks that none of the given processes (or their groups) survive.
async fn shutdown_and_check(hub: &Hub, pids: &[u32]) {
    assert!(!pids.is_empty());
    for pid in pids {
        assert!(alive(*pid), "pid {pid} should be running before shutdown");
    }
    let started = Instant::now();
    hub.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "shutdown took {:?}",
        started.elapsed()
    );
    for pid in pids {
        assert!(!alive(*pid), "pid {pid} survived shutdown");
        assert!(!group_alive(*pid), "process group {pid} survived shutdown");
    }
    assert!(hub.catalog().is_empty(), "no server runs after shutdown");
    let after = call(hub, "everything", "get-sum", json!({"a": 1, "b": 2})).await;
    assert!(after.is_err(), "calls fail after shutdown: {after:?}");
}

/// Retries `get` until it returns Some, for at most `limit`.
async fn eventually<T>(limit: Duration, mut get: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + limit;
    loop {
        if let Some(value) = get().await {
            return Some(value);
        }
        if Instant::now() > until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_real_servers_catalog_calls_and_shutdown() {
    let root = tempfile::tempdir().expect("temp dir");
    let root_path = root.path().canonicalize().expect("canonical temp dir");
    std::fs::write(root_path.join("hello.txt"), "hello from a file\n").expect("write");
    let memory_dir = tempfile::tempdir().expect("temp dir");
    let memory = memory_server(memory_dir.path());
    let mut off = node_server("off", "server-memory", &[]);
    off.disabled = true;
    let config = config(vec![
        node_server("everything", "server-everything", &[]),
        node_server(
            "filesystem",
            "server-filesystem",
            &[&root_path.to_string_lossy()],
        ),
        memory,
        off,
    ]);

    let hub = Hub::start(Some(&config));
    hub.wait_started().await;
    for name in ["everything", "filesystem", "memory"] {
        assert!(
            matches!(state(&hub, name), ServerState::Running { tools } if tools > 0),
            "{name}: {:?}",
            hub.status()
        );
    }
    assert_eq!(state(&hub, "off"), ServerState::Disabled);
    assert!(
        hub.summary().contains("filesystem: running, 14 tools"),
        "{}",
        hub.summary()
    );

    // The catalogue: running servers only, with schemas as the servers sent them.
    let catalog = hub.catalog();
    let names: Vec<&str> = catalog.iter().map(|c| c.server.as_str()).collect();
    assert_eq!(names, ["everything", "filesystem", "memory"]);
    let fs = &catalog[1];
    assert_eq!(fs.description, "the filesystem test server");
    let read = fs
        .tools
        .iter()
        .find(|t| t.name == "read_text_file")
        .expect("filesystem has read_text_file");
    assert!(read.input_schema["properties"]["path"].is_object());
    assert!(
        read.output_schema
            .as_ref()
            .is_some_and(|s| s["type"] == "object"),
        "read_text_file has an output schema: {:?}",
        read.output_schema
    );
    assert_eq!(
        read.annotations.as_ref().map(|a| a["readOnlyHint"].clone()),
        Some(json!(true))
    );
    let everything = &catalog[0];
    let get_sum = everything
        .tools
        .iter()
        .find(|t| t.name == "get-sum")
        .expect("everything has the dashed tool get-sum");
    assert!(get_sum.input_schema["properties"]["a"].is_object());
    assert!(catalog[2].tools.iter().any(|t| t.name == "create_entities"));

    // structuredContent is what Python gets.
    let file = root_path.join("hello.txt").to_string_lossy().into_owned();
    let read = call(&hub, "filesystem", "read_text_file", json!({"path": file})).await;
    assert_eq!(read, Ok(json!({"content": "hello from a file\n"})));
    let weather = call(
        &hub,
        "everything",
        "get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await;
    assert_eq!(
        weather,
        Ok(json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}))
    );

    // One non-JSON text block: the text.
    let sum = call(&hub, "everything", "get-sum", json!({"a": 2, "b": 40})).await;
    assert_eq!(sum, Ok(json!("The sum of 2 and 40 is 42.")));

    // Several blocks (text + image): a list, the image as a dict.
    let image = call(&hub, "everything", "get-tiny-image", json!({}))
        .await
        .expect("get-tiny-image");
    let blocks = image.as_array().expect("several blocks are a list");
    let picture = blocks
        .iter()
        .find(|b| b.get("type") == Some(&json!("image")))
        .unwrap_or_else(|| panic!("an image block in {image}"));
    assert_eq!(picture["mimeType"], "image/png");
    assert!(picture["data"].as_str().is_some_and(|d| !d.is_empty()));
    assert!(
        blocks.iter().any(Value::is_string),
        "the text blocks are strings: {image}"
    );

    // A stateful server, through several calls.
    let created = call(
        &hub,
        "memory",
        "create_entities",
        json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote programs"]}]}),
    )
    .await;
    assert!(created.is_ok(), "{created:?}");
    let graph = call(&hub, "memory", "read_graph", json!({}))
        .await
        .expect("read_graph");
    assert_eq!(graph["entities"][0]["name"], "Ada");

    // isError → the tool's own text, as the tool's failure.
    let denied = call(
        &hub,
        "filesystem",
        "read_text_file",
        json!({"path": "/etc/passwd"}),
    )
    .await;
    let Err(ToolCallError::Tool(message)) = denied else {
        panic!("reading outside the root must fail as the tool's: {denied:?}")
    };
    assert!(message.contains("Access denied"), "{message}");
    let invalid = call(&hub, "everything", "get-sum", json!({"a": "two", "b": 2})).await;
    assert!(
        // The TypeScript SDK reports its schema check as the tool's error (isError), as the
        // spec asks: a model reads it and corrects its arguments.
        matches!(&invalid, Err(ToolCallError::Tool(m)) if m.contains("expected number")),
        "{invalid:?}"
    );

    // Unknown server, unknown tool, disabled server: errors that say what exists.
    let unknown = call(&hub, "nope", "x", json!({})).await;
    assert_eq!(
        unknown,
        Err(ToolCallError::NotFound(
            "unknown MCP server 'nope': the configured servers are 'everything', 'filesystem', 'memory', 'off' (disabled)"
                .into()
        ))
    );
    let no_tool = call(&hub, "everything", "get_sum", json!({})).await;
    assert!(
        matches!(&no_tool, Err(ToolCallError::NotFound(m)) if m.starts_with("MCP server 'everything' has no tool 'get_sum'; its tools: ") && m.contains("get-sum")),
        "{no_tool:?}"
    );
    let disabled = call(&hub, "off", "read_graph", json!({})).await;
    assert!(
        matches!(&disabled, Err(ToolCallError::Unavailable(m)) if m.contains("'off' is disabled")),
        "{disabled:?}"
    );

    // The sandbox polls call futures on its own thread's current-thread runtime.
    let host: Arc<dyn ToolHost> = hub.clone();
    let from_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(host.call("everything", "get-sum", args(json!({"a": 1, "b": 1}))))
    })
    .join()
    .expect("the thread ends");
    assert_eq!(from_thread, Ok(json!("The sum of 1 and 1 is 2.")));

    let pids: Vec<u32> = ["everything", "filesystem", "memory"]
        .iter()
        .map(|name| hub.pid(name).expect("a running server has a pid"))
        .collect();
    shutdown_and_check(&hub, &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_servers_do_not_block_the_others() {
    let mut crashes = server(
        "crashes",
        "node",
        vec![
            "-e".into(),
            "console.error('boom: no API key'); process.exit(3)".into(),
        ],
    );
    crashes.description = String::new();
    let mut bad_cwd = node_server("badcwd", "server-everything", &[]);
    let Transport::Stdio { cwd, .. } = &mut bad_cwd.transport else {
        unreachable!("a local server")
    };
    *cwd = Some(PathBuf::from("/nonexistent/dir/for/mcp"));
    let config = config(vec![
        server("ghost", "/nonexistent/bin/mcp-server-ghost", vec![]),
        crashes,
        bad_cwd,
        node_server("everything", "server-everything", &[]),
    ]);
    let started = Instant::now();
    let hub = Hub::start(Some(&config));
    hub.wait_started().await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "startup waited {:?}",
        started.elapsed()
    );
    assert!(matches!(
        state(&hub, "everything"),
        ServerState::Running { .. }
    ));

    let ServerState::Failed { reason } = state(&hub, "ghost") else {
        panic!("ghost: {:?}", hub.status())
    };
    assert!(
        reason.starts_with(
            "it failed to start: command '/nonexistent/bin/mcp-server-ghost' was not found"
        ),
        "{reason}"
    );
    assert!(
        reason.contains("restarting in") || reason.contains("restarting now"),
        "{reason}"
    );
    let ServerState::Failed { reason } = state(&hub, "crashes") else {
        panic!("crashes: {:?}", hub.status())
    };
    assert!(reason.contains("exited with status 3"), "{reason}");
    assert!(
        reason.contains("boom: no API key"),
        "the last stderr line is kept: {reason}"
    );
    let ServerState::Failed { reason } = state(&hub, "badcwd") else {
        panic!("badcwd: {:?}", hub.status())
    };
    assert!(
        reason.contains("working directory /nonexistent/dir/for/mcp does not exist"),
        "{reason}"
    );

    // A call to a server that is down fails at once and says why and when it comes back.
    let t = Instant::now();
    let down = call(&hub, "ghost", "anything", json!({})).await;
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(
        matches!(&down, Err(ToolCallError::Unavailable(m)) if m.starts_with("MCP server 'ghost' is not running: it failed to start: command") && (m.contains("restarting in") || m.contains("restarting now"))),
        "{down:?}"
    );
    assert_eq!(
        hub.catalog()
            .iter()
            .map(|c| c.server.as_str())
            .collect::<Vec<_>>(),
        ["everything"]
    );
    let sum = call(&hub, "everything", "get-sum", json!({"a": 1, "b": 2})).await;
    assert_eq!(sum, Ok(json!("The sum of 1 and 2 is 3.")));
    let pid = hub.pid("everything").expect("pid");
    shutdown_and_check(&hub, &[pid]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_restarted() {
    let memory_dir = tempfile::tempdir().expect("temp dir");
    let memory = memory_server(memory_dir.path());
    let config = config(vec![
        node_server("everything", "server-everything", &[]),
        memory,
    ]);
    let hub = Hub::start(Some(&config));
    hub.wait_started().await;
    let mut changes = hub.changes();
    changes.borrow_and_update();

    // The call in flight when the server dies fails, naming the server.
    let first_pid = hub.pid("everything").expect("everything runs");
    let in_flight = {
        let hub = hub.clone();
        tokio::spawn(async move {
            call(
                &hub,
                "everything",
                "trigger-long-running-operation",
                json!({"duration": 10, "steps": 10}),
            )
            .await
        })
    };
    // Long enough for the call to be sent, even on a loaded machine; the operation takes 10 s.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    kill(first_pid);
    let failed = tokio::time::timeout(Duration::from_secs(8), in_flight)
        .await
        .expect("the in-flight call ends soon after the crash")
        .expect("the task ends");
    let Err(ToolCallError::Server(message)) = failed else {
        panic!("the in-flight call must fail: {failed:?}")
    };
    assert!(
        message.starts_with(
            "MCP server 'everything' stopped during the call to 'trigger-long-running-operation': "
        ),
        "{message}"
    );
    assert!(
        message.contains("SIGKILL") || message.contains("restart"),
        "{message}"
    );

    // Then it comes back, with a new process, and works.
    let sum = eventually(Duration::from_secs(15), async || {
        call(&hub, "everything", "get-sum", json!({"a": 20, "b": 22}))
            .await
            .ok()
    })
    .await;
    assert_eq!(sum, Some(json!("The sum of 20 and 22 is 42.")));
    let second_pid = hub.pid("everything").expect("restarted");
    assert_ne!(first_pid, second_pid);
    assert!(!alive(first_pid));
    assert!(
        changes.has_changed().unwrap_or(false),
        "the catalogue version moved"
    );

    // Killed between calls: the next call fails clearly or (after the restart) works; a later one works.
    let memory_pid = hub.pid("memory").expect("memory runs");
    kill(memory_pid);
    let next = call(&hub, "memory", "read_graph", json!({})).await;
    if let Err(e) = &next {
        assert!(
            matches!(e, ToolCallError::Unavailable(_) | ToolCallError::Server(_)),
            "{e:?}"
        );
        let m = e.message();
        assert!(m.starts_with("MCP server 'memory' "), "{m}");
        assert!(
            m.contains("killed by signal 9")
                || m.contains("restart")
                || m.contains("connection closed"),
            "{m}"
        );
    }
    let later = eventually(Duration::from_secs(15), async || {
        call(&hub, "memory", "read_graph", json!({})).await.ok()
    })
    .await;
    assert_eq!(later, Some(json!({"entities": [], "relations": []})));
    assert!(matches!(
        state(&hub, "memory"),
        ServerState::Running { tools: 9 }
    ));

    let pids = [second_pid, hub.pid("memory").expect("memory runs")];
    shutdown_and_check(&hub, &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_times_out_and_the_server_keeps_working() {
    let mut everything = node_server("everything", "server-everything", &[]);
    everything.timeout = Duration::from_millis(1500);
    let hub = Hub::start(Some(&config(vec![everything])));
    hub.wait_started().await;
    let t = Instant::now();
    let slow = call(
        &hub,
        "everything",
        "trigger-long-running-operation",
        json!({"duration": 10, "steps": 5}),
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(
        slow,
        Err(ToolCallError::Server(
            "MCP server 'everything': tool 'trigger-long-running-operation' did not answer within 1.5 s (the server's timeout_s)".into()
        ))
    );
    let sum = call(&hub, "everything", "get-sum", json!({"a": 1, "b": 1})).await;
    assert_eq!(sum, Ok(json!("The sum of 1 and 1 is 2.")));
    let pid = hub.pid("everything").expect("pid");
    shutdown_and_check(&hub, &[pid]).await;
}

/// A real server built on the official TypeScript SDK whose `add-tool` registers a new tool at
/// run time, which makes the SDK send `notifications/tools/list_changed`. (server-everything sends
/// one too, but only right after initialization, before we first list: it cannot tell a refresh
/// from the first listing.) Its `sleep` records being cancelled, which `cancelled` reports.
const SDK_SERVER: &str = r#"
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { z } = require("zod");
const server = new McpServer({ name: "list-changer", version: "1.0.0" });
server.registerTool("add-tool", {
  description: "Registers a new tool called `name`",
  inputSchema: { name: z.string() },
}, async ({ name }) => {
  server.registerTool(name, { description: "added at run time" }, async () => ({
    content: [{ type: "text", text: `${name} works` }],
  }));
  return { content: [{ type: "text", text: "added" }] };
});
let cancelled = [];
server.registerTool("sleep", {
  description: "Waits until cancelled (or 30 s)",
  inputSchema: { label: z.string() },
}, async ({ label }, extra) => {
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 30000);
    extra.signal.addEventListener("abort", () => { clearTimeout(timer); cancelled.push(label); resolve(); });
  });
  return { content: [{ type: "text", text: "slept" }] };
});
server.registerTool("cancelled", { description: "Labels of the cancelled sleeps" }, async () => ({
  content: [{ type: "text", text: JSON.stringify(cancelled) }],
}));
server.connect(new StdioServerTransport());
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_changed_refreshes_the_catalog() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("list-changer.cjs");
    std::fs::write(&script, SDK_SERVER).expect("write the server");
    let mut changer = server(
        "changer",
        "node",
        vec![script.to_string_lossy().into_owned()],
    );
    let Transport::Stdio { env, .. } = &mut changer.transport else {
        unreachable!("a local server")
    };
    env.insert(
        "NODE_PATH".into(),
        fixtures()
            .join("node_modules")
            .to_string_lossy()
            .into_owned(),
    );
    let hub = Hub::start(Some(&config(vec![
        changer,
        node_server("everything", "server-everything", &[]),
    ])));
    hub.wait_started().await;
    let tools = |hub: &Hub| -> Vec<String> {
        hub.catalog()
            .into_iter()
            .find(|c| c.server == "changer")
            .map(|c| c.tools.iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        tools(&hub),
        ["add-tool", "sleep", "cancelled"],
        "{:?}",
        hub.status()
    );
    // server-everything registers its task tool after initialization and says so.
    let everything = hub
        .catalog()
        .into_iter()
        .find(|c| c.server == "everything")
        .expect("runs");
    assert!(everything
        .tools
        .iter()
        .any(|t| t.name == "simulate-research-query"));

    let mut changes = hub.changes();
    changes.borrow_and_update();
    assert_eq!(
        call(&hub, "changer", "add-tool", json!({"name": "fresh-tool"})).await,
        Ok(json!("added"))
    );
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("the catalogue version changes after tools/list_changed")
        .expect("the hub is alive");
    assert_eq!(
        tools(&hub),
        ["add-tool", "sleep", "cancelled", "fresh-tool"]
    );
    assert_eq!(
        call(&hub, "changer", "fresh-tool", json!({})).await,
        Ok(json!("fresh-tool works"))
    );

    // Dropping a call's future (as a sandbox does when a script is stopped) cancels it downstream.
    let abandoned = tokio::time::timeout(
        Duration::from_millis(500),
        call(&hub, "changer", "sleep", json!({"label": "abandoned"})),
    )
    .await;
    assert!(abandoned.is_err(), "the sleep outlives the timeout");
    let cancelled = eventually(Duration::from_secs(5), async || {
        let labels = call(&hub, "changer", "cancelled", json!({})).await.ok()?;
        (labels != json!([])).then_some(labels)
    })
    .await;
    assert_eq!(
        cancelled,
        Some(json!(["abandoned"])),
        "notifications/cancelled reached the server"
    );

    let pids = [
        hub.pid("changer").expect("pid"),
        hub.pid("everything").expect("pid"),
    ];
    shutdown_and_check(&hub, &pids).await;
}

#[tokio::test]
async fn no_config_means_no_servers() {
    let hub = Hub::start(None);
    hub.wait_started().await;
    assert!(hub.catalog().is_empty());
    assert!(hub.status().is_empty());
    assert!(hub.summary().contains("no MCP servers configured"));
    assert_eq!(
        call(&hub, "github", "search", json!({})).await,
        Err(ToolCallError::NotFound(
            "unknown MCP server 'github': no MCP servers are configured".into()
        ))
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_hub_kills_its_servers() {
    let hub = Hub::start(Some(&config(vec![node_server(
        "everything",
        "server-everything",
        &[],
    )])));
    hub.wait_started().await;
    let pid = hub.pid("everything").expect("pid");
    assert!(alive(pid));
    drop(hub);
    let gone = eventually(Duration::from_secs(5), async || (!alive(pid)).then_some(())).await;
    assert!(gone.is_some(), "pid {pid} survived the hub's drop");
}
