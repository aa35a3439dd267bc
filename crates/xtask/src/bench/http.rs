//! Row 9: `serve --http` — the round trip over streamable HTTP, and throughput through HAProxy
//! (`deploy/haproxy.cfg`) with one replica and with two.
//!
//! The client is a plain HTTP/1.1 one (hyper), one keep-alive connection per worker, sending
//! `tools/call execute_code` to `--stateless` servers: the cost measured is the server's, not a
//! client library's session handling.

use super::{p, progress, source_dir, ZYGOTE_LOG_TARGET, ZYGOTE_WARM_LINE};
use anyhow::{bail, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

/// One `serve --http 127.0.0.1:PORT --stateless`, warm.
struct Replica {
    child: tokio::process::Child,
    addr: String,
}

impl Replica {
    async fn start() -> anyhow::Result<Replica> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut child = tokio::process::Command::new(super::binary())
            .args(["serve", "--stateless", "--http", &addr])
            .current_dir(dir.path())
            .env(super::CONFIG_ENV, "")
            .env(
                "MCP_CODE_MODE_LOG",
                format!("warn,{ZYGOTE_LOG_TARGET}=info"),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start `mcp-code-mode serve --http`")?;
        let log = Arc::new(Mutex::new(String::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = sink.lock();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        while !log.lock().contains(ZYGOTE_WARM_LINE) {
            if Instant::now() > deadline {
                bail!("serve --http did not warm up in 120 s: {}", log.lock());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Replica { child, addr })
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A keep-alive HTTP/1.1 connection posting `execute_code` calls.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    addr: String,
    next_id: u64,
}

impl Connection {
    async fn open(addr: &str) -> anyhow::Result<Connection> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Connection {
            sender,
            addr: addr.to_owned(),
            next_id: 0,
        })
    }

    /// One `execute_code`; an error unless the reply carries `stdout`.
    async fn execute(&mut self, code: &str, stdout: &str) -> anyhow::Result<()> {
        self.next_id += 1;
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
            "params": {"name": "execute_code", "arguments": {"code": code}},
        });
        let request = hyper::Request::post("/mcp")
            .header("host", &self.addr)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(Full::new(Bytes::from(body.to_string())))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        let want = serde_json::to_string(stdout)?;
        let want = format!("\"stdout\":{want}");
        if !status.is_success() || !text.contains(&want) {
            bail!("HTTP {status}: {}", &text[..text.len().min(300)]);
        }
        Ok(())
    }
}

/// Row 9a: back to back over one connection.
async fn round_trips(n: usize) -> anyhow::Result<Vec<f64>> {
    let replica = Replica::start().await?;
    let mut connection = Connection::open(&replica.addr).await?;
    for _ in 0..5 {
        connection.execute("print(1)", "1\n").await?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        connection.execute("print(1)", "1\n").await?;
        samples.push(super::ms(started.elapsed()));
    }
    drop(replica.child);
    Ok(samples)
}

struct Throughput {
    per_second: f64,
    latencies: Vec<f64>,
    failures: usize,
}

/// Row 9b: `calls` executions at `concurrency` through HAProxy in front of `replicas` servers.
async fn through_haproxy(
    replicas: usize,
    calls: usize,
    concurrency: usize,
) -> anyhow::Result<Throughput> {
    let config = source_dir().join("deploy/haproxy.cfg");
    if !config.is_file() {
        bail!("no {} (run from the repository's root)", config.display());
    }
    let mut servers = Vec::new();
    for _ in 0..replicas {
        servers.push(Replica::start().await?);
    }
    let listen = format!("127.0.0.1:{}", free_port()?);
    // One replica: both of the config's servers point at it.
    let second = servers.last().unwrap().addr.clone();
    let mut haproxy = tokio::process::Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&config)
        .env("LISTEN", &listen)
        .env("REPLICA1", &servers[0].addr)
        .env("REPLICA2", second)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start haproxy (apt-get install haproxy)")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut connections = Vec::new();
    while connections.len() < concurrency {
        match Connection::open(&listen).await {
            Ok(c) => connections.push(c),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => return Err(e),
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await; // HAProxy's checks mark both up
    for c in &mut connections {
        c.execute("print(1)", "1\n").await?;
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = connections
        .into_iter()
        .map(|mut connection| {
            let next = next.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut failures = 0;
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < calls {
                    let t = Instant::now();
                    match connection.execute("print(1)", "1\n").await {
                        Ok(()) => latencies.push(super::ms(t.elapsed())),
                        Err(_) => failures += 1,
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let mut result = Throughput {
        per_second: 0.0,
        latencies: Vec::new(),
        failures: 0,
    };
    for worker in workers {
        let (latencies, failures) = worker.await?;
        result.latencies.extend(latencies);
        result.failures += failures;
    }
    result.per_second = calls as f64 / started.elapsed().as_secs_f64();
    let _ = haproxy.kill().await;
    Ok(result)
}

/// Prints row 9 as its own table.
pub(super) async fn section(quick: bool) {
    println!("\n### Over streamable HTTP (`serve --http --stateless`, forked sandboxes)\n");
    println!("| measurement | result |");
    println!("|---|---|");
    progress("execute_code round trips over HTTP");
    let n = if quick { 30 } else { 100 };
    match round_trips(n).await {
        Ok(s) => println!(
            "| 9a. `execute_code(\"print(1)\")` over HTTP, back to back on one keep-alive connection | {} p50, {} p95 (n={n}) |",
            p(&s, 50.0),
            p(&s, 95.0)
        ),
        Err(e) => println!("| 9a. execute_code over HTTP | {} |", super::failed(e)),
    }
    let calls = if quick { 200 } else { 1000 };
    for replicas in [1, 2] {
        progress(&format!(
            "throughput through HAProxy, {replicas} replica(s)"
        ));
        let what = format!(
            "9b. `execute_code(\"print(1)\")` through HAProxy at concurrency 8, {replicas} replica{}",
            if replicas == 1 { "" } else { "s" }
        );
        match through_haproxy(replicas, calls, 8).await {
            Ok(t) => println!(
                "| {what} | {:.0} executions/s, {} p50, {} p95, {} failed of {calls} |",
                t.per_second,
                p(&t.latencies, 50.0),
                p(&t.latencies, 95.0),
                t.failures
            ),
            Err(e) => println!("| {what} | {} |", super::failed(e)),
        }
    }
}
