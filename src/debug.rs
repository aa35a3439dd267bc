//! `mcp-code-mode debug` — starts our own server as a child over stdio, drives it as an MCP client
//! would, and prints a readable transcript. Part of the cli layer: it talks to the server only
//! through MCP, exactly as Claude Desktop or Cursor would.

use anyhow::{bail, Context};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

/// The sample task when a filesystem server is configured: list its first allowed directory,
/// read the text files there, and summarise them — one script instead of many tool calls.
const FILESYSTEM_TASK: &str = r#"
fs = tools.filesystem
allowed = fs.list_allowed_directories()
text = allowed.get("content", "") if isinstance(allowed, dict) else str(allowed)
root = [line.strip() for line in text.splitlines() if line.strip().startswith("/")][0]
listing = fs.list_directory(path=root)
entries = listing["content"] if isinstance(listing, dict) else listing
files = [line[7:] for line in str(entries).splitlines() if line.startswith("[FILE] ")]
sizes = {}
for name in files[:5]:
    body = fs.read_text_file(path=f"{root}/{name}")
    sizes[name] = len(body["content"] if isinstance(body, dict) else body)
print(f"{root}: {len(files)} files; read {len(sizes)}")
{"directory": root, "files": len(files), "chars_read": sizes}
"#;

const PLAIN_TASK: &str = r#"
import json, statistics
data = [3, 1, 4, 1, 5, 9, 2, 6]
print("no filesystem server is running; plain Python instead")
{"mean": statistics.mean(data), "sorted": sorted(data)}
"#;

pub async fn run(config: Option<&Path>) -> anyhow::Result<bool> {
    // A bad config is reported as itself, not as the failed handshake of a server that exited.
    if let Some(path) = crate::config::resolve_path(config) {
        crate::config::load(&path)?;
    }
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let mut command = tokio::process::Command::new(exe);
    command.arg("serve");
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    println!(
        "» starting {} serve{}",
        command.as_std().get_program().to_string_lossy(),
        match config {
            Some(c) => format!(" --config {}", c.display()),
            None => String::new(),
        }
    );
    let started = Instant::now();
    let transport = TokioChildProcess::new(command).context("cannot start the server")?;
    let client = ().serve(transport).await.context("the MCP handshake failed")?;
    if let Some(server) = client.peer_info().and_then(|info| info.server_info.clone()) {
        println!(
            "  connected in {} ms: {} {}",
            started.elapsed().as_millis(),
            server.name,
            server.version
        );
    }

    let tools = settled_tools(&client).await?;
    println!("\n» tools/list: {} tools", tools.len());
    for tool in &tools {
        let first = tool
            .description
            .as_deref()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("");
        println!("  - {}: {first}", tool.name);
    }
    let description = tools
        .iter()
        .find(|t| t.name == "execute_code")
        .and_then(|t| t.description.clone())
        .context("the server offers no execute_code tool")?;
    let has_filesystem = description.contains("\n- filesystem (");
    let not_running = servers_not_running(&description);
    if !not_running.is_empty() {
        println!("\n» configured servers that are not running");
        for line in &not_running {
            println!("  - {line}");
        }
    }

    let listing = call(&client, "list_tools", json!({})).await?;
    println!("\n» list_tools\n{}", indent(&text_of(&listing)));

    let task = if has_filesystem {
        FILESYSTEM_TASK
    } else {
        PLAIN_TASK
    };
    println!("\n» execute_code\n{}", indent(task.trim()));
    let started = Instant::now();
    let result = call(&client, "execute_code", json!({ "code": task })).await?;
    let report = result.structured_content.clone().unwrap_or(Value::Null);
    println!("  ← {} ms", started.elapsed().as_millis());
    for key in ["stdout", "stderr"] {
        if let Some(text) = report
            .get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            println!("  {key}:\n{}", indent(text.trim_end()));
        }
    }
    println!("  result: {}", report.get("result").unwrap_or(&Value::Null));
    if let Some(id) = report.get("execution_id").and_then(Value::as_str) {
        println!("  execution id: {id}");
    }
    if let Some(calls) = report.get("tool_calls").and_then(Value::as_array) {
        for c in calls {
            println!(
                "  tool call: {}.{} {} ms {}",
                c["server"].as_str().unwrap_or("?"),
                c["tool"].as_str().unwrap_or("?"),
                c["ms"],
                if c["ok"] == json!(true) {
                    "ok"
                } else {
                    "FAILED"
                }
            );
        }
    }
    let script_ok = result.is_error != Some(true);
    let ok = script_ok && not_running.is_empty();
    if let Some(error) = report.get("error").filter(|e| !e.is_null()) {
        println!(
            "  error: {} {}\n{}",
            error["type"],
            error["message"],
            indent(error["traceback"].as_str().unwrap_or(""))
        );
    }
    client.cancel().await.ok();
    println!(
        "\n{}",
        if !script_ok {
            "✗ execute_code reported an error (see above)".to_owned()
        } else if !not_running.is_empty() {
            format!(
                "✗ {} configured server(s) not running (see above); the rest works end to end",
                not_running.len()
            )
        } else {
            "✓ the server works end to end".to_owned()
        }
    );
    Ok(ok)
}

/// tools/list once no configured server is still in its first start (the server answers at once
/// and starts its downstream servers in the background), or after the hub's init timeout.
async fn settled_tools(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
) -> anyhow::Result<Vec<rmcp::model::Tool>> {
    let deadline = Instant::now() + std::time::Duration::from_secs(35);
    let mut told = false;
    loop {
        let tools = client.list_all_tools().await.context("tools/list failed")?;
        let starting: Vec<String> = tools
            .iter()
            .find(|t| t.name == "execute_code")
            .and_then(|t| t.description.as_deref())
            .map(servers_not_running)
            .unwrap_or_default()
            .into_iter()
            .filter(|line| line.ends_with(": starting"))
            .collect();
        if starting.is_empty() || Instant::now() >= deadline {
            return Ok(tools);
        }
        if !told {
            println!(
                "  waiting for {} server(s) to start: {}",
                starting.len(),
                starting.join(", ")
            );
            told = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The servers execute_code's description lists as unavailable (`- name: state`), as
/// "name: state" lines; running ones read `- name (N tools)...`.
fn servers_not_running(description: &str) -> Vec<String> {
    description
        .lines()
        .skip_while(|line| !line.starts_with("Servers (as tools.<server>):"))
        .skip(1)
        .take_while(|line| line.starts_with("- "))
        .filter(|line| !line.contains(" tools)"))
        .map(|line| line[2..].to_owned())
        .collect()
}

async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    name: &'static str,
    args: Value,
) -> anyhow::Result<CallToolResult> {
    let Value::Object(args) = args else {
        bail!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(name).with_arguments(args))
        .await
        .with_context(|| format!("tools/call {name} failed"))
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
