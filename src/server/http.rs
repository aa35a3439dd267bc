//! MCP over streamable HTTP: rmcp's `StreamableHttpService` at `/mcp`, behind bearer-token
//! authentication, a cap on open sessions and an access log; `/healthz` and `/readyz` beside it.
//!
//! **Invariants:** a non-loopback address is never served without a bearer token; the token and
//! session ids never reach a log line or an error; on SIGTERM/SIGINT the server stops accepting,
//! lets running executions finish (up to the grace period), then closes every session.

use super::{CodeModeServer, ServeOptions};
use crate::engine::Pool;
use crate::hub::{Hub, ServerState};
use anyhow::Context as _;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::StreamExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How `serve --http` listens (see the README's "Over HTTP").
#[derive(Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// No sessions: every request stands alone (for replicas that share nothing).
    pub stateless: bool,
    pub auth_token: Option<AuthToken>,
    /// Extra `Host` values accepted besides the loopback names (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted; a request with any other `Origin` is refused.
    pub allowed_origins: Vec<String>,
    pub max_sessions: usize,
    /// A session nobody used for this long is closed.
    pub session_idle: Duration,
    /// How long a shutdown waits for running executions before it closes the sessions.
    pub grace: Duration,
}

/// The HTTP endpoint's MCP path.
pub const MCP_PATH: &str = "/mcp";
/// The largest request body accepted (an `execute_code` script and its JSON-RPC envelope).
pub const MAX_REQUEST_BODY: usize = 16 << 20;

/// Pages served from this machine (any port) may call: a rebinding page's origin is foreign.
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// A bearer token; its `Debug` never shows it.
#[derive(Clone)]
pub struct AuthToken(Arc<[u8]>);

impl AuthToken {
    /// The token as given (a file's first line, or an environment variable), checked for
    /// something worth calling a secret.
    pub fn new(text: &str, from: &str) -> anyhow::Result<Self> {
        let token = text.trim();
        anyhow::ensure!(!token.is_empty(), "the bearer token from {from} is empty");
        anyhow::ensure!(
            token.len() >= 16,
            "the bearer token from {from} is {} characters; use at least 16 (say, `openssl rand -hex 32`)",
            token.len()
        );
        anyhow::ensure!(
            token.bytes().all(|b| b.is_ascii_graphic()),
            "the bearer token from {from} has spaces or control characters; HTTP headers cannot carry them"
        );
        Ok(Self(token.as_bytes().into()))
    }

    /// Whether an `Authorization` header carries this token, compared in constant time (only the
    /// length can be learnt from timing).
    fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(given) = authorization
            .map(HeaderValue::as_bytes)
            .and_then(|v| v.strip_prefix(b"Bearer "))
        else {
            return false;
        };
        subtle::ConstantTimeEq::ct_eq(given, &self.0[..]).into()
    }
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthToken(<redacted>)")
    }
}

impl HttpOptions {
    /// Refuses what would be unsafe to serve: a non-loopback address without a token.
    pub fn check(&self) -> anyhow::Result<()> {
        if !self.addr.ip().is_loopback() && self.auth_token.is_none() {
            anyhow::bail!(
                "serving MCP on {} (not a loopback address) needs a bearer token: \
                 --auth-token-file PATH or $MCP_CODE_MODE_AUTH_TOKEN",
                self.addr
            );
        }
        anyhow::ensure!(self.max_sessions > 0, "--max-sessions must be at least 1");
        Ok(())
    }

    fn rmcp_config(&self, shutdown: CancellationToken) -> StreamableHttpServerConfig {
        let mut config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(!self.stateless)
            .with_json_response(self.stateless)
            .with_cancellation_token(shutdown)
            .with_max_request_body_bytes(MAX_REQUEST_BODY)
            .with_allowed_origins(
                LOOPBACK_ORIGINS
                    .map(String::from)
                    .into_iter()
                    .chain(self.allowed_origins.clone()),
            )
            .enforce_origin_validation();
        if self.addr.ip().is_loopback() || !self.allowed_hosts.is_empty() {
            let loopback = ["localhost", "127.0.0.1", "::1"].map(String::from);
            config =
                config.with_allowed_hosts(loopback.into_iter().chain(self.allowed_hosts.clone()));
        } else {
            // Reached from other machines under names we cannot know: the bearer token, which a
            // rebinding page does not have, is the protection here.
            config = config.disable_allowed_hosts();
        }
        config
    }
}

struct Front {
    /// Every POST whose response is not fully sent yet: what a shutdown waits for.
    in_flight: TaskTracker,
    hub: Arc<Hub>,
    pool: Arc<Pool>,
    sessions: Arc<LocalSessionManager>,
    options: HttpOptions,
}

/// Serves MCP over HTTP until SIGTERM or SIGINT, then drains (see the module's invariants) and
/// shuts the hub down.
pub async fn serve_http(
    hub: Arc<Hub>,
    pool: Arc<Pool>,
    options: ServeOptions,
    http: HttpOptions,
) -> anyhow::Result<()> {
    http.check()?;
    let listener = tokio::net::TcpListener::bind(http.addr)
        .await
        .with_context(|| format!("cannot listen on {}", http.addr))?;
    let addr = listener.local_addr()?;
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(http.session_idle);
    let sessions = Arc::new(sessions);
    let shutdown = CancellationToken::new();
    let mut server = CodeModeServer::new(hub.clone(), pool.clone(), options);
    if http.stateless && server.no_sessions.is_none() {
        server.no_sessions = Some(
            "this server runs stateless HTTP (--stateless), where no request knows the one before",
        );
    }
    let draining = server.draining.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(server.for_new_session()),
        sessions.clone(),
        http.rmcp_config(shutdown.clone()),
    );
    let in_flight = TaskTracker::new();
    let front = Arc::new(Front {
        in_flight: in_flight.clone(),
        hub: hub.clone(),
        pool,
        sessions,
        options: http.clone(),
    });
    let guarded = Router::new()
        .nest_service(MCP_PATH, mcp)
        .layer(axum::middleware::from_fn_with_state(front.clone(), admit));
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .merge(guarded)
        .layer(axum::middleware::from_fn(access_log))
        .with_state(front);
    eprintln!("mcp-code-mode: serving MCP at http://{addr}{MCP_PATH}");

    let stop_accepting = CancellationToken::new();
    let drain = {
        let stop_accepting = stop_accepting.clone();
        let shutdown = shutdown.clone();
        let grace = http.grace;
        tokio::spawn(async move {
            let signal = stop_signal().await;
            tracing::info!("{signal}: no new connections; waiting for running executions");
            stop_accepting.cancel();
            draining.cancel();
            in_flight.close();
            if tokio::time::timeout(grace, in_flight.wait()).await.is_err() {
                tracing::warn!(
                    "{} requests still running after the {grace:?} grace period: stopping them",
                    in_flight.len()
                );
            }
            shutdown.cancel();
        })
    };
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop_accepting.cancelled_owned())
    .await;
    // Open event streams end once the sessions close; a stream that does not is cut off here.
    shutdown.cancel();
    drain.abort();
    hub.shutdown().await;
    served.context("the HTTP server failed")
}

async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Bearer-token check and the session cap, before rmcp sees the request.
async fn admit(State(front): State<Arc<Front>>, request: Request, next: Next) -> Response {
    if let Some(token) = &front.options.auth_token {
        if !token.admits(request.headers().get(header::AUTHORIZATION)) {
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "a bearer token is required: send `Authorization: Bearer <token>`\n",
            )
                .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer realm="mcp-code-mode""#),
            );
            return response;
        }
    }
    if opens_session(&front.options, &request)
        && front.sessions.sessions.read().await.len() >= front.options.max_sessions
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many open sessions (--max-sessions {}): close one (HTTP DELETE with its Mcp-Session-Id) or retry later\n",
                front.options.max_sessions
            ),
        )
            .into_response();
    }
    if request.method() != Method::POST {
        // A GET is an event stream that lasts as long as its session: a shutdown closes it.
        return next.run(request).await;
    }
    // Held until the response's last byte is sent (or the client goes away): a response
    // produced after the execution ends still reaches its client during a shutdown.
    let held = front.in_flight.token();
    next.run(request).await.map(|body| {
        let stream = body.into_data_stream().map(move |chunk| {
            let _ = &held;
            chunk
        });
        axum::body::Body::from_stream(stream)
    })
}

/// A POST with no session id under a revision that has sessions: an `initialize`, which would
/// open one.
fn opens_session(options: &HttpOptions, request: &Request) -> bool {
    let headers = request.headers();
    let revision = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    !options.stateless
        && request.method() == Method::POST
        && !headers.contains_key("mcp-session-id")
        && revision.is_none_or(|r| r < "2026-07-28")
}

/// 200 once no downstream server is still in its first start and the first sandbox was ready;
/// 503 with what is missing otherwise. Counts only: probes need no names.
async fn ready(State(front): State<Arc<Front>>) -> Response {
    let starting = front
        .hub
        .status()
        .iter()
        .filter(|s| s.state == ServerState::Starting)
        .count();
    let sandboxes = front.pool.ready_count();
    let body = serde_json::json!({
        "servers_starting": starting,
        "sandboxes_ready": sandboxes,
    });
    // Not "a spare is waiting": a balancer must not drop a replica for being busy.
    let status = if starting == 0 && front.pool.has_come_up() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// One line per request on stderr: who, what, the status and how long it took. Never headers
/// (they carry the token and the session id).
async fn access_log(request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.to_string())
        .unwrap_or_default();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        target: "mcp_code_mode::access",
        "{peer} {method} {path} {} {:.1} ms",
        response.status().as_u16(),
        started.elapsed().as_secs_f64() * 1e3
    );
    response
}
