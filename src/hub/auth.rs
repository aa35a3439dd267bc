//! auth — OAuth 2.1 for remote servers that ask for it (a 401 with a Bearer challenge).
//!
//! rmcp does the protocol (discovery from the challenge and the protected-resource metadata,
//! dynamic client registration or a client registered ahead of time, PKCE, refresh); this module
//! supplies what it leaves to its user: where tokens are kept (a file per server in the user's
//! config folder, mode 0600), how a person signs in (the address printed on stderr, or opened
//! with `$BROWSER`, and a loopback listener the authorization server redirects back to), and the
//! machine-to-machine grant (`"grant": "client_credentials"`).
//!
//! **Invariant:** no token, client secret or authorization code reaches a log line or an error
//! message; token files are created readable by their owner only.

use crate::config::HttpServer;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, ClientCredentialsConfig,
    CredentialStore, OAuthState, StoredCredentials,
};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a sign-in may wait for the person to finish it in their browser.
pub(crate) const SIGN_IN_WAIT: Duration = Duration::from_secs(300);

/// Why OAuth gave a remote server no token. rmcp's errors are kept as the sources: they carry
/// none of our tokens, and where they are shown (`hub::error_words`) an authorization server's
/// own words among them are cut short and URLs lose their query. They are boxed (a URL makes
/// them ~110 bytes), as every start's result carries this.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("there is no folder to keep OAuth tokens in: set HOME or XDG_CONFIG_HOME")]
    NoTokenFolder,
    /// The server's token file could not be read (rmcp's store error names the file and why).
    #[error("the saved OAuth tokens cannot be read")]
    TokenStore(#[source] Box<AuthError>),
    #[error("oauth.grant \"client_credentials\" needs a client_id and client_secret")]
    ClientCredentialsIncomplete,
    /// Discovery (the server's protected-resource and authorization-server metadata) failed.
    #[error("cannot start OAuth")]
    Discovery(#[source] Box<AuthError>),
    #[error("the client-credentials grant failed")]
    ClientCredentials(#[source] Box<AuthError>),
    #[error("the client-credentials grant gave no token")]
    NoGrantToken,
    #[error("cannot listen on 127.0.0.1:{port} for the sign-in's redirect")]
    Listen {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot begin the OAuth sign-in")]
    Begin(#[source] Box<AuthError>),
    /// The authorization server sent the browser back with an error: its words, cleaned of
    /// control characters and cut short.
    #[error("the authorization server refused the sign-in ({error}{})", then_colon(.description))]
    Refused { error: String, description: String },
    #[error("the sign-in listener stopped")]
    ListenerStopped,
    #[error(
        "nobody finished signing in within {} min: run `mcp-code-mode login {server}` when you can",
        .waited.as_secs() / 60
    )]
    NotFinished { server: String, waited: Duration },
    #[error("the sign-in could not be completed")]
    Callback(#[source] Box<AuthError>),
    #[error("the sign-in ended without a token")]
    NoToken,
}

fn then_colon(words: &str) -> String {
    if words.is_empty() {
        String::new()
    } else {
        format!(": {words}")
    }
}

/// The folder token files live in: `$XDG_CONFIG_HOME/mcp-code-mode/oauth`, else
/// `~/.config/mcp-code-mode/oauth`.
pub(crate) fn token_dir() -> Result<PathBuf, OAuthError> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".config"))
        })
        .ok_or(OAuthError::NoTokenFolder)?;
    Ok(base.join("mcp-code-mode").join("oauth"))
}

/// One server's tokens on disk. Named by the server and its URL, so a server whose URL changes
/// does not present tokens issued for another.
#[derive(Clone)]
pub(crate) struct TokenFile {
    path: PathBuf,
}

impl TokenFile {
    pub fn for_server(name: &str, url: &str) -> Result<Self, OAuthError> {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(url.as_bytes());
        let tag: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        Ok(Self {
            path: token_dir()?.join(format!("{name}-{tag}.json")),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = self.path.parent().expect("a token file has a folder");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        // Written whole, then renamed: a reader never sees half a file. Created 0600, so the
        // tokens are never readable by others, not even for a moment.
        let temp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, &self.path)
    }
}

fn store_error(what: &str, path: &Path, e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(format!("cannot {what} {}: {e}", path.display()))
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| store_error("read the tokens in", &self.path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(store_error("read", &self.path, e)),
        }
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let bytes = serde_json::to_vec(&credentials)
            .map_err(|e| store_error("write the tokens to", &self.path, e))?;
        self.write(&bytes)
            .map_err(|e| store_error("write", &self.path, e))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(store_error("remove", &self.path, e)),
        }
    }
}

async fn unauthorized(
    server: &HttpServer,
    http: &reqwest::Client,
) -> Result<OAuthState, OAuthError> {
    OAuthState::new(server.url.as_str(), Some(http.clone()))
        .await
        .map_err(|e| OAuthError::Discovery(e.into()))
}

/// A token that needs no person: the client-credentials grant when configured, else tokens kept
/// from an earlier sign-in (`None`: there are none).
pub(crate) async fn without_person(
    name: &str,
    server: &HttpServer,
    http: &reqwest::Client,
) -> Result<Option<AuthorizationManager>, OAuthError> {
    let oauth = &server.oauth;
    if oauth.client_credentials {
        let (Some(client_id), Some(client_secret)) = (&oauth.client_id, &oauth.client_secret)
        else {
            return Err(OAuthError::ClientCredentialsIncomplete);
        };
        let mut state = unauthorized(server, http).await?;
        state
            .authenticate_client_credentials(ClientCredentialsConfig::ClientSecret {
                client_id: client_id.clone(),
                client_secret: client_secret.clone(),
                scopes: oauth.scopes.clone(),
                resource: Some(server.url.clone()),
            })
            .await
            .map_err(|e| OAuthError::ClientCredentials(e.into()))?;
        return Ok(state.into_authorization_manager());
    }
    let store = TokenFile::for_server(name, &server.url)?;
    if store
        .load()
        .await
        .map_err(|e| OAuthError::TokenStore(e.into()))?
        .is_none_or(|stored| stored.token_response.is_none())
    {
        return Ok(None);
    }
    let OAuthState::Unauthorized(mut manager) = unauthorized(server, http).await? else {
        return Ok(None);
    };
    manager.set_credential_store(store);
    match manager.initialize_from_store().await {
        Ok(true) => Ok(Some(manager)),
        Ok(false) => Ok(None),
        Err(e) => {
            tracing::warn!(
                "MCP server '{name}': the saved OAuth tokens cannot be used ({}); signing in again",
                super::error_words(&e)
            );
            Ok(None)
        }
    }
}

/// Signs a person in: the authorization URL is printed on stderr (and opened with `$BROWSER`
/// when set), the authorization server redirects back to a loopback listener, and the tokens
/// are kept in the server's token file. `challenge` is the server's `WWW-Authenticate`.
pub(crate) async fn sign_in(
    name: &str,
    server: &HttpServer,
    challenge: Option<&str>,
    http: &reqwest::Client,
) -> Result<AuthorizationManager, OAuthError> {
    let store = TokenFile::for_server(name, &server.url)?;
    let oauth = &server.oauth;
    let listen = |source| OAuthError::Listen {
        port: oauth.redirect_port,
        source,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", oauth.redirect_port))
        .await
        .map_err(listen)?;
    let port = listener.local_addr().map_err(listen)?.port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let mut state = unauthorized(server, http).await?;
    if let OAuthState::Unauthorized(manager) = &mut state {
        manager.set_credential_store(store.clone());
    }
    let mut request =
        AuthorizationRequest::new(redirect.as_str()).with_client_name("mcp-code-mode");
    if !oauth.scopes.is_empty() {
        request = request.with_scopes(oauth.scopes.iter().cloned());
    }
    if let Some(id) = &oauth.client_id {
        request = request.with_preregistered_client(id.as_str());
        if let Some(secret) = &oauth.client_secret {
            request = request.with_client_secret(secret.as_str());
        }
    }
    if let Some(url) = &oauth.client_metadata_url {
        request = request.with_client_metadata_url(url.as_str());
    }
    if let Some(challenge) = challenge {
        request = request.with_challenge(challenge);
    }
    state
        .start_authorization(request)
        .await
        .map_err(|e| OAuthError::Begin(e.into()))?;
    let address = state
        .get_authorization_url()
        .await
        .map_err(|e| OAuthError::Begin(e.into()))?;
    announce(name, &address);
    let callback = wait_for_redirect(listener, port, name, SIGN_IN_WAIT).await?;
    state
        .handle_callback_url(&callback)
        .await
        .map_err(|e| OAuthError::Callback(e.into()))?;
    let manager = state
        .into_authorization_manager()
        .ok_or(OAuthError::NoToken)?;
    tracing::info!(
        "MCP server '{name}': signed in; tokens kept in {}",
        store.path().display()
    );
    Ok(manager)
}

/// Tells the person where to sign in, and opens it with `$BROWSER` (a command, given the
/// address as its last argument) when that is set.
fn announce(name: &str, address: &str) {
    // A prompt for the person, not a log line: it must show whatever the log filter.
    eprintln!(
        "mcp-code-mode: MCP server '{name}' asks you to sign in. Open this address in a browser \
         (it waits {} min):\n  {address}",
        SIGN_IN_WAIT.as_secs() / 60
    );
    let Some(browser) = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
    else {
        return;
    };
    let mut words = browser.split_whitespace();
    let Some(program) = words.next() else { return };
    let spawned = tokio::process::Command::new(program)
        .args(words)
        .arg(address)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false)
        .spawn();
    match spawned {
        // Reaped in the background: a browser may outlive the sign-in.
        Ok(mut child) => {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
        Err(e) => eprintln!("mcp-code-mode: could not run $BROWSER ({program}): {e}"),
    }
}

/// Serves the loopback address the authorization server sends the browser back to (`listener`,
/// on `port`), until one redirect arrives (its whole URL) or `wait` passes.
async fn wait_for_redirect(
    listener: tokio::net::TcpListener,
    port: u16,
    name: &str,
    wait: Duration,
) -> Result<String, OAuthError> {
    use axum::extract::State;
    let (tx, mut rx) = mpsc::channel::<Result<String, OAuthError>>(1);
    let server_name = name.to_owned();
    let page = move |State(tx): State<mpsc::Sender<Result<String, OAuthError>>>,
                     uri: axum::http::Uri| {
        let name = server_name.clone();
        async move {
            let query: Vec<(String, String)> = uri.query().map(url_pairs).unwrap_or_default();
            // What the authorization server put in the address is shown to the person: cleaned
            // of control characters and cut short.
            let get = |k: &str| {
                query
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| crate::text::shorten(&super::shape::printable(v, false), 300))
            };
            let (message, outcome) = match (get("code"), get("error")) {
                (_, Some(error)) => {
                    let why = get("error_description").unwrap_or_default();
                    (
                        format!("Signing in to {name} was refused: {error} {why}"),
                        Err(OAuthError::Refused {
                            error,
                            description: why,
                        }),
                    )
                }
                (Some(_), None) => (
                    format!("Signed in to {name}. You can close this page."),
                    Ok(format!("http://127.0.0.1:{port}{uri}")),
                ),
                (None, None) => {
                    return axum::response::Html(
                        "This address waits for a sign-in redirect (with a code).".to_owned(),
                    )
                }
            };
            let _ = tx.try_send(outcome);
            axum::response::Html(format!("<p>{}</p>", escape_html(&message)))
        }
    };
    let router = axum::Router::new()
        .route("/callback", axum::routing::get(page))
        .with_state(tx);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    let outcome = tokio::time::timeout(wait, rx.recv()).await;
    let _ = stop.send(());
    // The page is sent before the server stops; a browser that is slow to read it loses only
    // that page.
    let _ = tokio::time::timeout(Duration::from_secs(2), served).await;
    match outcome {
        Ok(Some(result)) => result,
        Ok(None) => Err(OAuthError::ListenerStopped),
        Err(_) => Err(OAuthError::NotFinished {
            server: name.to_owned(),
            waited: wait,
        }),
    }
}

/// `application/x-www-form-urlencoded` pairs of a query string.
fn url_pairs(query: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .map(|u| {
            u.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_refused_or_unfinished_sign_in_is_told_by_its_kind() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let waiting = tokio::spawn(async move {
            wait_for_redirect(listener, port, "s", Duration::from_secs(20)).await
        });
        // The authorization server sends the browser back with its refusal.
        let mut browser = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let request = "GET /callback?error=access_denied&error_description=not%20you HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        browser.write_all(request.as_bytes()).await.unwrap();
        let refused = waiting.await.unwrap().err();
        assert!(
            matches!(&refused, Some(OAuthError::Refused { error, description }) if error == "access_denied" && description == "not you"),
            "{refused:?}"
        );

        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let nobody = wait_for_redirect(listener, port, "s", Duration::from_millis(50))
            .await
            .err();
        assert!(
            matches!(&nobody, Some(OAuthError::NotFinished { server, .. }) if server == "s"),
            "{nobody:?}"
        );
    }
}
