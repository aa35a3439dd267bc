//! remote — downstream servers over streamable HTTP (a `"url"` in the config).
//!
//! rmcp's client transport runs on a reqwest client of ours, because rmcp bounds sizes but not
//! time: connect and read timeouts, no redirects (a token must not follow one to another host),
//! a bounded reconnect policy. Every JSON body and SSE event the server sends passes through the
//! same checks as a stdio server's lines ([`wire::Checker`]), so an unreadable or malformed
//! answer fails the call it answers at once instead of leaving it pending, and tool lists are
//! cleaned the same way. Configured headers go with every request and are never logged; the
//! URL is shown without its query (which may carry a key).
//!
//! **Invariant:** nothing a remote server sends reaches rmcp unchecked, and no configured header
//! value or token reaches a log line or an error message.

use super::wire::{Checked, Checker};
use crate::config::HttpServer;
use futures::{stream, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Longest a TCP (and TLS) connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Reconnections of an interrupted event stream before the connection counts as lost.
const MAX_RECONNECTS: usize = 5;
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(30);
/// The `retry:` an event may ask for: a server cannot make us reconnect in a tight loop, nor
/// wait for ever.
const MIN_RETRY_MS: u64 = 100;
const MAX_RETRY_MS: u64 = 30_000;
/// Largest JSON body or SSE event taken from a server: the stdio guard's line limit.
const MAX_MESSAGE: usize = super::wire::MAX_LINE;

/// The URL as messages show it: scheme, host, port and path, never a query or user info.
pub(crate) fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default(),
            u.path()
        ),
        Err(_) => "(an invalid URL)".to_owned(),
    }
}

/// reqwest with rustls needs a crypto provider installed once per process.
fn install_tls_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Fails only if another provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The HTTP client for one server: `call_timeout` is the server's `timeout_s`, which a quiet
/// response stream may last (plus a margin) before it counts as stalled.
pub(crate) fn http_client(call_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    install_tls_provider();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(call_timeout + Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .user_agent(concat!("mcp-code-mode/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// A configured header that cannot be sent (the config checks them first): named, never its
/// value (nor are the sources, http's errors, about the value's bytes).
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("header \"{name}\" is not a valid header name")]
    Name {
        name: String,
        #[source]
        source: http::header::InvalidHeaderName,
    },
    #[error("header \"{name}\" has a value that is not a valid header value")]
    Value {
        name: String,
        #[source]
        source: http::header::InvalidHeaderValue,
    },
}

/// rmcp's transport settings for `server`: its headers, our limits and reconnect policy.
pub(crate) fn transport_config(
    server: &HttpServer,
) -> Result<StreamableHttpClientTransportConfig, HeaderError> {
    let mut headers = HashMap::new();
    for (name, value) in &server.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|source| HeaderError::Name {
            name: name.clone(),
            source,
        })?;
        let mut value = HeaderValue::from_str(value).map_err(|source| HeaderError::Value {
            name: name.to_string(),
            source,
        })?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let mut backoff = ExponentialBackoff::default();
    backoff.max_times = Some(MAX_RECONNECTS);
    backoff.max_delay = Some(MAX_RECONNECT_DELAY);
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
        .custom_headers(headers)
        .max_sse_event_size(MAX_MESSAGE)
        .max_json_response_size(MAX_MESSAGE);
    config.retry_config = Arc::new(backoff);
    Ok(config)
}

/// A reqwest client whose answers pass through a [`Checker`] before rmcp reads them.
#[derive(Clone)]
pub(crate) struct Guarded {
    http: reqwest::Client,
    checker: Checker,
}

impl Guarded {
    pub fn new(name: &str, http: reqwest::Client) -> Self {
        Self {
            http,
            checker: Checker::new(name),
        }
    }

    /// A whole JSON body: checked as one message. `None`: nothing to hand on.
    fn check_json(&self, message: ServerJsonRpcMessage) -> Option<ServerJsonRpcMessage> {
        let bytes = serde_json::to_vec(&message).ok()?;
        match self.checker.incoming(&bytes) {
            Checked::Forward(checked) if checked == bytes => Some(message),
            Checked::Forward(checked) => serde_json::from_slice(&checked).ok(),
            Checked::Reply(errors) => errors
                .into_iter()
                .next()
                .and_then(|e| serde_json::from_value(e).ok()),
            Checked::ListChanged => Some(message),
            Checked::Drop => None,
        }
    }

    /// An event stream: each event's data checked as one message.
    fn check_stream(
        &self,
        events: futures::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>,
    ) -> futures::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>> {
        let checker = self.checker.clone();
        events
            .flat_map(move |event| {
                let events = match event {
                    Ok(event) => check_event(&checker, event),
                    Err(e) => vec![Err(e)],
                };
                stream::iter(events)
            })
            .boxed()
    }
}

fn check_event(
    checker: &Checker,
    mut event: sse_stream::Sse,
) -> Vec<Result<sse_stream::Sse, SseError>> {
    event.retry = event.retry.map(|ms| ms.clamp(MIN_RETRY_MS, MAX_RETRY_MS));
    let Some(data) = event.data.take() else {
        return vec![Ok(event)];
    };
    // An event with empty data only primes the stream (it carries an id to resume from).
    if data.trim().is_empty() {
        event.data = Some(data);
        return vec![Ok(event)];
    }
    match checker.incoming(data.as_bytes()) {
        Checked::Forward(checked) => {
            event.data = Some(String::from_utf8(checked).unwrap_or(data));
            vec![Ok(event)]
        }
        Checked::ListChanged => {
            event.data = Some(data);
            vec![Ok(event)]
        }
        // What was unreadable: an error response for each request it failed to answer, the
        // last carrying the event's id, so a resumed stream starts after it.
        Checked::Reply(errors) => {
            let n = errors.len();
            errors
                .into_iter()
                .enumerate()
                .map(|(i, error)| {
                    Ok(sse_stream::Sse {
                        event: None,
                        data: Some(error.to_string()),
                        id: (i + 1 == n).then(|| event.id.clone()).flatten(),
                        retry: event.retry,
                    })
                })
                .collect()
        }
        Checked::Drop => vec![Ok(event)],
    }
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;
type StreamResult = Result<
    futures::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>,
    StreamableHttpError<reqwest::Error>,
>;

// Every method is overridden: rmcp's defaults for the `*_with_*` ones drop the size limits.
impl StreamableHttpClient for Guarded {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> PostResult {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult {
        if let Ok(sent) = serde_json::to_value(&message) {
            self.checker.outgoing(&sent);
        }
        let response = self
            .http
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        Ok(match response {
            StreamableHttpPostResponse::Json(message, session) => match self.check_json(message) {
                Some(message) => StreamableHttpPostResponse::Json(message, session),
                None => StreamableHttpPostResponse::Accepted,
            },
            StreamableHttpPostResponse::Sse(events, session) => {
                StreamableHttpPostResponse::Sse(self.check_stream(events), session)
            }
            // Accepted, and whatever later versions of rmcp add.
            other => other,
        })
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> StreamResult {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> StreamResult {
        let events = self
            .http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(self.check_stream(events))
    }
}

/// Why connecting to `server` failed, in words a user can act on: the cause found in the error's
/// chain (refused, name not found, TLS, timeout, authorization), never a header value.
pub(crate) fn describe_failure(
    server_name: &str,
    server: &HttpServer,
    error: &(dyn std::error::Error + 'static),
    auth_required: bool,
) -> String {
    let url = shown_url(&server.url);
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        chain.push(e);
        // Two of rmcp's errors hold the cause without naming it their source.
        next = if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
            e.downcast_ref::<rmcp::service::ClientInitializeError>()
        {
            Some(error)
        } else if let Some(StreamableHttpError::Client(inner)) =
            e.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            Some(inner)
        } else {
            e.source()
        };
    }
    let text = chain
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ");
    if auth_required {
        let has_authorization = server
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"));
        return if has_authorization {
            format!(
                "{url} refused the configured credential (HTTP 401): check the token headers.Authorization is set from"
            )
        } else {
            format!(
                "{url} requires authorization (HTTP 401): give a token in the config (\"headers\": {{\"Authorization\": \"Bearer ${{TOKEN}}\"}}, TOKEN from the environment or .env), or, if it uses OAuth, run `mcp-code-mode login {server_name}`"
            )
        };
    }
    if let Some(refusal) = chain.iter().find_map(|e| {
        e.downcast_ref::<rmcp::transport::streamable_http_client::InsufficientScopeError>()
    }) {
        return format!(
            "{url} refused the token for lack of scope (HTTP 403; {})",
            super::server::wanted_scope(&refusal.www_authenticate_header)
        );
    }
    let reqwest_error = chain
        .iter()
        .find_map(|e| e.downcast_ref::<reqwest::Error>());
    let tls = chain
        .iter()
        .find_map(|e| rustls_error(*e))
        .map(|e| e.to_string())
        .or_else(|| {
            let lower = text.to_ascii_lowercase();
            (lower.contains("tls") || lower.contains("certificate") || lower.contains("handshake"))
                .then(|| last_words(&text))
        });
    if let Some(tls) = tls {
        return format!("cannot connect to {url}: the TLS handshake failed ({tls})");
    }
    if let Some(e) = reqwest_error {
        if e.is_timeout() {
            return format!("{url} did not answer in time ({})", last_words(&text));
        }
        if e.is_connect() {
            let lower = text.to_ascii_lowercase();
            let why = if lower.contains("refused") {
                "the connection was refused (is the server running, and is the port right?)"
                    .to_owned()
            } else if lower.contains("dns")
                || lower.contains("resolve")
                || lower.contains("name or service")
            {
                "its host name could not be resolved".to_owned()
            } else {
                last_words(&text)
            };
            return format!("cannot connect to {url}: {why}");
        }
    }
    // rmcp's wrappers name Rust types; the innermost cause says what happened.
    let innermost = chain.last().map(|e| e.to_string()).unwrap_or_default();
    format!("{url}: {}", strip_urls(&innermost))
}

/// rustls's error, which arrives wrapped in io::Errors (whose `source` skips what they wrap).
fn rustls_error<'a>(mut e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    loop {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        e = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
}

/// The innermost part of an error chain's text: the cause, without the wrappers' context.
fn last_words(text: &str) -> String {
    strip_urls(text.rsplit(": ").next().unwrap_or(text))
}

/// reqwest names the URL it was sending to, query and all: replaced by what [`shown_url`] shows.
pub(crate) fn strip_urls(text: &str) -> String {
    static URL: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"https?://[^\s)]+").expect("a valid regex"));
    URL.replace_all(text, |c: &regex::Captures| shown_url(&c[0]))
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Transport;

    #[test]
    fn a_header_that_cannot_be_sent_is_told_by_its_part_never_its_value() {
        let (_dir, config) = crate::hub::tests::config(
            serde_json::json!({"remote": {"url": "http://127.0.0.1:9/mcp"}}),
        );
        let Transport::Http(server) = &config.servers[0].transport else {
            unreachable!("a remote server")
        };
        let mut bad_name = server.clone();
        bad_name.headers.insert("bad name".into(), "sekrit".into());
        let named = transport_config(&bad_name).err();
        assert!(
            matches!(&named, Some(HeaderError::Name { name, .. }) if name == "bad name"),
            "{named:?}"
        );
        let mut bad_value = server.clone();
        bad_value
            .headers
            .insert("Authorization".into(), "Bearer sekrit\n".into());
        let valued = transport_config(&bad_value).err();
        assert!(
            matches!(&valued, Some(HeaderError::Value { name, .. }) if name.eq_ignore_ascii_case("authorization")),
            "{valued:?}"
        );
        let words = crate::hub::error_words(&valued.unwrap());
        assert!(!words.contains("sekrit"), "{words}");
    }
}
