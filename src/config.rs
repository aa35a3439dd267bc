//! config — finds and loads the JSON file that lists the downstream MCP servers.
//!
//! Two shapes are accepted: ours, `{"servers": {...}}`, and the one Claude Desktop and Cursor use,
//! `{"mcpServers": {...}}`, so an existing file can be pointed at as is. `${VAR}` and
//! `${VAR:-default}` are expanded in `command`, `args`, `env` values and `cwd`, from the process
//! environment and then from a `.env` file beside the config file, and in `url` and `headers`
//! values of servers reached over HTTP (their values are secrets: never shown in a message).
//!
//! Keys starting with `//` are comments (JSON has none) and are ignored.
//!
//! **Invariant:** every error names the file, and where it applies the server and the field, so a
//! user can fix the file without reading this code. Problems that do not stop us from running
//! (unknown keys) are warnings, not errors, except a near miss of a known field (`"arg"`), which
//! would silently drop what the user meant. A server we cannot reach at all (the legacy SSE
//! transport) is kept, with the reason, so a script that calls it is told why.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the config is looked for when neither `--config` nor the environment names one.
pub const DEFAULT_PATH: &str = "config/mcp_servers.json";
/// The environment variable that names the config file.
pub const PATH_ENV: &str = "MCP_CODE_MODE_CONFIG";
/// Per-call timeout when a server sets no `timeout_s`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest timeout any setting takes (a server's `timeout_s`, `--timeout`, `--max-timeout`).
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// Whether `s` is a usable timeout: more than 0 and at most `max` seconds. The one rule for
/// every timeout a user or a client gives.
pub fn timeout_within(s: f64, max: f64) -> bool {
    s.is_finite() && s > 0.0 && s <= max
}

/// A timeout on the command line (clap's value parser).
pub fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if timeout_within(v, MAX_TIMEOUT_S) {
        Ok(v)
    } else {
        Err(format!(
            "'{s}' is out of range: use more than 0 and at most {MAX_TIMEOUT_S} seconds"
        ))
    }
}

/// Top-level keys besides the servers' object.
const TOP_LEVEL_SETTINGS: &[&str] = &[
    "executor",
    "python",
    "approvals",
    "packages",
    "data",
    "sessions",
];

const KNOWN_FIELDS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "oauth",
    "description",
    "disabled",
    "timeout_s",
    "type",
    "policy",
];

/// The loaded configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// The file it came from, as given (used in messages).
    pub path: PathBuf,
    /// Every server, disabled ones included (marked), sorted by name.
    pub servers: Vec<ServerConfig>,
    /// Each server's `"policy"` and the top-level `"approvals"` settings (see `approval`).
    pub approvals: crate::approval::Approvals,
    /// `"executor"`: where scripts run, unless `--executor` says otherwise (None: the sandbox).
    pub executor: Option<Executor>,
    /// `"python"`: the interpreter of the local executor, unless `--python` says otherwise (a
    /// path with a `/` is relative to the file's folder; a bare name is looked up on PATH).
    pub python: Option<PathBuf>,
    /// `"packages": {"wheels": DIR, "preload": [...]}` (DIR relative to the file).
    pub packages: Packages,
    /// `"data"`: execute_code's files in and out and what executions leave, each setting as its
    /// serve flag's (`"max_file_bytes"` is `--max-file-bytes`); a flag given wins.
    pub data: DataSettings,
    /// `"sessions": {"max": N, "idle_s": S, "memory_mb": M}`: execute_code's sessions, unless
    /// flags say otherwise.
    pub sessions: SessionSettings,
}

/// The `"data"` settings given in the file (None: not given).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DataSettings {
    pub max_file_bytes: Option<u64>,
    pub max_files_bytes: Option<u64>,
    pub max_output_files: Option<u64>,
    pub inline_bytes: Option<u64>,
    pub keep_runs_s: Option<f64>,
    pub keep_runs_mb: Option<u64>,
}

/// The keys of `"data"`: each is the serve flag of the same name (`_` for `-`).
pub const DATA_KEYS: [&str; 6] = [
    "max_file_bytes",
    "max_files_bytes",
    "max_output_files",
    "inline_bytes",
    "keep_runs_s",
    "keep_runs_mb",
];

fn parse_data(value: &Value) -> Result<DataSettings, String> {
    let Value::Object(fields) = value else {
        return Err(format!(
            "\"data\" must be an object such as {{\"max_file_bytes\": 8388608, \"keep_runs_s\": 3600}}, got {}",
            kind(value)
        ));
    };
    let mut data = DataSettings::default();
    for (field, value) in fields.iter().filter(|(k, _)| !is_comment(k)) {
        if field == "keep_runs_s" {
            let seconds = value.as_f64().filter(|s| *s > 0.0 && s.is_finite());
            data.keep_runs_s = Some(seconds.ok_or_else(|| {
                format!(
                    "\"data\": \"keep_runs_s\" must be a number of seconds above 0, got {value}"
                )
            })?);
            continue;
        }
        let number = value.as_u64().filter(|n| *n > 0).ok_or_else(|| {
            format!("\"data\": \"{field}\" must be a whole number above 0, got {value}")
        });
        let slot = match field.as_str() {
            "max_file_bytes" => &mut data.max_file_bytes,
            "max_files_bytes" => &mut data.max_files_bytes,
            "max_output_files" => &mut data.max_output_files,
            "inline_bytes" => &mut data.inline_bytes,
            "keep_runs_mb" => &mut data.keep_runs_mb,
            _ => {
                return Err(format!(
                    "\"data\": unknown field \"{field}\" (expected {})",
                    DATA_KEYS.map(|k| format!("\"{k}\"")).join(", ")
                ))
            }
        };
        *slot = Some(number?);
    }
    Ok(data)
}

/// Where scripts run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Executor {
    /// Pyodide in a V8 isolate (the default).
    #[default]
    Sandbox,
    /// A host `python3` process per script: NOT a sandbox (`--executor local`).
    Local,
}

/// Packages beyond the embedded wheelhouse.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Packages {
    pub wheels: Option<PathBuf>,
    pub preload: Vec<String>,
}

/// One downstream server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// Shown to the model next to the server's tools; empty when not set.
    pub description: String,
    pub disabled: bool,
    /// Longest a single tool call may take.
    pub timeout: Duration,
    /// What must never reach a recording (see `replay::Redactor`): every `env` value, and every
    /// value a `${VAR}` in any field was replaced by.
    pub secrets: Vec<Secret>,
}

/// A value from the user's environment or a server's `env`, named by its variable.
#[derive(Clone, PartialEq)]
pub struct Secret {
    pub name: String,
    pub value: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A config may be printed with {:?}: only the name shows.
        write!(f, "Secret({})", self.name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to (not replacing) the environment the child inherits.
        env: BTreeMap<String, String>,
        /// Working directory; a relative `cwd` in the file is resolved against the file's folder.
        cwd: Option<PathBuf>,
    },
    /// A remote server speaking streamable HTTP.
    Http(HttpServer),
    /// A server we have no client for; a call to it says why.
    Unsupported { reason: String },
}

/// A server reached over streamable HTTP.
#[derive(Clone, PartialEq)]
pub struct HttpServer {
    pub url: String,
    /// Sent with every request (`${VAR}`-expanded: usually a token). Never logged or shown.
    pub headers: BTreeMap<String, String>,
    /// How to obtain a token when the server asks for OAuth (none set: a token saved by
    /// `mcp-code-mode login`, or the interactive flow when the server asks).
    pub oauth: OAuthSettings,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values and secrets are credentials: only their names are printed.
        f.debug_struct("HttpServer")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("oauth", &self.oauth)
            .finish()
    }
}

/// The `oauth` object of an HTTP server.
#[derive(Clone, PartialEq, Default)]
pub struct OAuthSettings {
    /// A client registered with the authorization server ahead of time (else dynamic
    /// registration).
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    /// Scopes to ask for (else what the server's challenge or metadata suggests).
    pub scopes: Vec<String>,
    /// `client_credentials`: no person involved (machine to machine); needs `client_id` and
    /// `client_secret`.
    pub client_credentials: bool,
    /// The loopback port the authorization redirect comes back to (0: any free port).
    pub redirect_port: u16,
    /// An HTTPS URL where the user hosts this client's metadata document (a Client ID Metadata
    /// Document): used as the client id where the authorization server supports it, in place
    /// of dynamic registration.
    pub client_metadata_url: Option<String>,
}

impl std::fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<set>"),
            )
            .field("scopes", &self.scopes)
            .field("client_credentials", &self.client_credentials)
            .field("redirect_port", &self.redirect_port)
            .field("client_metadata_url", &self.client_metadata_url)
            .finish()
    }
}

/// Why the config could not be loaded. The CLI exits with status 2 on any of these.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The io error is not in the message: it is the source, which `{:#}` prints once.
    #[error("cannot read config file {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: invalid JSON at line {line}, column {column}: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{}: server \"{server}\": {message}", path.display())]
    Server {
        path: PathBuf,
        server: String,
        message: String,
    },
    #[error("{}: server \"{server}\": field \"{field}\": {message}", path.display())]
    Field {
        path: PathBuf,
        server: String,
        field: String,
        message: String,
    },
    #[error("{}: line {line}: {message}", path.display())]
    DotEnv {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Picks the config file: `--config` (returned even if missing, so [`load`] reports it), else
/// `$MCP_CODE_MODE_CONFIG`, else `config/mcp_servers.json` in the current directory if it exists.
/// `None` means no servers are configured: plain Python.
pub fn resolve_path(cli: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = cli {
        return Some(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os(PATH_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let default = PathBuf::from(DEFAULT_PATH);
    default.is_file().then_some(default)
}

/// Loads and validates `path`, expanding variables from the process environment and the `.env`
/// file beside it.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with_env(path, &|name| std::env::var(name).ok())
}

/// [`load`] with the process environment replaced by `process_env`, so tests need not mutate the
/// real one (which other threads read).
pub fn load_with_env(
    path: &Path,
    process_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let root: Value = serde_json::from_str(&text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    let file_error = |message: String| ConfigError::File {
        path: path.to_path_buf(),
        message,
    };
    let Value::Object(root) = root else {
        return Err(file_error(format!(
            "expected an object with a \"servers\" (or \"mcpServers\") object, got {}",
            kind(&root)
        )));
    };
    let servers = match (root.get("servers"), root.get("mcpServers")) {
        (Some(_), Some(_)) => {
            return Err(file_error(
                "has both \"servers\" and \"mcpServers\": use one of them".to_owned(),
            ))
        }
        (Some(s), None) => ("servers", s),
        (None, Some(s)) => ("mcpServers", s),
        (None, None) => {
            return Err(file_error(
                "expected a \"servers\" (or \"mcpServers\") object listing the servers".to_owned(),
            ))
        }
    };
    let (key, servers) = servers;
    let Value::Object(servers) = servers else {
        return Err(file_error(format!(
            "\"{key}\" must be an object mapping server names to their settings, got {}",
            kind(servers)
        )));
    };
    for other in root
        .keys()
        .filter(|k| *k != key && !is_comment(k) && !TOP_LEVEL_SETTINGS.contains(&k.as_str()))
    {
        tracing::warn!(
            "{}: unknown top-level key \"{other}\" ignored (expected \"{key}\", and optionally \"executor\", \"python\", \"approvals\", \"packages\", \"data\" and \"sessions\")",
            path.display()
        );
    }
    let executor = match root.get("executor") {
        None => None,
        Some(Value::String(s)) if s == "sandbox" => Some(Executor::Sandbox),
        Some(Value::String(s)) if s == "local" => Some(Executor::Local),
        Some(other) => {
            return Err(file_error(format!(
                "\"executor\" must be \"sandbox\" (the default) or \"local\" (a host python3 process per script, not sandboxed), got {other}"
            )))
        }
    };

    let dot_env_path = path.with_file_name(".env");
    let dot_env = read_dot_env(&dot_env_path)?;
    let vars = Vars {
        process_env,
        dot_env: &dot_env,
        dot_env_path: &dot_env_path,
        unset_ok: false,
        substituted: None,
    };
    let base_dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };

    let python = match root.get("python") {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() => {
            let given = PathBuf::from(s);
            Some(if s.contains('/') && given.is_relative() {
                base_dir.join(given)
            } else {
                given
            })
        }
        Some(other) => {
            return Err(file_error(format!(
            "\"python\" must be the path (or name on PATH) of a Python 3.10 or later, got {other}"
        )))
        }
    };
    if python.is_some() && executor != Some(Executor::Local) {
        tracing::warn!(
            "{}: \"python\" is used only with \"executor\": \"local\" (or --executor local)",
            path.display()
        );
    }

    let mut parsed = Vec::new();
    let mut approvals = crate::approval::Approvals {
        file: path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        ..Default::default()
    };
    if let Some(settings) = root.get("approvals") {
        crate::approval::parse_settings(settings, &mut approvals).map_err(file_error)?;
    }
    for (name, entry) in servers.iter().filter(|(name, _)| !is_comment(name)) {
        let ctx = Ctx { path, server: name };
        parsed.push(parse_server(&ctx, entry, &vars, &base_dir)?);
        if let Some(policy) = entry.get("policy") {
            let rules = crate::approval::parse_server_policy(policy)
                .map_err(|e| ctx.field_error("policy", e))?;
            approvals.servers.insert(name.clone(), rules);
        }
    }
    let packages = match root.get("packages") {
        None => Packages::default(),
        Some(value) => parse_packages(value, &base_dir).map_err(file_error)?,
    };
    let data = match root.get("data") {
        None => DataSettings::default(),
        Some(value) => parse_data(value).map_err(file_error)?,
    };
    let sessions = match root.get("sessions") {
        None => SessionSettings::default(),
        Some(value) => parse_sessions(value).map_err(file_error)?,
    };
    Ok(Config {
        path: path.to_path_buf(),
        servers: parsed,
        executor,
        python,
        approvals,
        packages,
        data,
        sessions,
    })
}

/// The config file's `"sessions"`: each field optional (flags win over it, defaults fill in).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SessionSettings {
    /// `"max"`: live sessions at once.
    pub max: Option<usize>,
    /// `"idle_s"`: seconds without a call after which a session ends.
    pub idle_s: Option<f64>,
    /// `"memory_mb"`: MiB one session's sandbox may use, across its calls.
    pub memory_mb: Option<u64>,
}

/// The MiB a session's sandbox may be given (the same range as `--memory-mb`).
pub const SESSION_MEMORY_MB: std::ops::RangeInclusive<u64> = 128..=16384;

fn parse_sessions(value: &Value) -> Result<SessionSettings, String> {
    let Value::Object(fields) = value else {
        return Err(format!(
            "\"sessions\" must be an object {{\"max\": N, \"idle_s\": SECONDS, \"memory_mb\": MIB}}, got {}",
            kind(value)
        ));
    };
    let mut settings = SessionSettings::default();
    for (field, v) in fields.iter().filter(|(k, _)| !is_comment(k)) {
        match field.as_str() {
            "max" => match v.as_u64() {
                Some(n) if n >= 1 => settings.max = Some(n as usize),
                _ => return Err(format!("\"sessions\": \"max\" must be a whole number of at least 1, got {v}")),
            },
            "idle_s" => match v.as_f64() {
                Some(s) if timeout_within(s, 86_400.0) => settings.idle_s = Some(s),
                _ => return Err(format!("\"sessions\": \"idle_s\" must be seconds, more than 0 and at most 86400, got {v}")),
            },
            "memory_mb" => match v.as_u64() {
                Some(n) if SESSION_MEMORY_MB.contains(&n) => settings.memory_mb = Some(n),
                _ => return Err(format!(
                    "\"sessions\": \"memory_mb\" must be MiB from {} to {}, got {v}",
                    SESSION_MEMORY_MB.start(),
                    SESSION_MEMORY_MB.end()
                )),
            },
            other => {
                return Err(format!(
                    "\"sessions\": unknown field \"{other}\" (expected \"max\", \"idle_s\" and \"memory_mb\")"
                ))
            }
        }
    }
    Ok(settings)
}

fn parse_packages(value: &Value, base_dir: &Path) -> Result<Packages, String> {
    let Value::Object(fields) = value else {
        return Err(format!(
            "\"packages\" must be an object {{\"wheels\": DIR, \"preload\": [...]}}, got {}",
            kind(value)
        ));
    };
    let mut packages = Packages::default();
    for (field, value) in fields.iter().filter(|(k, _)| !is_comment(k)) {
        match (field.as_str(), value) {
            ("wheels", Value::String(dir)) => packages.wheels = Some(base_dir.join(dir)),
            ("preload", Value::Array(names)) => {
                for name in names {
                    let Value::String(name) = name else {
                        return Err(format!(
                            "\"packages\": \"preload\" lists package names (strings), got {}",
                            kind(name)
                        ));
                    };
                    packages.preload.push(name.clone());
                }
            }
            ("wheels", other) | ("preload", other) => {
                return Err(format!(
                    "\"packages\": \"{field}\" must be {}, got {}",
                    if field == "wheels" {
                        "a directory (string)"
                    } else {
                        "a list of package names"
                    },
                    kind(other)
                ))
            }
            _ => {
                return Err(format!(
                    "\"packages\": unknown field \"{field}\" (expected \"wheels\" and \"preload\")"
                ))
            }
        }
    }
    Ok(packages)
}

/// Where an error is: the file and the server being read.
struct Ctx<'a> {
    path: &'a Path,
    server: &'a str,
}

impl Ctx<'_> {
    fn server_error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Server {
            path: self.path.to_path_buf(),
            server: self.server.to_owned(),
            message: message.into(),
        }
    }
    fn field_error(&self, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Field {
            path: self.path.to_path_buf(),
            server: self.server.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// The known field `key` is probably a typo of: at most two edits away, ignoring case.
fn near_known_field(key: &str) -> Option<&'static str> {
    let key = key.to_ascii_lowercase();
    KNOWN_FIELDS
        .iter()
        .map(|known| (strsim::damerau_levenshtein(&key, known), *known))
        .filter(|&(distance, known)| distance <= 2 && distance < known.len().min(key.len().max(1)))
        .min()
        .map(|(_, known)| known)
}

fn parse_server(
    ctx: &Ctx,
    entry: &Value,
    vars: &Vars,
    base_dir: &Path,
) -> Result<ServerConfig, ConfigError> {
    let name = ctx.server;
    if !valid_name(name) {
        return Err(
            ctx.server_error("invalid server name: use 1 to 64 characters from A-Z a-z 0-9 _ -")
        );
    }
    let Value::Object(entry) = entry else {
        return Err(ctx.server_error(format!(
            "expected an object with a \"command\" (a local server) or a \"url\" (a remote one), got {}",
            kind(entry)
        )));
    };

    let transport_type = match entry.get("type") {
        None => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(other) => {
            return Err(ctx.field_error("type", format!("expected a string, got {}", kind(other))))
        }
    };
    // Claude's and Cursor's names for the two transports we speak, and the legacy one we cannot.
    let remote = match transport_type {
        None => entry.contains_key("url"),
        Some("stdio") => false,
        Some("http" | "streamable-http" | "streamableHttp" | "sse") => true,
        Some(t) => {
            return Err(ctx.field_error(
                "type",
                format!(
                "unknown transport \"{t}\": use \"stdio\" (a \"command\") or \"http\" (a \"url\")"
            ),
            ))
        }
    };
    for (field, wrong_for) in [
        ("url", false),
        ("headers", false),
        ("oauth", false),
        ("command", true),
        ("args", true),
        ("env", true),
        ("cwd", true),
    ] {
        if entry.contains_key(field) && remote == wrong_for {
            let (this, other) = if remote {
                ("a remote server (\"url\")", "local")
            } else {
                ("a local server (\"command\")", "remote")
            };
            return Err(ctx.field_error(
                field,
                format!("belongs to {other} servers, but this is {this}: keep one kind per server"),
            ));
        }
    }
    for key in entry
        .keys()
        .filter(|k| !KNOWN_FIELDS.contains(&k.as_str()) && !is_comment(k))
    {
        // A near miss ("arg", "Command", "timeout") would silently drop what the user meant.
        if let Some(meant) = near_known_field(key) {
            return Err(ctx.field_error(
                key,
                format!("is not a known field: did you mean \"{meant}\"?"),
            ));
        }
        tracing::warn!(
            "{}: server \"{name}\": unknown field \"{key}\" ignored (known fields: {})",
            ctx.path.display(),
            KNOWN_FIELDS.join(", ")
        );
    }

    let disabled = match entry.get("disabled") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ctx.field_error(
                "disabled",
                format!("expected true or false, got {}", kind(other)),
            ))
        }
    };

    // A disabled server is never started: a variable it names need not be set (it stays as written).
    let substituted = std::cell::RefCell::new(Vec::new());
    let vars = &Vars {
        unset_ok: disabled,
        substituted: Some(&substituted),
        ..*vars
    };
    let transport = if remote {
        parse_remote(ctx, entry, vars, transport_type == Some("sse"))?
    } else {
        parse_stdio(ctx, entry, vars, base_dir)?
    };

    let description = match entry.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(d)) => d.clone(),
        Some(other) => {
            return Err(ctx.field_error(
                "description",
                format!("expected a string, got {}", kind(other)),
            ))
        }
    };

    let timeout = match entry.get("timeout_s") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(s) if timeout_within(s, MAX_TIMEOUT_S) => Duration::from_secs_f64(s),
            _ => {
                return Err(ctx.field_error(
                    "timeout_s",
                    format!("expected a positive number of seconds (at most 86400), got {n}"),
                ))
            }
        },
        Some(other) => {
            return Err(ctx.field_error(
                "timeout_s",
                format!("expected a positive number of seconds, got {}", kind(other)),
            ))
        }
    };

    // What a recording must not hold: every value a ${VAR} was replaced by, and every
    // credential the file itself spells out (env values, header values, a client secret).
    let mut secrets = substituted.into_inner();
    let named = |name: &str, value: &String| Secret {
        name: name.to_owned(),
        value: value.clone(),
    };
    match &transport {
        Transport::Stdio { env, .. } => {
            secrets.extend(env.iter().map(|(name, value)| named(name, value)))
        }
        Transport::Http(http) => {
            secrets.extend(http.headers.iter().map(|(name, value)| named(name, value)));
            secrets.extend(
                http.oauth
                    .client_secret
                    .iter()
                    .map(|v| named("oauth.client_secret", v)),
            );
        }
        Transport::Unsupported { .. } => {}
    }
    Ok(ServerConfig {
        name: name.to_owned(),
        transport,
        description,
        disabled,
        timeout,
        secrets,
    })
}

type Entry = serde_json::Map<String, Value>;

fn parse_stdio(
    ctx: &Ctx,
    entry: &Entry,
    vars: &Vars,
    base_dir: &Path,
) -> Result<Transport, ConfigError> {
    let command = match entry.get("command") {
        Some(Value::String(c)) => vars.expand(ctx, "command", c)?,
        Some(other) => {
            return Err(
                ctx.field_error("command", format!("expected a string, got {}", kind(other)))
            )
        }
        None => {
            return Err(ctx.field_error(
                "command",
                "is required: the program that starts the server, e.g. \"npx\"",
            ))
        }
    };
    if command.trim().is_empty() {
        return Err(ctx.field_error("command", "is empty"));
    }

    let args = match entry.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut args = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let field = format!("args[{i}]");
                match item {
                    Value::String(s) => args.push(vars.expand(ctx, &field, s)?),
                    other => {
                        return Err(ctx.field_error(
                            &field,
                            format!("expected a string, got {}", kind(other)),
                        ))
                    }
                }
            }
            args
        }
        Some(other) => {
            return Err(ctx.field_error(
                "args",
                format!("expected an array of strings, got {}", kind(other)),
            ))
        }
    };

    let mut env = BTreeMap::new();
    match entry.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let field = format!("env.{key}");
                if key.is_empty() || key.contains('=') || key.contains('\0') {
                    return Err(ctx.field_error(
                        &field,
                        "invalid variable name (empty, or contains '=' or NUL)",
                    ));
                }
                let Value::String(value) = value else {
                    return Err(
                        ctx.field_error(&field, format!("expected a string, got {}", kind(value)))
                    );
                };
                env.insert(key.clone(), vars.expand(ctx, &field, value)?);
            }
        }
        Some(other) => {
            return Err(ctx.field_error(
                "env",
                format!("expected an object of strings, got {}", kind(other)),
            ))
        }
    }

    let cwd = match entry.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => {
            let expanded = vars.expand(ctx, "cwd", c)?;
            if expanded.is_empty() {
                return Err(ctx.field_error("cwd", "is empty"));
            }
            Some(base_dir.join(expanded))
        }
        Some(other) => {
            return Err(ctx.field_error(
                "cwd",
                format!("expected a string (a directory), got {}", kind(other)),
            ))
        }
    };
    Ok(Transport::Stdio {
        command,
        args,
        env,
        cwd,
    })
}

/// Headers rmcp sets itself for the protocol; a configured one would conflict.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "last-event-id",
    "mcp-protocol-version",
];

fn parse_remote(
    ctx: &Ctx,
    entry: &Entry,
    vars: &Vars,
    legacy_sse: bool,
) -> Result<Transport, ConfigError> {
    let url = match entry.get("url") {
        Some(Value::String(u)) => vars.expand(ctx, "url", u)?,
        Some(other) => {
            return Err(ctx.field_error("url", format!("expected a string, got {}", kind(other))))
        }
        None => return Err(ctx.field_error(
            "url",
            "is required for a remote server: its MCP endpoint, e.g. \"https://example.com/mcp\"",
        )),
    };
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| ctx.field_error("url", format!("is not a valid URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(ctx.field_error(
            "url",
            format!(
                "expected an http:// or https:// URL with a host, got a \"{}:\" URL",
                parsed.scheme()
            ),
        ));
    }
    if legacy_sse {
        return Ok(Transport::Unsupported {
            reason:
                "it uses the legacy HTTP+SSE transport (\"type\": \"sse\"), which mcp-code-mode \
                     has no client for; most such servers also serve streamable HTTP (often at \
                     /mcp): use that URL with \"type\": \"http\""
                    .to_owned(),
        });
    }

    let mut headers = BTreeMap::new();
    match entry.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let field = format!("headers.{key}");
                if http::HeaderName::from_bytes(key.as_bytes()).is_err() {
                    return Err(ctx.field_error(&field, "is not a valid HTTP header name"));
                }
                if RESERVED_HEADERS.contains(&key.to_ascii_lowercase().as_str()) {
                    return Err(ctx.field_error(
                        &field,
                        "is set by the MCP transport itself and cannot be configured",
                    ));
                }
                let Value::String(value) = value else {
                    return Err(
                        ctx.field_error(&field, format!("expected a string, got {}", kind(value)))
                    );
                };
                let value = vars.expand(ctx, &field, value)?;
                if http::HeaderValue::from_str(&value).is_err() {
                    // Not shown: header values are credentials.
                    return Err(ctx.field_error(
                        &field,
                        "its value (not shown) is not a valid HTTP header value: it has a line break or another control character",
                    ));
                }
                headers.insert(key.clone(), value);
            }
        }
        Some(other) => {
            return Err(ctx.field_error(
                "headers",
                format!("expected an object of strings, got {}", kind(other)),
            ))
        }
    }
    let oauth = parse_oauth(ctx, entry.get("oauth"), vars)?;
    if oauth != OAuthSettings::default()
        && headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
    {
        return Err(ctx.field_error(
            "oauth",
            "and headers.Authorization both set the credential: keep one",
        ));
    }
    Ok(Transport::Http(HttpServer {
        url,
        headers,
        oauth,
    }))
}

const OAUTH_FIELDS: &[&str] = &[
    "client_id",
    "client_secret",
    "scopes",
    "grant",
    "redirect_port",
    "client_metadata_url",
];

fn parse_oauth(
    ctx: &Ctx,
    value: Option<&Value>,
    vars: &Vars,
) -> Result<OAuthSettings, ConfigError> {
    let map = match value {
        None | Some(Value::Null) => return Ok(OAuthSettings::default()),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(ctx.field_error("oauth", format!("expected an object, got {}", kind(other))))
        }
    };
    if let Some(key) = map
        .keys()
        .find(|k| !OAUTH_FIELDS.contains(&k.as_str()) && !is_comment(k))
    {
        return Err(ctx.field_error(
            &format!("oauth.{key}"),
            format!("is not a known field (known: {})", OAUTH_FIELDS.join(", ")),
        ));
    }
    let string = |key: &str| -> Result<Option<String>, ConfigError> {
        let field = format!("oauth.{key}");
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => {
                let s = vars.expand(ctx, &field, s)?;
                if s.is_empty() {
                    return Err(ctx.field_error(&field, "is empty"));
                }
                Ok(Some(s))
            }
            Some(other) => {
                Err(ctx.field_error(&field, format!("expected a string, got {}", kind(other))))
            }
        }
    };
    let client_id = string("client_id")?;
    let client_secret = string("client_secret")?;
    let scopes = match map.get("scopes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => {
            let mut scopes = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) if !s.trim().is_empty() => scopes.push(s.trim().to_owned()),
                    other => {
                        return Err(ctx.field_error(
                            &format!("oauth.scopes[{i}]"),
                            format!("expected a scope name, got {}", kind(other)),
                        ))
                    }
                }
            }
            scopes
        }
        Some(other) => {
            return Err(ctx.field_error(
                "oauth.scopes",
                format!("expected an array of scope names, got {}", kind(other)),
            ))
        }
    };
    let client_credentials = match string("grant")?.as_deref() {
        None | Some("authorization_code") => false,
        Some("client_credentials") => true,
        Some(other) => {
            return Err(ctx.field_error(
                "oauth.grant",
                format!("unknown grant \"{other}\": use \"authorization_code\" (a person signs in, the default) or \"client_credentials\" (machine to machine)"),
            ))
        }
    };
    if client_credentials && (client_id.is_none() || client_secret.is_none()) {
        return Err(ctx.field_error(
            "oauth.grant",
            "\"client_credentials\" needs oauth.client_id and oauth.client_secret",
        ));
    }
    if client_secret.is_some() && client_id.is_none() {
        return Err(ctx.field_error("oauth.client_secret", "is set without oauth.client_id"));
    }
    let redirect_port = match map.get("redirect_port") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => match n.as_u64().and_then(|p| u16::try_from(p).ok()) {
            Some(port) => port,
            None => {
                return Err(ctx.field_error(
                    "oauth.redirect_port",
                    format!("expected a port number (0 to 65535), got {n}"),
                ))
            }
        },
        Some(other) => {
            return Err(ctx.field_error(
                "oauth.redirect_port",
                format!("expected a port number, got {}", kind(other)),
            ))
        }
    };
    let client_metadata_url = string("client_metadata_url")?;
    if let Some(url) = &client_metadata_url {
        let has_path = reqwest::Url::parse(url)
            .is_ok_and(|u| u.scheme() == "https" && u.host().is_some() && u.path() != "/");
        if !has_path {
            return Err(ctx.field_error(
                "oauth.client_metadata_url",
                format!("expected an https URL with a path (where the client's metadata document is served), got \"{url}\""),
            ));
        }
    }
    Ok(OAuthSettings {
        client_id,
        client_secret,
        scopes,
        client_credentials,
        redirect_port,
        client_metadata_url,
    })
}

/// JSON has no comments: keys starting with `//` serve as comments and are ignored silently.
fn is_comment(key: &str) -> bool {
    key.starts_with("//")
}

/// Whether `name` is a valid server name: `[A-Za-z0-9_-]{1,64}` (it becomes part of Python names).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Variable sources for `${...}` expansion: the process environment wins over `.env`.
#[derive(Clone, Copy)]
struct Vars<'a> {
    process_env: &'a dyn Fn(&str) -> Option<String>,
    dot_env: &'a BTreeMap<String, String>,
    dot_env_path: &'a Path,
    /// Leave an unset `${VAR}` as written instead of failing (for disabled servers).
    unset_ok: bool,
    /// Where each substitution from the environment is noted (defaults, written in the file,
    /// are not secrets).
    substituted: Option<&'a std::cell::RefCell<Vec<Secret>>>,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<String> {
        (self.process_env)(name).or_else(|| self.dot_env.get(name).cloned())
    }

    /// Expands `${NAME}` and `${NAME:-default}` (default used when NAME is unset or empty, as in
    /// the shell); `$${` is a literal `${`; any other `$` is kept as is.
    fn expand(&self, ctx: &Ctx, field: &str, input: &str) -> Result<String, ConfigError> {
        let mut out = String::with_capacity(input.len());
        let mut rest = input;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix("${") {
                out.push_str("${");
                rest = tail;
                continue;
            }
            let Some(body_and_tail) = after.strip_prefix('{') else {
                out.push('$');
                rest = after;
                continue;
            };
            let Some(end) = body_and_tail.find('}') else {
                return Err(ctx.field_error(
                    field,
                    // The value is not shown: in headers it is a credential.
                    "unterminated \"${\" (write $${ for a literal ${)",
                ));
            };
            let body = &body_and_tail[..end];
            let (name, default) = match body.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (body, None),
            };
            if !valid_var_name(name) {
                return Err(ctx.field_error(
                    field,
                    format!("invalid variable name in ${{{body}}}: use letters, digits and _, not starting with a digit"),
                ));
            }
            match (self.get(name), default) {
                (Some(value), Some(default)) if value.is_empty() => out.push_str(default),
                (Some(value), _) => {
                    out.push_str(&value);
                    if let Some(noted) = self.substituted.filter(|_| !value.is_empty()) {
                        noted.borrow_mut().push(Secret {
                            name: name.to_owned(),
                            value,
                        });
                    }
                }
                (None, Some(default)) => out.push_str(default),
                (None, None) if self.unset_ok => out.push_str(&format!("${{{body}}}")),
                (None, None) => {
                    return Err(ctx.field_error(
                        field,
                        format!(
                            "${{{name}}} is not set (define it in the environment or in {})",
                            self.dot_env_path.display()
                        ),
                    ))
                }
            }
            rest = &body_and_tail[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

fn valid_var_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Reads a `.env` file: `KEY=value` lines, `#` comments, optional `export `, values optionally in
/// single quotes (literal) or double quotes (with `\n`, `\t`, `\"`, `\\` escapes). A missing file
/// is an empty one. Values are not expanded: `.env` holds secrets, kept verbatim.
fn read_dot_env(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    parse_dot_env(&text).map_err(|(line, message)| ConfigError::DotEnv {
        path: path.to_path_buf(),
        line,
        message,
    })
}

fn parse_dot_env(text: &str) -> Result<BTreeMap<String, String>, (usize, String)> {
    let mut vars = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, value)) = line.split_once('=') else {
            return Err((number, "expected KEY=value".to_owned()));
        };
        let key = key.trim();
        if !valid_var_name(key) {
            return Err((
                number,
                format!("invalid variable name {key:?}: use letters, digits and _, not starting with a digit"),
            ));
        }
        let value = value.trim();
        let value = if let Some(inner) = value.strip_prefix('"') {
            let Some(end) = closing_double_quote(inner) else {
                return Err((number, "unterminated double quote".to_owned()));
            };
            unescape_double(&inner[..end])
        } else if let Some(inner) = value.strip_prefix('\'') {
            let Some(end) = inner.find('\'') else {
                return Err((number, "unterminated single quote".to_owned()));
            };
            inner[..end].to_owned()
        } else {
            // An unquoted value ends at a ` #` comment, as in most .env readers.
            match value.find(" #") {
                Some(at) => value[..at].trim_end().to_owned(),
                None => value.to_owned(),
            }
        };
        vars.insert(key.to_owned(), value);
    }
    Ok(vars)
}

fn closing_double_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(i),
            _ => {}
        }
    }
    None
}

fn unescape_double(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// A JSON value's kind with its article, for "expected X, got a number".
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// serde_json appends " at line L column C"; our message states the position itself.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Dir {
        dir: tempfile::TempDir,
    }

    impl Dir {
        fn new() -> Self {
            Self {
                dir: tempfile::tempdir().expect("temp dir"),
            }
        }
        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        }
        fn config(&self, text: &str) -> PathBuf {
            self.write("mcp_servers.json", text)
        }
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn load_in(path: &Path, pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        load_with_env(path, &env(pairs))
    }

    fn error(path: &Path, pairs: &[(&str, &str)]) -> String {
        match load_in(path, pairs) {
            Ok(config) => panic!("expected an error, loaded {config:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn executor_and_python_at_the_top_level() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {}}"#);
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!((config.executor, config.python), (None, None));
        let path = d.config(r#"{"servers": {}, "executor": "local", "python": "venv/bin/python"}"#);
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(config.executor, Some(Executor::Local));
        assert_eq!(config.python, Some(d.dir.path().join("venv/bin/python")));
        let path = d.config(r#"{"servers": {}, "executor": "sandbox", "python": "python3.12"}"#);
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(config.executor, Some(Executor::Sandbox));
        assert_eq!(config.python, Some(PathBuf::from("python3.12")));
        let path = d.config(r#"{"servers": {}, "executor": "Local"}"#);
        assert!(
            error(&path, &[]).contains(r#""executor" must be "sandbox" (the default) or "local""#)
        );
        let path = d.config(r#"{"servers": {}, "executor": "local", "python": 3}"#);
        assert!(error(&path, &[]).contains(r#""python" must be the path"#));
    }

    #[test]
    fn our_form_with_every_field() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {
                "fs": {"command": "npx", "args": ["-y", "pkg", "/tmp"], "env": {"A": "1"},
                       "cwd": "sub", "description": "files", "timeout_s": 2.5},
                "off": {"command": "x", "disabled": true}
            }}"#,
        );
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(config.path, path);
        assert_eq!(config.servers.len(), 2);
        let fs = &config.servers[0];
        assert_eq!(fs.name, "fs");
        let (command, args, env, cwd) = stdio(fs);
        assert_eq!(command, "npx");
        assert_eq!(*args, ["-y", "pkg", "/tmp"]);
        assert_eq!(env.get("A").map(String::as_str), Some("1"));
        assert_eq!(cwd.as_deref(), Some(d.dir.path().join("sub").as_path()));
        assert_eq!(fs.description, "files");
        assert!(!fs.disabled);
        assert_eq!(fs.timeout, Duration::from_millis(2500));
        let off = &config.servers[1];
        assert!(off.disabled);
        assert_eq!(off.timeout, DEFAULT_TIMEOUT);
        let (_, args, env, cwd) = stdio(off);
        assert!(args.is_empty() && env.is_empty() && cwd.is_none());
    }

    /// A local server's command, args, env and cwd (panics for another kind).
    fn stdio(
        server: &ServerConfig,
    ) -> (
        &String,
        &Vec<String>,
        &BTreeMap<String, String>,
        &Option<PathBuf>,
    ) {
        match &server.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => (command, args, env, cwd),
            other => panic!("{} is not a local server: {other:?}", server.name),
        }
    }

    fn remote(server: &ServerConfig) -> &HttpServer {
        match &server.transport {
            Transport::Http(http) => http,
            other => panic!("{} is not a remote server: {other:?}", server.name),
        }
    }

    #[test]
    fn claude_desktop_form() {
        let d = Dir::new();
        let path = d.config(
            r#"{"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}}"#,
        );
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(config.servers.len(), 1);
        assert_eq!(config.servers[0].name, "memory");
    }

    #[test]
    fn absolute_cwd_is_kept() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {"a": {"command": "x", "cwd": "/var/tmp"}}}"#);
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(
            stdio(&config.servers[0]).3.as_deref(),
            Some(Path::new("/var/tmp"))
        );
    }

    #[test]
    fn remote_servers_in_both_forms_with_headers_and_oauth() {
        let d = Dir::new();
        d.write(".env", "TOKEN=s3cret\n");
        let path = d.config(
            r#"{"servers": {
                "a": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}", "X-Team": "t1"}},
                "b": {"type": "http", "url": "http://127.0.0.1:9/mcp", "timeout_s": 5,
                      "oauth": {"client_id": "cid", "client_secret": "${TOKEN}", "scopes": "read write", "redirect_port": 8765}},
                "c": {"type": "streamable-http", "url": "https://example.com/mcp",
                      "oauth": {"grant": "client_credentials", "client_id": "m2m", "client_secret": "x", "scopes": ["s"]}},
                "legacy": {"type": "sse", "url": "https://example.com/sse"},
                "local": {"type": "stdio", "command": "x"}
            }}"#,
        );
        let config = load_in(&path, &[]).expect("loads");
        let a = remote(&config.servers[0]);
        assert_eq!(a.url, "https://example.com/mcp");
        assert_eq!(a.headers["Authorization"], "Bearer s3cret");
        assert_eq!(a.headers["X-Team"], "t1");
        assert_eq!(a.oauth, OAuthSettings::default());
        let b = remote(&config.servers[1]);
        assert_eq!(config.servers[1].timeout, Duration::from_secs(5));
        assert_eq!(b.oauth.client_id.as_deref(), Some("cid"));
        assert_eq!(b.oauth.client_secret.as_deref(), Some("s3cret"));
        assert_eq!(b.oauth.scopes, ["read", "write"]);
        assert_eq!(b.oauth.redirect_port, 8765);
        assert!(!b.oauth.client_credentials);
        let c = remote(&config.servers[2]);
        assert!(c.oauth.client_credentials);
        assert_eq!(c.oauth.scopes, ["s"]);
        match &config.servers[3].transport {
            Transport::Unsupported { reason } => {
                assert!(reason.contains("\"type\": \"http\""), "{reason}")
            }
            other => panic!("legacy SSE is kept as unsupported, got {other:?}"),
        }
        stdio(&config.servers[4]);
        // Secrets stay out of debug output.
        let debug = format!("{config:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("Authorization"), "{debug}");
    }

    #[test]
    fn remote_server_errors_name_the_field_and_never_a_header_value() {
        let d = Dir::new();
        let cases = [
            (
                r#"{"url": 5}"#,
                "field \"url\": expected a string, got a number",
            ),
            (
                r#"{"type": "http"}"#,
                "field \"url\": is required for a remote server",
            ),
            (
                r#"{"url": "ftp://example.com/x"}"#,
                "field \"url\": expected an http:// or https:// URL",
            ),
            (
                r#"{"url": "not a url"}"#,
                "field \"url\": is not a valid URL",
            ),
            (
                r#"{"url": "https://e.com/mcp", "command": "x"}"#,
                "field \"command\": belongs to local servers, but this is a remote server",
            ),
            (
                r#"{"command": "x", "headers": {}}"#,
                "field \"headers\": belongs to remote servers, but this is a local server",
            ),
            (
                r#"{"url": "https://e.com/mcp", "headers": {"Bad Name": "v"}}"#,
                "field \"headers.Bad Name\": is not a valid HTTP header name",
            ),
            (
                r#"{"url": "https://e.com/mcp", "headers": {"Accept": "v"}}"#,
                "field \"headers.Accept\": is set by the MCP transport itself",
            ),
            (
                r#"{"url": "https://e.com/mcp", "headers": {"X": "top-secret\n"}}"#,
                "field \"headers.X\": its value (not shown)",
            ),
            (
                r#"{"url": "https://e.com/mcp", "headers": {"X": "top-secret${OOPS"}}"#,
                "field \"headers.X\": unterminated",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"grant": "password"}}"#,
                "field \"oauth.grant\": unknown grant \"password\"",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"grant": "client_credentials"}}"#,
                "needs oauth.client_id and oauth.client_secret",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"clientid": "x"}}"#,
                "field \"oauth.clientid\": is not a known field",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"redirect_port": 70000}}"#,
                "field \"oauth.redirect_port\": expected a port number",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"client_id": "x"}, "headers": {"authorization": "y"}}"#,
                "and headers.Authorization both set the credential",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"client_metadata_url": "http://e.com/client.json"}}"#,
                "field \"oauth.client_metadata_url\": expected an https URL with a path",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"client_metadata_url": "https://e.com/"}}"#,
                "expected an https URL with a path",
            ),
            (
                r#"{"type": "websocket", "url": "wss://e.com"}"#,
                "unknown transport \"websocket\"",
            ),
        ];
        for (entry, expected) in cases {
            let path = d.config(&format!(r#"{{"servers": {{"r": {entry}}}}}"#));
            let e = error(&path, &[]);
            assert!(e.contains(expected), "{entry}: {e}");
            assert!(!e.contains("top-secret"), "a header value leaked: {e}");
        }
    }

    #[test]
    fn a_disabled_server_does_not_need_its_variables_set() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {"off": {"command": "x", "disabled": true, "env": {"K": "${UNSET_TOKEN}"}},
                            "on": {"command": "y"}}}"#,
        );
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(stdio(&config.servers[0]).2["K"], "${UNSET_TOKEN}");
        let path =
            d.config(r#"{"servers": {"on": {"command": "x", "env": {"K": "${UNSET_TOKEN}"}}}}"#);
        let e = load_in(&path, &[])
            .expect_err("an enabled server needs it")
            .to_string();
        assert!(e.contains("${UNSET_TOKEN} is not set"), "{e}");
    }

    #[test]
    fn packages_name_a_wheels_directory_beside_the_file_and_what_to_preload() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {}, "packages": {"wheels": "my-wheels", "preload": ["pydantic", "tabulate"]}}"#,
        );
        let c = load_in(&path, &[]).unwrap();
        assert_eq!(
            c.packages.wheels,
            Some(path.parent().unwrap().join("my-wheels"))
        );
        assert_eq!(c.packages.preload, ["pydantic", "tabulate"]);
        assert_eq!(
            load_in(&d.config(r#"{"servers": {}}"#), &[])
                .unwrap()
                .packages,
            Packages::default()
        );
        for (bad, says) in [
            (r#"{"wheels": 3}"#, "\"wheels\" must be a directory"),
            (r#"{"preload": "pydantic"}"#, "\"preload\" must be a list"),
            (r#"{"preload": [1]}"#, "package names (strings)"),
            (r#"{"wheel": "x"}"#, "unknown field \"wheel\""),
            (r#"["x"]"#, "must be an object"),
        ] {
            let path = d.config(&format!(r#"{{"servers": {{}}, "packages": {bad}}}"#));
            let e = load_in(&path, &[]).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_near_miss_of_a_known_field_is_an_error_that_suggests_it() {
        let d = Dir::new();
        for (typo, meant) in [
            ("arg", "args"),
            ("Command", "command"),
            ("timeout", "timeout_s"),
            ("envs", "env"),
        ] {
            let path = d.config(&format!(
                r#"{{"servers": {{"a": {{"command": "x", "{typo}": 1}}}}}}"#
            ));
            let e = load_in(&path, &[]).expect_err(typo).to_string();
            assert!(
                e.contains(&format!("did you mean \"{meant}\"?")) && e.contains(typo),
                "{typo}: {e}"
            );
        }
    }

    #[test]
    fn unknown_fields_are_warnings() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {"a": {"command": "x", "autoApprove": []}}, "x": 1}"#);
        assert!(load_in(&path, &[]).is_ok());
    }

    #[test]
    fn expansion_from_environment_and_defaults() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {"a": {
                "command": "${BIN}",
                "args": ["--root=${ROOT:-/srv}", "${EMPTY:-fallback}", "$HOME", "$${LITERAL}", "${SET_EMPTY}"],
                "env": {"TOKEN": "Bearer ${TOKEN}"},
                "cwd": "${DIR}"
            }}}"#,
        );
        let config = load_in(
            &path,
            &[
                ("BIN", "node"),
                ("TOKEN", "s3cret"),
                ("DIR", "/opt"),
                ("EMPTY", ""),
                ("SET_EMPTY", ""),
            ],
        )
        .expect("loads");
        let a = &config.servers[0];
        assert_eq!(stdio(a).0, "node");
        assert_eq!(
            *stdio(a).1,
            ["--root=/srv", "fallback", "$HOME", "${LITERAL}", ""]
        );
        assert_eq!(stdio(a).2["TOKEN"], "Bearer s3cret");
        assert_eq!(stdio(a).3.as_deref(), Some(Path::new("/opt")));
        // What a recording must not hold: substitutions from the environment, every env value;
        // not defaults, which the file itself spells out.
        let secrets: Vec<(&str, &str)> = a
            .secrets
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            secrets,
            [
                ("BIN", "node"),
                ("TOKEN", "s3cret"),
                ("DIR", "/opt"),
                ("TOKEN", "Bearer s3cret")
            ]
        );
    }

    #[test]
    fn dot_env_beside_the_config_and_process_env_wins() {
        let d = Dir::new();
        d.write(
            ".env",
            "# secrets\nexport TOKEN=from-file\nOTHER=\"a \\\"quoted\\\" value\" \nSINGLE='$raw' \nPLAIN=x # comment\n",
        );
        let path = d.config(
            r#"{"servers": {"a": {"command": "x", "env": {"T": "${TOKEN}", "O": "${OTHER}", "S": "${SINGLE}", "P": "${PLAIN}"}}}}"#,
        );
        let a = &load_in(&path, &[]).expect("loads").servers[0];
        assert_eq!(stdio(a).2["T"], "from-file");
        assert_eq!(stdio(a).2["O"], "a \"quoted\" value");
        assert_eq!(stdio(a).2["S"], "$raw");
        assert_eq!(stdio(a).2["P"], "x");
        let a = &load_in(&path, &[("TOKEN", "from-env")])
            .expect("loads")
            .servers[0];
        assert_eq!(stdio(a).2["T"], "from-env");
    }

    #[test]
    fn resolve_path_prefers_the_cli() {
        assert_eq!(
            resolve_path(Some(Path::new("/nope/x.json"))),
            Some(PathBuf::from("/nope/x.json"))
        );
    }

    #[test]
    fn error_missing_file() {
        let d = Dir::new();
        let path = d.dir.path().join("absent.json");
        let e = error(&path, &[]);
        assert!(e.starts_with("cannot read config file "), "{e}");
        assert!(e.contains("absent.json"), "{e}");
    }

    #[test]
    fn error_json_syntax_names_line_and_column() {
        let d = Dir::new();
        let path = d.config("{\"servers\": {\n  \"a\": {\"command\": \"x\",}\n}}");
        let e = error(&path, &[]);
        assert_eq!(
            e,
            format!(
                "{}: invalid JSON at line 2, column 24: trailing comma",
                path.display()
            )
        );
    }

    #[test]
    fn error_args_not_an_array() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {"filesystem": {"command": "x", "args": 3}}}"#);
        assert_eq!(
            error(&path, &[]),
            format!(
                "{}: server \"filesystem\": field \"args\": expected an array of strings, got a number",
                path.display()
            )
        );
    }

    #[test]
    fn error_arg_not_a_string() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {"a": {"command": "x", "args": ["ok", true]}}}"#);
        assert!(error(&path, &[])
            .ends_with("server \"a\": field \"args[1]\": expected a string, got a boolean"));
    }

    #[test]
    fn error_undefined_variable_names_the_dot_env() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {"github": {"command": "x", "env": {"TOKEN": "${GITHUB_TOKEN}"}}}}"#,
        );
        let dot_env = path.with_file_name(".env");
        assert_eq!(
            error(&path, &[]),
            format!(
                "{}: server \"github\": field \"env.TOKEN\": ${{GITHUB_TOKEN}} is not set (define it in the environment or in {})",
                path.display(),
                dot_env.display()
            )
        );
    }

    #[test]
    fn error_unterminated_and_invalid_variables() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {"a": {"command": "${BIN"}}}"#);
        assert!(error(&path, &[]).contains("field \"command\": unterminated \"${\""));
        let path = d.config(r#"{"servers": {"a": {"command": "${1X}"}}}"#);
        assert!(error(&path, &[]).contains("field \"command\": invalid variable name in ${1X}"));
    }

    #[test]
    fn error_missing_command() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {"a": {"args": []}}}"#);
        assert!(error(&path, &[]).ends_with("server \"a\": field \"command\": is required: the program that starts the server, e.g. \"npx\""));
    }

    #[test]
    fn error_wrong_types_of_each_field() {
        let d = Dir::new();
        let cases = [
            (
                r#""command": 1"#,
                "command",
                "expected a string, got a number",
            ),
            (
                r#""command": "x", "env": []"#,
                "env",
                "expected an object of strings, got an array",
            ),
            (
                r#""command": "x", "env": {"PORT": 80}"#,
                "env.PORT",
                "expected a string, got a number",
            ),
            (
                r#""command": "x", "cwd": false"#,
                "cwd",
                "expected a string (a directory), got a boolean",
            ),
            (
                r#""command": "x", "description": {}"#,
                "description",
                "expected a string, got an object",
            ),
            (
                r#""command": "x", "disabled": "yes""#,
                "disabled",
                "expected true or false, got a string",
            ),
            (
                r#""command": "x", "timeout_s": 0"#,
                "timeout_s",
                "expected a positive number of seconds (at most 86400), got 0",
            ),
            (
                r#""command": "x", "timeout_s": "5""#,
                "timeout_s",
                "expected a positive number of seconds, got a string",
            ),
            (
                r#""command": "x", "type": "websocket""#,
                "type",
                "unknown transport \"websocket\": use \"stdio\" (a \"command\") or \"http\" (a \"url\")",
            ),
        ];
        for (fields, field, message) in cases {
            let path = d.config(&format!(r#"{{"servers": {{"srv": {{{fields}}}}}}}"#));
            assert_eq!(
                error(&path, &[]),
                format!(
                    "{}: server \"srv\": field \"{field}\": {message}",
                    path.display()
                ),
                "for {fields}"
            );
        }
    }

    #[test]
    fn error_bad_server_name_and_entry() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {"my server": {"command": "x"}}}"#);
        assert!(error(&path, &[]).ends_with(
            "server \"my server\": invalid server name: use 1 to 64 characters from A-Z a-z 0-9 _ -"
        ));
        let path = d.config(r#"{"servers": {"a": "npx"}}"#);
        assert!(error(&path, &[])
            .ends_with("server \"a\": expected an object with a \"command\" (a local server) or a \"url\" (a remote one), got a string"));
        let long = "x".repeat(65);
        let path = d.config(&format!(
            r#"{{"servers": {{"{long}": {{"command": "x"}}}}}}"#
        ));
        assert!(error(&path, &[]).contains("invalid server name"));
    }

    #[test]
    fn error_top_level_shapes() {
        let d = Dir::new();
        let path = d.config("[]");
        assert!(error(&path, &[]).ends_with(
            "expected an object with a \"servers\" (or \"mcpServers\") object, got an array"
        ));
        let path = d.config("{}");
        assert!(error(&path, &[])
            .ends_with("expected a \"servers\" (or \"mcpServers\") object listing the servers"));
        let path = d.config(r#"{"servers": [], "mcpServers": {}}"#);
        assert!(
            error(&path, &[]).ends_with("has both \"servers\" and \"mcpServers\": use one of them")
        );
        let path = d.config(r#"{"mcpServers": []}"#);
        assert!(error(&path, &[]).ends_with(
            "\"mcpServers\" must be an object mapping server names to their settings, got an array"
        ));
    }

    #[test]
    fn error_in_dot_env_names_its_line() {
        let d = Dir::new();
        let dot_env = d.write(".env", "GOOD=1\nnot a pair\n");
        let path = d.config(r#"{"servers": {}}"#);
        assert_eq!(
            error(&path, &[]),
            format!("{}: line 2: expected KEY=value", dot_env.display())
        );
        d.write(".env", "A=\"open\n");
        assert!(error(&path, &[]).ends_with("line 1: unterminated double quote"));
    }

    #[test]
    fn the_example_file_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mcp_servers.example.json");
        let config = load_in(&path, &[("HOME", "/home/u")]).expect("the example loads");
        let names: Vec<_> = config.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["filesystem", "memory", "github", "linear"],
            "every example loads"
        );
        assert_eq!(stdio(&config.servers[0]).1[2], "/home/u/projects");
        assert_eq!(config.servers[0].timeout, Duration::from_secs(30));
        let (_, _, env, cwd) = stdio(&config.servers[1]);
        assert_eq!(env["MEMORY_FILE_PATH"], "/tmp/mcp-code-mode-memory.jsonl");
        assert_eq!(
            cwd.as_deref(),
            Some(path.parent().expect("a folder").join(".").as_path())
        );
        let github = remote(&config.servers[2]);
        assert!(config.servers[2].disabled);
        assert_eq!(github.headers["Authorization"], "Bearer ${GITHUB_TOKEN}");
        let linear = remote(&config.servers[3]);
        assert_eq!(linear.oauth.redirect_port, 0);
    }

    #[test]
    fn empty_servers_is_fine() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {}}"#);
        assert!(load_in(&path, &[]).expect("loads").servers.is_empty());
    }
}
