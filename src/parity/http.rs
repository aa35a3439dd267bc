//! The loopback HTTP server behind the browser host of a parity run.
//!
//! It serves Chromium exactly the bytes the V8 host boots from (the pinned Pyodide files and our
//! `js/` sources, from `crate::assets`) and, per run, the endpoints js/main_browser.js uses in
//! place of the V8 host's ops: settings, seeded entropy, the tool catalogue, tool calls (through
//! the same `ToolBridge` as `op_tools_call`), output (through the same `SharedOutput` cap as
//! `op_output_write`) and the memory snapshot.
//!
//! A deliberately small HTTP/1.1 server (keep-alive, Content-Length bodies, no chunked requests):
//! its only client is our own page on 127.0.0.1, and it must not pull a web framework into the
//! binary. Every bad request gets a status and a sentence saying what is wrong.

use crate::assets;
use crate::bridge::memory::MemoryBudget;
use crate::bridge::{NoTools, SharedOutput, Stream, ToolBridge};
use crate::engine::{self, Limits, Snapshot};
use parking_lot::Mutex;
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Largest request body accepted (one output batch can carry a single huge `print`).
const MAX_BODY: usize = 256 << 20;
/// Largest request head (request line plus headers).
const MAX_HEAD: usize = 64 << 10;
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
        let settings_json = engine::boot_settings(
            &settings.limits,
            Some(settings.seed),
            settings.snapshot.is_some(),
            false,
        )
        .to_string();
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

/// The running server. Dropping it stops accepting connections.
pub struct Server {
    addr: SocketAddr,
    sessions: Sessions,
    accept: JoinHandle<()>,
}

impl Server {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start() -> std::io::Result<Server> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let sessions: Sessions = Arc::default();
        let accept_sessions = sessions.clone();
        let accept = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let sessions = accept_sessions.clone();
                        tokio::spawn(async move {
                            if let Err(e) = serve_connection(stream, sessions).await {
                                tracing::debug!("parity http: connection ended: {e}");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!("parity http: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        });
        tracing::debug!("parity http: serving on http://{addr}/");
        Ok(Server {
            addr,
            sessions,
            accept,
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

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

struct Request {
    method: String,
    path: String,
    query: String,
    body: Vec<u8>,
    close: bool,
}

struct Response {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// Pinned files never change within a run: let Chromium cache them between pages.
    cacheable: bool,
}

impl Response {
    fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status: 200,
            content_type,
            body: body.into(),
            cacheable: false,
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: message.into().into_bytes(),
            cacheable: false,
        }
    }
}

async fn serve_connection(stream: TcpStream, sessions: Sessions) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let request = match read_request(&mut reader).await? {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(()), // the client closed the connection between requests
            Err(response) => {
                write_response(&mut write, &response, true).await?;
                return Ok(());
            }
        };
        let close = request.close;
        let response = route(&request, &sessions).await;
        if response.status >= 400 {
            tracing::debug!(
                "parity http: {} {} -> {} {}",
                request.method,
                request.path,
                response.status,
                String::from_utf8_lossy(&response.body)
            );
        }
        write_response(&mut write, &response, close).await?;
        if close {
            return Ok(());
        }
    }
}

/// Reads one request. `Ok(Err(response))` is a malformed request, answered and then closed.
async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Result<Option<Request>, Response>> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = reader.read_until(b'\n', &mut head).await?;
        if n == 0 {
            return Ok(if before == 0 {
                Ok(None)
            } else {
                Err(Response::error(400, "the request ended inside its head"))
            });
        }
        if head.len() > MAX_HEAD {
            return Ok(Err(Response::error(431, "request head larger than 64 KiB")));
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
        if head == b"\r\n" || head == b"\n" {
            head.clear(); // tolerated: a stray blank line between requests
        }
    }
    let Ok(head) = std::str::from_utf8(&head) else {
        return Ok(Err(Response::error(400, "the request head is not UTF-8")));
    };
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Ok(Err(Response::error(
            400,
            format!("malformed request line {request_line:?}"),
        )));
    };
    let mut content_length = 0usize;
    let mut close = version == "HTTP/1.0";
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Ok(Err(Response::error(
                400,
                format!("malformed header line {line:?}"),
            )));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => match value.parse() {
                Ok(n) => content_length = n,
                Err(_) => {
                    return Ok(Err(Response::error(
                        400,
                        format!("Content-Length {value:?} is not a number"),
                    )))
                }
            },
            "transfer-encoding" => {
                return Ok(Err(Response::error(
                    411,
                    "chunked request bodies are not supported: send Content-Length",
                )))
            }
            "connection" => close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    if content_length > MAX_BODY {
        return Ok(Err(Response::error(
            413,
            format!("request body of {content_length} bytes is larger than {MAX_BODY}"),
        )));
    }
    let mut body = vec![0u8; content_length];
    reader.read_exact(&mut body).await?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(Ok(Some(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        body,
        close,
    })))
}

async fn write_response<W: tokio::io::AsyncWrite + Unpin>(
    write: &mut W,
    response: &Response,
    close: bool,
) -> std::io::Result<()> {
    let reason = match response.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: {}\r\nconnection: {}\r\n\r\n",
        response.status,
        response.content_type,
        response.body.len(),
        if response.cacheable { "max-age=3600" } else { "no-store" },
        if close { "close" } else { "keep-alive" },
    );
    write.write_all(head.as_bytes()).await?;
    write.write_all(&response.body).await?;
    write.flush().await
}

/// The content type a pinned file must be served with (wasm streaming and module scripts check it).
fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("zip") => "application/zip",
        Some("py") => "text/x-python; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The page of one run: it only loads main_browser.js, which does the rest.
const PAGE: &str =
    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mcp-code-mode parity</title>\n\
<script type=\"module\" src=\"/codemode/main_browser.js\"></script></head><body></body></html>\n";

async fn route(request: &Request, sessions: &Sessions) -> Response {
    let method = request.method.as_str();
    let path = request.path.as_str();
    if let Some(name) = path.strip_prefix("/pyodide/") {
        if method != "GET" {
            return Response::error(405, format!("{path} is read with GET"));
        }
        return match assets::pyodide_file(name) {
            Some(bytes) => Response {
                cacheable: true,
                ..Response::ok(content_type(name), bytes)
            },
            None => Response::error(404, format!("no pinned Pyodide file named {name:?}")),
        };
    }
    if let Some(name) = path.strip_prefix("/codemode/") {
        if method != "GET" {
            return Response::error(405, format!("{path} is read with GET"));
        }
        return match assets::js_file(name) {
            Some(text) => Response::ok(content_type(name), text),
            None => Response::error(404, format!("no embedded js/ file named {name:?}")),
        };
    }
    let Some(rest) = path.strip_prefix("/run/") else {
        return Response::error(
            404,
            format!(
                "nothing at {path}: this server serves /pyodide/, /codemode/ and /run/<token>/"
            ),
        );
    };
    let (token, endpoint) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(session) = sessions.lock().get(token).cloned() else {
        return Response::error(404, format!("no parity run with token {token:?}"));
    };
    let house = mcp_code_mode_sandbox::wheels::wheelhouse();
    let wheel_name = std::str::from_utf8(&request.body).ok();
    match (method, endpoint) {
        ("GET", "") => Response::ok("text/html; charset=utf-8", PAGE),
        ("GET", "settings") => Response::ok("application/json", session.settings_json.clone()),
        ("GET", "snapshot") => match &session.snapshot {
            Some(bytes) => Response::ok("application/octet-stream", bytes.as_slice()),
            None => Response::error(404, "this run boots without a memory snapshot"),
        },
        ("GET", "entropy") => entropy(&session, &request.query),
        ("GET", "catalog") => Response::ok("application/json", session.tools.catalog_index()),
        // The server's name as the body: a name is any string, and a body needs no escaping.
        ("POST", "server-tools") => Response::ok(
            "application/json",
            session.tools.server_tools(&request.body),
        ),
        ("POST", "tool") => tool_call(&session, &request.body).await,
        ("GET", "wheel-lock") => Response::ok("application/json", house.lock_json()),
        ("POST", "wheel-index") => match wheel_name.and_then(|n| house.directory(n)) {
            Some(directory) => Response::ok("application/json", directory.index_json().to_owned()),
            None => Response::error(404, "no such wheel in the wheelhouse"),
        },
        ("POST", "wheel-files") => match wheel_name.and_then(|n| house.unpacked(n)) {
            Some(bytes) => Response::ok("application/octet-stream", bytes),
            None => Response::error(404, "no such wheel in the wheelhouse"),
        },
        ("POST", "output") => output(&session, &request.body),
        (
            _,
            "" | "settings" | "snapshot" | "entropy" | "catalog" | "server-tools" | "tool"
            | "output" | "wheel-lock" | "wheel-index" | "wheel-files",
        ) => Response::error(405, format!("{method} is not allowed on {path}")),
        _ => Response::error(404, format!("no endpoint {endpoint:?} in a parity run")),
    }
}

fn entropy(session: &Session, query: &str) -> Response {
    let n = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("n="))
        .and_then(|n| n.parse::<usize>().ok());
    match n {
        Some(n) if (1..=MAX_ENTROPY).contains(&n) => {
            let mut bytes = vec![0u8; n];
            session.entropy.lock().fill_bytes(&mut bytes);
            Response::ok("application/octet-stream", bytes)
        }
        _ => Response::error(
            400,
            format!("entropy wants ?n=N with N from 1 to {MAX_ENTROPY}, got {query:?}"),
        ),
    }
}

async fn tool_call(session: &Session, body: &[u8]) -> Response {
    let call: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Response::error(400, format!("tool call body is not JSON: {e}")),
    };
    let field = |name: &str| call.get(name).and_then(Value::as_str).map(str::to_owned);
    let (Some(server), Some(tool), Some(arguments)) =
        (field("server"), field("tool"), field("arguments_json"))
    else {
        return Response::error(
            400,
            "tool call body must be {\"server\": str, \"tool\": str, \"arguments_json\": str}",
        );
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
    Response::ok("application/json", envelope)
}

/// Output batches: repeated `[stream: u8][length: u32 LE][bytes]`, stream 1 stdout, 2 stderr.
fn output(session: &Session, mut body: &[u8]) -> Response {
    while !body.is_empty() {
        if body.len() < 5 {
            return Response::error(400, "output batch ends inside a chunk header");
        }
        let stream = match body[0] {
            1 => Stream::Stdout,
            2 => Stream::Stderr,
            other => return Response::error(400, format!("no output stream {other}")),
        };
        let len = u32::from_le_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let Some(bytes) = body.get(5..5 + len) else {
            return Response::error(400, "output batch ends inside a chunk");
        };
        session.output.write(stream, bytes);
        body = &body[5 + len..];
    }
    Response::ok("text/plain; charset=utf-8", "")
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn parses_keep_alive_requests_and_rejects_chunked_ones() {
        let raw = b"POST /a?x=1 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nConnection: close\r\n\r\n";
        let mut reader = BufReader::new(&raw[..]);
        let first = read_request(&mut reader)
            .await
            .unwrap()
            .ok()
            .flatten()
            .unwrap();
        assert_eq!(
            (
                first.method.as_str(),
                first.path.as_str(),
                first.query.as_str()
            ),
            ("POST", "/a", "x=1")
        );
        assert_eq!((first.body.as_slice(), first.close), (&b"abc"[..], false));
        let second = read_request(&mut reader)
            .await
            .unwrap()
            .ok()
            .flatten()
            .unwrap();
        assert!(second.close);
        assert!(read_request(&mut reader)
            .await
            .unwrap()
            .ok()
            .unwrap()
            .is_none());

        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let rejected = read_request(&mut BufReader::new(&chunked[..]))
            .await
            .unwrap();
        assert_eq!(rejected.err().map(|r| r.status), Some(411));
    }

    #[test]
    fn entropy_is_the_v8_hosts_seeded_stream_and_checks_its_size() {
        let session = Session::new(&settings()).unwrap();
        let mut want = [0u8; 8];
        engine::entropy_source(Some(7))
            .unwrap()
            .fill_bytes(&mut want);
        assert_eq!(entropy(&session, "n=8").body, want);
        assert_eq!(entropy(&session, "n=0").status, 400);
        assert_eq!(entropy(&session, "n=65537").status, 400);
        assert_eq!(entropy(&session, "").status, 400);
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
        assert_eq!(output(&session, &batch).status, 200);
        let captured = session.output.captured();
        assert!(captured
            .stdout
            .starts_with("abcd\n[mcp-code-mode: stdout truncated: 2 more bytes"));
        assert_eq!(captured.stderr, "e");
        assert_eq!(output(&session, &[1, 9, 0, 0, 0, b'x']).status, 400);
        assert_eq!(output(&session, &[3, 0, 0, 0, 0]).status, 400);
    }
}
