//! The loopback HTTP server behind the browser host of a parity run.
//!
//! It serves Chromium exactly the bytes the V8 host boots from (the pinned Pyodide files and our
//! `js/` sources, from `crate::assets`) and, per run, the endpoints js/main_browser.js uses in
//! place of the V8 host's ops: settings, seeded entropy, the tool catalogue, tool calls (through
//! the same `ToolBridge` as `op_tools_call`), output (through the same `SharedOutput` cap as
//! `op_output_write`) and the memory snapshot.
//!
//! Its only client is our own page on 127.0.0.1, which runs untrusted agent code: it listens on
//! loopback only, every request is capped (the head by hyper, the body at [`MAX_BODY`]) and
//! every bad request gets a status and a sentence saying what is wrong.

use crate::assets;
use crate::bridge::memory::MemoryBudget;
use crate::bridge::{NoTools, SharedOutput, Stream, ToolBridge};
use crate::engine::{self, Limits, Snapshot};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, RawQuery, Request};
use axum::http::{header, request::Parts, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use axum::Router;
use mcp_code_mode_sandbox::wheels::wheelhouse;
use parking_lot::Mutex;
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Largest request body accepted (one output batch can carry a single huge `print`).
const MAX_BODY: usize = 256 << 20;
/// Web Crypto's own limit for one getRandomValues call; the V8 host's op enforces the same.
const MAX_ENTROPY: usize = 65536;

/// What a browser run boots with: the same inputs the V8 host's sandbox is made from.
pub struct RunSettings {
    pub limits: Limits,
    pub seed: u64,
    /// The Pyodide memory snapshot the V8 host restores, when it restores one.
    pub snapshot: Option<Snapshot>,
}

/// One browser run's state: its page finds it by the token in its URL.
pub struct Session {
    pub token: String,
    settings_json: String,
    snapshot: Option<Snapshot>,
    entropy: Mutex<ChaCha20Rng>,
    /// What the script printed, capped exactly as the V8 host caps it.
    pub output: SharedOutput,
    /// The tool host (set to the run's hub just before the job) and the log of calls.
    pub tools: ToolBridge,
    /// What tool-call arguments are charged to, as in the V8 host.
    budget: Arc<MemoryBudget>,
}

impl Session {
    fn new(settings: &RunSettings) -> Result<Session, String> {
        let mut token = [0u8; 16];
        getrandom::fill(&mut token).map_err(|e| format!("no OS entropy for a run token: {e}"))?;
        // Settings and entropy come from the engine's own functions, so the two hosts cannot
        // drift apart: same env and hash seed, same memory cap, same ChaCha20 stream.
        let settings_json = serde_json::to_string(&engine::BootSettings::new(
            &settings.limits,
            Some(settings.seed),
            settings.snapshot.is_some(),
            false,
        ))
        .map_err(|e| format!("the boot settings as JSON: {e}"))?;
        let entropy = engine::entropy_source(Some(settings.seed))
            .map_err(|e| crate::text::Chain(&e).to_string())?;
        Ok(Session {
            token: token.iter().map(|b| format!("{b:02x}")).collect(),
            settings_json,
            snapshot: settings.snapshot.clone(),
            entropy: Mutex::new(entropy),
            output: SharedOutput::new(settings.limits.max_output, None),
            tools: ToolBridge::new(Arc::new(NoTools)),
            budget: MemoryBudget::new(engine::MemoryShares::of(settings.limits.memory_mb).counted),
        })
    }
}

type Sessions = Arc<Mutex<HashMap<String, Arc<Session>>>>;

/// The running server. Dropping it stops accepting connections; open ones close once idle.
pub struct Server {
    addr: SocketAddr,
    sessions: Sessions,
    _stop: DropGuard,
}

impl Server {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start() -> std::io::Result<Server> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        // Entropy and output are synchronous XHRs the worker waits on: no Nagle delay on them.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let sessions: Sessions = Arc::default();
        let stop = CancellationToken::new();
        let serve = axum::serve(listener, router(sessions.clone()))
            .with_graceful_shutdown(stop.clone().cancelled_owned());
        tokio::spawn(async move {
            if let Err(e) = serve.await {
                tracing::warn!("parity http: the server failed: {e}");
            }
        });
        tracing::debug!("parity http: serving on http://{addr}/");
        Ok(Server {
            addr,
            sessions,
            _stop: stop.drop_guard(),
        })
    }

    /// Registers a new run; its page is at [`Server::page_url`].
    pub fn open_session(&self, settings: &RunSettings) -> Result<Arc<Session>, String> {
        let session = Arc::new(Session::new(settings)?);
        self.sessions
            .lock()
            .insert(session.token.clone(), session.clone());
        Ok(session)
    }

    pub fn close_session(&self, session: &Session) {
        self.sessions.lock().remove(&session.token);
    }

    pub fn page_url(&self, session: &Session) -> String {
        format!("http://{}/run/{}/", self.addr, session.token)
    }
}

/// The page of one run: it only loads main_browser.js, which does the rest.
const PAGE: &str =
    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mcp-code-mode parity</title>\n\
<script type=\"module\" src=\"/codemode/main_browser.js\"></script></head><body></body></html>\n";

const JSON: &str = "application/json";
const BYTES: &str = "application/octet-stream";

fn router(sessions: Sessions) -> Router {
    Router::new()
        .route("/pyodide/{*name}", get(pyodide_file))
        .route("/codemode/{*name}", get(js_file))
        .route("/run/{token}/", get(|_: Run| async { Html(PAGE) }))
        .route(
            "/run/{token}/settings",
            get(|Run(s): Run| async move { typed(JSON, s.settings_json.clone()) }),
        )
        .route(
            "/run/{token}/snapshot",
            get(|Run(s): Run| async move {
                match &s.snapshot {
                    Some(bytes) => Ok(typed(BYTES, bytes.to_vec())),
                    None => Err(refuse(404, "this run boots without a memory snapshot")),
                }
            }),
        )
        .route(
            "/run/{token}/entropy",
            get(|Run(s): Run, RawQuery(query): RawQuery| async move {
                entropy(&s, query.as_deref().unwrap_or_default()).map(|b| typed(BYTES, b))
            }),
        )
        .route(
            "/run/{token}/catalog",
            get(|Run(s): Run| async move { typed(JSON, s.tools.catalog_index()) }),
        )
        // The server's name as the body: a name is any string, and a body needs no escaping.
        .route(
            "/run/{token}/server-tools",
            post(
                |Run(s): Run, body: Bytes| async move { typed(JSON, s.tools.server_tools(&body)) },
            ),
        )
        .route("/run/{token}/tool", post(tool_call))
        .route(
            "/run/{token}/output",
            post(|Run(s): Run, body: Bytes| async move { output(&s, &body).map(|()| "") }),
        )
        .route(
            "/run/{token}/wheel-lock",
            get(|_: Run| async move { typed(JSON, wheelhouse().lock_json()) }),
        )
        .route(
            "/run/{token}/wheel-index",
            post(|_: Run, body: Bytes| async move {
                let directory = wheel_name(&body).and_then(|n| wheelhouse().directory(n));
                let index = directory.map(|d| typed(JSON, d.index_json().to_owned()));
                index.ok_or_else(no_wheel)
            }),
        )
        .route(
            "/run/{token}/wheel-files",
            post(|_: Run, body: Bytes| async move {
                let bytes = wheel_name(&body).and_then(|n| wheelhouse().unpacked(n));
                bytes.map(|b| typed(BYTES, b)).ok_or_else(no_wheel)
            }),
        )
        .fallback(|uri: Uri| async move {
            refuse(
                404,
                format!(
                    "nothing at {}: this server serves /pyodide/, /codemode/ and /run/<token>/",
                    uri.path()
                ),
            )
        })
        .method_not_allowed_fallback(|method: Method, uri: Uri| async move {
            refuse(405, format!("{method} is not allowed on {}", uri.path()))
        })
        // Bodies without a Content-Length (chunked) are cut off here, as they are read.
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(guard))
        .with_state(sessions)
}

/// Refuses a body whose Content-Length is over the cap before any of it is read, and keeps
/// Chromium from caching what is not a pinned file (entropy above all: each answer differs).
async fn guard(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > MAX_BODY as u64) {
        let message = format!("request body of {n} bytes is larger than {MAX_BODY}");
        return refuse(413, message).into_response();
    }
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// A refused request: its status and a sentence saying what is wrong.
struct Refusal(StatusCode, String);

fn refuse(status: u16, message: impl Into<String>) -> Refusal {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    Refusal(status, message.into())
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        tracing::debug!("parity http: {}: {}", self.0, self.1);
        (self.0, self.1).into_response()
    }
}

fn typed(content_type: &'static str, body: impl Into<Body>) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body.into()).into_response()
}

/// The run a `/run/{token}/…` request belongs to.
struct Run(Arc<Session>);

impl FromRequestParts<Sessions> for Run {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, sessions: &Sessions) -> Result<Run, Refusal> {
        let Path(token) = Path::<String>::from_request_parts(parts, sessions)
            .await
            .map_err(|e| refuse(400, e.body_text()))?;
        let session = sessions.lock().get(&token).cloned();
        session
            .map(Run)
            .ok_or_else(|| refuse(404, format!("no parity run with token {token:?}")))
    }
}

async fn pyodide_file(Path(name): Path<String>) -> Result<Response, Refusal> {
    let bytes = assets::pyodide_file(&name)
        .ok_or_else(|| refuse(404, format!("no pinned Pyodide file named {name:?}")))?;
    // Pinned files never change within a run: let Chromium cache them between pages.
    let headers = [
        (header::CONTENT_TYPE, content_type(&name)),
        (header::CACHE_CONTROL, "max-age=3600"),
    ];
    Ok((headers, bytes.into_owned()).into_response())
}

async fn js_file(Path(name): Path<String>) -> Result<Response, Refusal> {
    let text = assets::js_file(&name)
        .ok_or_else(|| refuse(404, format!("no embedded js/ file named {name:?}")))?;
    Ok(typed(content_type(&name), text))
}

/// Streaming compile wants `application/wasm`; module scripts want a JavaScript type (and are
/// always read as UTF-8, whatever the charset says).
fn content_type(name: &str) -> &'static str {
    mime_guess::from_path(name)
        .first_raw()
        .unwrap_or("application/octet-stream")
}

fn wheel_name(body: &[u8]) -> Option<&str> {
    std::str::from_utf8(body).ok()
}

fn no_wheel() -> Refusal {
    refuse(404, "no such wheel in the wheelhouse")
}

fn entropy(session: &Session, query: &str) -> Result<Vec<u8>, Refusal> {
    let n = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("n="))
        .and_then(|n| n.parse::<usize>().ok());
    match n {
        Some(n) if (1..=MAX_ENTROPY).contains(&n) => {
            let mut bytes = vec![0u8; n];
            session.entropy.lock().fill_bytes(&mut bytes);
            Ok(bytes)
        }
        _ => Err(refuse(
            400,
            format!("entropy wants ?n=N with N from 1 to {MAX_ENTROPY}, got {query:?}"),
        )),
    }
}

async fn tool_call(Run(session): Run, body: Bytes) -> Result<Response, Refusal> {
    let call: Value = serde_json::from_slice(&body)
        .map_err(|e| refuse(400, format!("tool call body is not JSON: {e}")))?;
    let field = |name: &str| call.get(name).and_then(Value::as_str).map(str::to_owned);
    let (Some(server), Some(tool), Some(arguments)) =
        (field("server"), field("tool"), field("arguments_json"))
    else {
        return Err(refuse(
            400,
            "tool call body must be {\"server\": str, \"tool\": str, \"arguments_json\": str}",
        ));
    };
    let envelope = session
        .tools
        .call_envelope(
            server.as_bytes(),
            tool.as_bytes(),
            arguments.as_bytes(),
            &session.budget,
        )
        .await;
    Ok(typed(JSON, envelope))
}

/// Output batches: repeated `[stream: u8][length: u32 LE][bytes]`, stream 1 stdout, 2 stderr.
fn output(session: &Session, mut body: &[u8]) -> Result<(), Refusal> {
    while !body.is_empty() {
        if body.len() < 5 {
            return Err(refuse(400, "output batch ends inside a chunk header"));
        }
        let stream = match body[0] {
            1 => Stream::Stdout,
            2 => Stream::Stderr,
            other => return Err(refuse(400, format!("no output stream {other}"))),
        };
        let len = u32::from_le_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let Some(bytes) = body.get(5..5 + len) else {
            return Err(refuse(400, "output batch ends inside a chunk"));
        };
        session.output.write(stream, bytes);
        body = &body[5 + len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn settings() -> RunSettings {
        RunSettings {
            limits: Limits {
                max_output: 4,
                ..Limits::default()
            },
            seed: 7,
            snapshot: None,
        }
    }

    #[test]
    fn entropy_is_the_v8_hosts_seeded_stream_and_checks_its_size() {
        let session = Session::new(&settings()).unwrap();
        let mut want = [0u8; 8];
        engine::entropy_source(Some(7))
            .unwrap()
            .fill_bytes(&mut want);
        assert_eq!(entropy(&session, "n=8").ok().unwrap(), want);
        for bad in ["n=0", "n=65537", ""] {
            assert_eq!(entropy(&session, bad).err().unwrap().0, 400, "{bad}");
        }
    }

    #[test]
    fn output_batches_go_through_the_shared_cap() {
        let session = Session::new(&settings()).unwrap();
        let batch = [
            &[1u8, 3, 0, 0, 0][..],
            b"abc",
            &[2, 1, 0, 0, 0],
            b"e",
            &[1, 3, 0, 0, 0],
            b"def",
        ]
        .concat();
        assert!(output(&session, &batch).is_ok());
        let captured = session.output.captured();
        assert!(captured
            .stdout
            .starts_with("abcd\n[mcp-code-mode: stdout truncated: 2 more bytes"));
        assert_eq!(captured.stderr, "e");
        assert_eq!(
            output(&session, &[1, 9, 0, 0, 0, b'x']).err().unwrap().0,
            400
        );
        assert_eq!(output(&session, &[3, 0, 0, 0, 0]).err().unwrap().0, 400);
    }

    /// One request over a fresh connection; the whole answer (head and body) as text.
    async fn exchange(server: &Server, request: &str) -> String {
        let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn serves_the_page_its_files_and_refuses_what_it_must() {
        let server = Server::start().await.unwrap();
        assert!(server.addr.ip().is_loopback());
        let session = server.open_session(&settings()).unwrap();
        let run = format!("/run/{}", session.token);
        let get_request =
            |path: &str| format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");

        let page = exchange(&server, &get_request(&format!("{run}/"))).await;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(
            page.contains("content-type: text/html; charset=utf-8\r\n"),
            "{page}"
        );
        assert!(page.contains("cache-control: no-store\r\n"), "{page}");
        assert!(page.ends_with(PAGE), "{page}");

        // Chromium compiles wasm as it streams in only when it is served as application/wasm.
        let wasm =
            "HEAD /pyodide/pyodide.asm.wasm HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
        let wasm = exchange(&server, wasm).await;
        assert!(wasm.starts_with("HTTP/1.1 200"), "{wasm}");
        assert!(
            wasm.contains("content-type: application/wasm\r\n"),
            "{wasm}"
        );
        assert!(wasm.contains("cache-control: max-age=3600\r\n"), "{wasm}");

        let script = exchange(&server, &get_request("/codemode/main_browser.js")).await;
        assert!(
            script.contains("content-type: text/javascript\r\n"),
            "{script}"
        );

        let entropy = exchange(&server, &get_request(&format!("{run}/entropy?n=70000"))).await;
        assert!(entropy.starts_with("HTTP/1.1 400"), "{entropy}");

        // A body over the cap is refused from its Content-Length, before a byte of it is read.
        let huge = format!(
            "POST {run}/output HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            MAX_BODY + 1
        );
        let refused = exchange(&server, &huge).await;
        assert!(refused.starts_with("HTTP/1.1 413"), "{refused}");
        assert!(
            refused.ends_with(&format!("larger than {MAX_BODY}")),
            "{refused}"
        );

        let wrong_method = exchange(&server, &get_request(&format!("{run}/output"))).await;
        assert!(wrong_method.starts_with("HTTP/1.1 405"), "{wrong_method}");
        assert!(wrong_method.ends_with(&format!("GET is not allowed on {run}/output")));
        let nothing = exchange(&server, &get_request("/etc/passwd")).await;
        assert!(nothing.starts_with("HTTP/1.1 404"), "{nothing}");
        let closed = exchange(&server, &get_request("/run/0123/settings")).await;
        assert!(closed.starts_with("HTTP/1.1 404"), "{closed}");
        server.close_session(&session);
        let closed = exchange(&server, &get_request(&format!("{run}/settings"))).await;
        assert!(closed.contains("no parity run with token"), "{closed}");
    }
}
