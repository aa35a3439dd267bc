//! Headless Chromium for parity runs, driven over the Chrome DevTools Protocol (CDP).
//!
//! [`Browser::launch`] starts Chromium in its own process group with a fresh profile and
//! `--remote-debugging-port=0`, reads the port and path Chromium chose from `DevToolsActivePort`
//! in the profile, and connects one WebSocket to the browser endpoint. Each run gets its own tab
//! ([`Browser::open`]), reached through a flattened CDP session on that one socket.
//!
//! **Invariant:** Chromium never outlives us: `shutdown` (or, failing that, `Drop`) kills its whole
//! process group, renderers included.

use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

/// Chromium must be listening by then, or it is not going to.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
/// CDP commands other than script evaluation answer quickly or not at all.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of Chromium's stderr kept for the error message when it fails to start.
const STDERR_TAIL: usize = 40;

/// The flags CI and the issue specify, plus the debugging port and a profile of our own.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    // Not in the list: the machine's network is closed, and QUIC probes only add noise.
    "--disable-quic",
    // Containers often have a tiny /dev/shm, which makes renderers crash under load.
    "--disable-dev-shm-usage",
    // A fixed UI language, so navigator.language (Emscripten's LANG) is the same on every machine.
    "--lang=en-US",
    "--remote-debugging-port=0",
];

#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("cannot start Chromium ({path}): {message}")]
    Launch { path: String, message: String },
    #[error("Chromium's DevTools connection failed: {0}")]
    Connection(String),
    #[error("CDP {method} failed: {message}")]
    Command { method: String, message: String },
    #[error("CDP {method} got no answer within {} s", .after.as_secs())]
    Timeout { method: String, after: Duration },
}

/// Where Chromium is: `--chromium`, else the usual names on PATH. `None` means not installed.
pub fn find_chromium(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(format!(
                "--chromium {}: no such file (install Chromium with `apt-get install chromium`)",
                path.display()
            ))
        };
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for name in names {
        for dir in &dirs {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(format!(
        "Chromium is not installed (looked for {} on PATH): install it with `apt-get install chromium`, or pass --chromium PATH",
        names.join(", ")
    ))
}

pub struct Browser {
    cdp: Cdp,
    child: tokio::process::Child,
    pgid: Option<i32>,
    _profile: tempfile::TempDir,
    stderr_task: JoinHandle<()>,
}

impl Browser {
    pub async fn launch(executable: &Path) -> Result<Browser, BrowserError> {
        let launch_error = |message: String| BrowserError::Launch {
            path: executable.display().to_string(),
            message,
        };
        let profile = tempfile::Builder::new()
            .prefix("mcp-code-mode-chromium-")
            .tempdir()
            .map_err(|e| launch_error(format!("cannot make a profile folder: {e}")))?;
        let mut command = tokio::process::Command::new(executable);
        command
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            // The V8 host runs in UTC; so does the page, or every local time would differ.
            .env("TZ", "UTC")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| launch_error(format!("cannot run it: {e}")))?;
        let pgid = child.id().map(|id| id as i32);
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_task = match child.stderr.take() {
            Some(stderr) => {
                let tail = tail.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::trace!("chromium: {line}");
                        let mut tail = tail.lock();
                        if tail.len() == STDERR_TAIL {
                            tail.pop_front();
                        }
                        tail.push_back(line);
                    }
                })
            }
            None => tokio::spawn(async {}),
        };
        let mut browser = Browser {
            cdp: Cdp::closed(),
            child,
            pgid,
            _profile: profile,
            stderr_task,
        };
        let endpoint = match browser.wait_for_endpoint().await {
            Ok(endpoint) => endpoint,
            Err(message) => {
                let tail: Vec<String> = tail.lock().iter().cloned().collect();
                browser.kill();
                return Err(launch_error(if tail.is_empty() {
                    message
                } else {
                    format!("{message}; its last output:\n  {}", tail.join("\n  "))
                }));
            }
        };
        tracing::debug!("chromium: DevTools at {endpoint}");
        let (socket, _) = tokio_tungstenite::connect_async(endpoint.as_str())
            .await
            .map_err(|e| BrowserError::Connection(format!("{endpoint}: {e}")))?;
        browser.cdp = Cdp::new(socket);
        Ok(browser)
    }

    /// Waits for Chromium to write `DevToolsActivePort` (port, then the browser's path).
    async fn wait_for_endpoint(&mut self) -> Result<String, String> {
        let file = self._profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + LAUNCH_TIMEOUT;
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    if port.trim().parse::<u16>().is_ok() && path.starts_with('/') {
                        return Ok(format!("ws://127.0.0.1:{}{}", port.trim(), path.trim()));
                    }
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "it exited ({status}) before opening its DevTools port"
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "it did not open its DevTools port within {} s",
                    LAUNCH_TIMEOUT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Opens `url` in a new tab and returns once its load event has fired.
    pub async fn open(&self, url: &str) -> Result<Page, BrowserError> {
        let target = self
            .cdp
            .call(
                None,
                "Target.createTarget",
                json!({"url": "about:blank"}),
                COMMAND_TIMEOUT,
            )
            .await?;
        let target_id = str_field(&target, "targetId", "Target.createTarget")?;
        let attached = self
            .cdp
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
                COMMAND_TIMEOUT,
            )
            .await?;
        let session = str_field(&attached, "sessionId", "Target.attachToTarget")?;
        let page = Page {
            cdp: self.cdp.clone(),
            session,
            target_id,
        };
        page.call("Page.enable", json!({})).await?;
        let loaded = self.cdp.wait_event(&page.session, "Page.loadEventFired");
        let navigated = page.call("Page.navigate", json!({"url": url})).await?;
        if let Some(error) = navigated.get("errorText").and_then(Value::as_str) {
            return Err(BrowserError::Command {
                method: "Page.navigate".into(),
                message: format!("{url}: {error}"),
            });
        }
        match tokio::time::timeout(COMMAND_TIMEOUT, loaded).await {
            Ok(Ok(_)) => Ok(page),
            _ => Err(BrowserError::Timeout {
                method: format!("Page.navigate {url} (load event)"),
                after: COMMAND_TIMEOUT,
            }),
        }
    }

    /// Asks Chromium to close, then kills its process group whatever it did.
    pub async fn shutdown(mut self) {
        let _ = self
            .cdp
            .call(None, "Browser.close", json!({}), Duration::from_secs(2))
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        self.kill();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: killpg only sends a signal; a group that is already gone yields ESRCH.
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
        self.stderr_task.abort();
        self.cdp.close();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill();
    }
}

fn str_field(value: &Value, field: &str, method: &str) -> Result<String, BrowserError> {
    value
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| BrowserError::Command {
            method: method.into(),
            message: format!("the answer has no {field}: {value}"),
        })
}

/// One tab, reached through its own CDP session.
pub struct Page {
    cdp: Cdp,
    session: String,
    target_id: String,
}

impl Page {
    async fn call(&self, method: &str, params: Value) -> Result<Value, BrowserError> {
        self.cdp
            .call(Some(&self.session), method, params, COMMAND_TIMEOUT)
            .await
    }

    /// Evaluates `expression` in the page, awaiting it if it is a promise, and returns its value.
    /// A JavaScript exception is a `Command` error carrying the exception's text.
    pub async fn evaluate(
        &self,
        expression: &str,
        timeout: Duration,
    ) -> Result<Value, BrowserError> {
        let answer = self
            .cdp
            .call(
                Some(&self.session),
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
                timeout,
            )
            .await?;
        if let Some(details) = answer.get("exceptionDetails") {
            let text = details
                .pointer("/exception/description")
                .and_then(Value::as_str)
                .or_else(|| details.get("text").and_then(Value::as_str))
                .unwrap_or("an exception was thrown");
            return Err(BrowserError::Command {
                method: "Runtime.evaluate".into(),
                message: text.to_owned(),
            });
        }
        Ok(answer
            .pointer("/result/value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    pub async fn close(self) {
        let _ = self
            .cdp
            .call(
                None,
                "Target.closeTarget",
                json!({"targetId": self.target_id}),
                Duration::from_secs(5),
            )
            .await;
    }
}

type Reply = Result<Value, String>;

#[derive(Default)]
struct CdpState {
    /// Commands awaiting their answer, with the session they were sent to.
    pending: HashMap<u64, (String, oneshot::Sender<Reply>)>,
    /// One-shot event subscriptions: (session, method, where to send its params).
    waiters: Vec<(String, String, oneshot::Sender<Value>)>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
}

/// A CDP connection: commands matched to answers by id, events to one-shot waiters.
#[derive(Clone)]
struct Cdp {
    outgoing: Option<mpsc::UnboundedSender<Message>>,
    state: Arc<Mutex<CdpState>>,
    next_id: Arc<AtomicU64>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Cdp {
    fn closed() -> Cdp {
        Cdp {
            outgoing: None,
            state: Arc::new(Mutex::new(CdpState {
                closed: Some("not connected".into()),
                ..CdpState::default()
            })),
            next_id: Arc::new(AtomicU64::new(1)),
            tasks: Arc::default(),
        }
    }

    fn new<S>(socket: tokio_tungstenite::WebSocketStream<S>) -> Cdp
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sink, mut stream) = socket.split();
        let (outgoing, mut queue) = mpsc::unbounded_channel::<Message>();
        let state: Arc<Mutex<CdpState>> = Arc::default();
        let writer = tokio::spawn(async move {
            while let Some(message) = queue.recv().await {
                if let Err(e) = sink.send(message).await {
                    tracing::debug!("cdp: send failed: {e}");
                    break;
                }
            }
            let _ = sink.close().await;
        });
        let reader_state = state.clone();
        let reader = tokio::spawn(async move {
            let reason = loop {
                match stream.next().await {
                    Some(Ok(Message::Text(text))) => dispatch(&reader_state, text.as_str()),
                    Some(Ok(Message::Close(_))) | None => {
                        break "Chromium closed the connection".to_owned()
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("the connection failed: {e}"),
                };
            };
            let mut state = reader_state.lock();
            for (_, (_, tx)) in state.pending.drain() {
                let _ = tx.send(Err(reason.clone()));
            }
            state.waiters.clear();
            state.closed = Some(reason);
        });
        Cdp {
            outgoing: Some(outgoing),
            state,
            next_id: Arc::new(AtomicU64::new(1)),
            tasks: Arc::new(Mutex::new(vec![writer, reader])),
        }
    }

    async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, BrowserError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::from(session);
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.state.lock();
            if let Some(reason) = &state.closed {
                return Err(BrowserError::Connection(reason.clone()));
            }
            state
                .pending
                .insert(id, (session.unwrap_or_default().to_owned(), tx));
        }
        let sent = self
            .outgoing
            .as_ref()
            .map(|out| out.send(Message::Text(message.to_string().into())).is_ok())
            .unwrap_or(false);
        if !sent {
            self.state.lock().pending.remove(&id);
            return Err(BrowserError::Connection("the connection is closed".into()));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(message))) => Err(BrowserError::Command {
                method: method.into(),
                message,
            }),
            Ok(Err(_)) => Err(BrowserError::Connection("the connection is closed".into())),
            Err(_) => {
                self.state.lock().pending.remove(&id);
                Err(BrowserError::Timeout {
                    method: method.into(),
                    after: timeout,
                })
            }
        }
    }

    /// The params of the next `method` event in `session`.
    fn wait_event(&self, session: &str, method: &str) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.state
            .lock()
            .waiters
            .push((session.to_owned(), method.to_owned(), tx));
        rx
    }

    fn close(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

fn dispatch(state: &Mutex<CdpState>, text: &str) {
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        tracing::debug!("cdp: unreadable message: {text}");
        return;
    };
    let mut state = state.lock();
    if let Some(id) = message.get("id").and_then(Value::as_u64) {
        if let Some((_, tx)) = state.pending.remove(&id) {
            let reply = match message.get("error") {
                Some(error) => Err(error
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| error.to_string())),
                None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
            };
            let _ = tx.send(reply);
        }
        return;
    }
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let session = message
        .get("sessionId")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if method == "Inspector.targetCrashed" || method == "Target.detachedFromTarget" {
        // A crashed or closed tab never answers: fail what waits on it now, not at its timeout.
        let gone = message
            .pointer("/params/sessionId")
            .and_then(Value::as_str)
            .unwrap_or(session)
            .to_owned();
        let reason = if method == "Inspector.targetCrashed" {
            "the tab crashed"
        } else {
            "the tab was closed"
        };
        if method == "Inspector.targetCrashed" {
            tracing::warn!("chromium: {reason} (session {gone})");
        }
        let ids: Vec<u64> = state
            .pending
            .iter()
            .filter(|(_, (s, _))| *s == gone)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some((_, tx)) = state.pending.remove(&id) {
                let _ = tx.send(Err(reason.to_owned()));
            }
        }
    }
    if let Some(at) = state
        .waiters
        .iter()
        .position(|(s, m, _)| s == session && m == method)
    {
        let (_, _, tx) = state.waiters.swap_remove(at);
        let _ = tx.send(message.get("params").cloned().unwrap_or(Value::Null));
    }
}
