//! config — finds and loads the JSON file that lists the downstream MCP servers.
//!
//! Two shapes are accepted: ours, `{"servers": {...}}`, and the one Claude Desktop and Cursor use,
//! `{"mcpServers": {...}}`, so an existing file can be pointed at as is. `${VAR}` and
//! `${VAR:-default}` are expanded in `command`, `args`, `env` values and `cwd`, from the process
//! environment and then from a `.env` file beside the config file, and in `url` and `headers`
//! values of servers reached over HTTP (their values are secrets: never shown in a message).
//!
//! Keys starting with `//` are comments (JSON has none) and are ignored, at any depth.
//!
//! A file is read in two steps: serde reads its shape into the `Raw*` types (which keys, holding
//! which kinds of JSON value), then plain code checks what a type cannot say (ranges, names, one
//! kind of server per entry, `${VAR}`s) and builds the public types.
//!
//! **Invariant:** every error names the file, and where it applies the server and the field, so a
//! user can fix the file without reading this code. Problems that do not stop us from running
//! (unknown keys) are warnings, not errors, except a near miss of a known field (`"arg"`), which
//! would silently drop what the user meant. A server we cannot reach at all (the legacy SSE
//! transport) is kept, with the reason, so a script that calls it is told why.

use crate::approval::{Policy, Rule};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};
use serde_path_to_error::Segment;
use std::collections::BTreeMap;
use std::fmt::{self, Display};
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
    let mut root: Value = serde_json::from_str(&text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    strip_comments(&mut root);
    let file_error = |message: String| ConfigError::File {
        path: path.to_path_buf(),
        message,
    };
    // Ahead of the types: were one of the two also malformed, that would hide the real mistake.
    if root.get("servers").is_some() && root.get("mcpServers").is_some() {
        return Err(file_error(
            "has both \"servers\" and \"mcpServers\": use one of them".to_owned(),
        ));
    }
    let raw: RawFile = typed(&root, FILE_FIELDS).map_err(|m| file_error(m.in_file()))?;
    let (key, servers) = match (raw.servers, raw.mcp_servers) {
        (Some(servers), _) => ("servers", servers),
        (None, Some(servers)) => ("mcpServers", servers),
        (None, None) => {
            return Err(file_error(
                "expected a \"servers\" (or \"mcpServers\") object listing the servers".to_owned(),
            ))
        }
    };
    for other in raw.other.keys() {
        tracing::warn!(
            "{}: unknown top-level key \"{other}\" ignored (expected \"{key}\", and optionally \"executor\", \"python\", \"approvals\", \"packages\", \"data\" and \"sessions\")",
            path.display()
        );
    }
    let executor = match raw.executor.as_deref() {
        None => None,
        Some("sandbox") => Some(Executor::Sandbox),
        Some("local") => Some(Executor::Local),
        Some(other) => return Err(file_error(must_be("executor", format!("{other:?}")))),
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

    let python = match raw.python {
        None => None,
        Some(s) if s.trim().is_empty() => {
            return Err(file_error(must_be("python", format!("{s:?}"))))
        }
        Some(s) => {
            let given = PathBuf::from(&s);
            Some(if s.contains('/') && given.is_relative() {
                base_dir.join(given)
            } else {
                given
            })
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
    if let Some(Obj(settings)) = raw.approvals {
        if let Some(word) = settings.unannotated {
            approvals.unannotated = Policy::named(&word)
                .map_err(|e| file_error(format!("\"approvals\": \"unannotated\": {e}")))?;
        }
        if let Some(s) = checked("approvals.timeout_s", settings.timeout_s, |&s| {
            timeout_within(s, MAX_TIMEOUT_S).then_some(s)
        })
        .map_err(file_error)?
        {
            approvals.timeout = Duration::from_secs_f64(s);
        }
    }
    for (name, entry) in &servers {
        let ctx = Ctx { path, server: name };
        let (server, policy) = parse_server(&ctx, entry, &vars, &base_dir)?;
        parsed.push(server);
        if let Some(policy) = policy {
            let rules = policy.rules().map_err(|e| ctx.field_error("policy", e))?;
            approvals.servers.insert(name.clone(), rules);
        }
    }
    let packages = raw
        .packages
        .map_or_else(Packages::default, |Obj(packages)| Packages {
            wheels: packages.wheels.map(|dir| base_dir.join(dir)),
            preload: packages.preload.unwrap_or_default(),
        });
    let data = match raw.data {
        None => DataSettings::default(),
        Some(Obj(data)) => parse_data(data).map_err(file_error)?,
    };
    let sessions = match raw.sessions {
        None => SessionSettings::default(),
        Some(Obj(sessions)) => parse_sessions(sessions).map_err(file_error)?,
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

fn parse_data(raw: RawData) -> Result<DataSettings, String> {
    let whole = |field: &str, n: Option<Number>| {
        checked(&format!("data.{field}"), n, |n| {
            n.as_u64().filter(|&n| n > 0)
        })
    };
    Ok(DataSettings {
        max_file_bytes: whole("max_file_bytes", raw.max_file_bytes)?,
        max_files_bytes: whole("max_files_bytes", raw.max_files_bytes)?,
        max_output_files: whole("max_output_files", raw.max_output_files)?,
        inline_bytes: whole("inline_bytes", raw.inline_bytes)?,
        keep_runs_s: checked("data.keep_runs_s", raw.keep_runs_s, |&s| {
            (s > 0.0 && s.is_finite()).then_some(s)
        })?,
        keep_runs_mb: whole("keep_runs_mb", raw.keep_runs_mb)?,
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

fn parse_sessions(raw: RawSessions) -> Result<SessionSettings, String> {
    Ok(SessionSettings {
        max: checked("sessions.max", raw.max, |n| {
            n.as_u64()
                .filter(|&n| n >= 1)
                .and_then(|n| usize::try_from(n).ok())
        })?,
        idle_s: checked("sessions.idle_s", raw.idle_s, |&s| {
            timeout_within(s, 86_400.0).then_some(s)
        })?,
        memory_mb: checked("sessions.memory_mb", raw.memory_mb, |n| {
            n.as_u64().filter(|n| SESSION_MEMORY_MB.contains(n))
        })?,
    })
}

/// What each setting of a server takes, in the words of "expected ..., got a number" (`[]`: any
/// item of an array, `*`: any key of an object, `""`: the server's entry itself). The top-level
/// rows are the fields a server has: an unknown key near one of them is taken for a typo of it.
#[rustfmt::skip]
const SERVER_FIELDS: &[(&str, &str)] = &[
    ("", "an object with a \"command\" (a local server) or a \"url\" (a remote one)"),
    ("command", "a string"),
    ("args", "an array of strings"),
    ("args[]", "a string"),
    ("env", "an object of strings"),
    ("env.*", "a string"),
    ("cwd", "a string (a directory)"),
    ("url", "a string"),
    ("headers", "an object of strings"),
    ("headers.*", "a string"),
    ("oauth", "an object"),
    ("oauth.*", "a string"),
    ("oauth.scopes", "an array of scope names"),
    ("oauth.scopes[]", "a scope name"),
    ("oauth.redirect_port", "a port number (0 to 65535)"),
    ("description", "a string"),
    ("disabled", "true or false"),
    ("timeout_s", "a positive number of seconds (at most 86400)"),
    ("type", "a string"),
    ("policy", "a policy (\"allow\", \"ask\" or \"deny\") or an object mapping tool names \
        or globs to policies"),
    ("policy.*", "\"allow\", \"ask\" or \"deny\""),
];

/// The same for the file's settings (each server's entry is read on its own, with SERVER_FIELDS).
#[rustfmt::skip]
const FILE_FIELDS: &[(&str, &str)] = &[
    ("", "an object with a \"servers\" (or \"mcpServers\") object"),
    ("servers", "an object mapping server names to their settings"),
    ("mcpServers", "an object mapping server names to their settings"),
    ("executor", "\"sandbox\" (the default) or \"local\" (a host python3 process per script, \
        not sandboxed)"),
    ("python", "the path (or name on PATH) of a Python 3.10 or later"),
    ("approvals", "an object {\"unannotated\": POLICY, \"timeout_s\": SECONDS}"),
    ("approvals.unannotated", "\"allow\", \"ask\" or \"deny\""),
    ("approvals.timeout_s", "a positive number of seconds (at most 86400)"),
    ("packages", "an object {\"wheels\": DIR, \"preload\": [...]}"),
    ("packages.wheels", "a directory (a string)"),
    ("packages.preload", "a list of package names"),
    ("packages.preload[]", "a package name (a string)"),
    ("data", "an object such as {\"max_file_bytes\": 8388608, \"keep_runs_s\": 3600}"),
    ("data.*", "a whole number above 0"),
    ("data.keep_runs_s", "a number of seconds above 0"),
    ("sessions", "an object {\"max\": N, \"idle_s\": SECONDS, \"memory_mb\": MIB}"),
    ("sessions.max", "a whole number of at least 1"),
    ("sessions.idle_s", "seconds, more than 0 and at most 86400"),
    ("sessions.memory_mb", "MiB from 128 to 16384"),
];

// The file's shape. None of these derives Debug: they hold credentials as written.
//
// Numbers with a range are `f64` or `Number`, never `u16` or `u64`: a type error can only say
// "got a number" (a value in the wrong place may be a credential), which tells nothing about 1.5
// or 70000; the range checks, which know they hold a plain number, show it.

/// The servers stay JSON here: each is read on its own, so that an error names it and the
/// servers keep the file's order.
#[derive(serde::Deserialize)]
struct RawFile {
    servers: Option<serde_json::Map<String, Value>>,
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<serde_json::Map<String, Value>>,
    executor: Option<String>,
    python: Option<String>,
    approvals: Option<Obj<RawApprovals>>,
    packages: Option<Obj<RawPackages>>,
    data: Option<Obj<RawData>>,
    sessions: Option<Obj<RawSessions>>,
    /// Unknown keys: warnings (see the module's invariant).
    #[serde(flatten)]
    other: BTreeMap<String, IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct RawServer {
    #[serde(rename = "type")]
    transport: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    oauth: Option<Obj<RawOAuth>>,
    description: Option<String>,
    disabled: Option<bool>,
    timeout_s: Option<f64>,
    policy: Option<RawPolicy>,
    /// Unknown keys: warnings, but for a near miss of a field.
    #[serde(flatten)]
    other: BTreeMap<String, IgnoredAny>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOAuth {
    client_id: Option<String>,
    client_secret: Option<String>,
    scopes: Option<Scopes>,
    grant: Option<String>,
    redirect_port: Option<Number>,
    client_metadata_url: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApprovals {
    unannotated: Option<String>,
    timeout_s: Option<f64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPackages {
    wheels: Option<String>,
    preload: Option<Vec<String>>,
}

/// Its fields are [`DATA_KEYS`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    max_file_bytes: Option<Number>,
    max_files_bytes: Option<Number>,
    max_output_files: Option<Number>,
    inline_bytes: Option<Number>,
    keep_runs_s: Option<f64>,
    keep_runs_mb: Option<Number>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSessions {
    max: Option<Number>,
    idle_s: Option<f64>,
    memory_mb: Option<Number>,
}

/// `T` read from a JSON object only: serde also reads a struct from an array, field by position.
/// (A struct with a flattened field, as `RawServer`, takes objects only by itself.)
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Only<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Only(std::marker::PhantomData))
            .map(Obj)
    }
}

/// `"scopes"`: an array of names, or one string of them separated by spaces (OAuth's own form).
/// Not `#[serde(untagged)]`: its error would point at the array, not at the item that is wrong.
struct Scopes(Vec<String>);

impl<'de> Deserialize<'de> for Scopes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = Scopes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of scope names")
            }
            fn visit_str<E: de::Error>(self, spaced: &str) -> Result<Scopes, E> {
                Ok(Scopes(
                    spaced.split_whitespace().map(str::to_owned).collect(),
                ))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Scopes, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(items)).map(Scopes)
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// A server's `"policy"`: one policy for all its tools, or tool-name globs mapped to policies, in
/// the file's order. Not `#[serde(untagged)]`, for the reason [`Scopes`] gives.
enum RawPolicy {
    All(String),
    Rules(Vec<(String, String)>),
}

impl RawPolicy {
    /// The rules it writes, or what is wrong with one (`approval` knows the words and globs).
    fn rules(self) -> Result<Vec<Rule>, String> {
        match self {
            RawPolicy::All(word) => Ok(vec![Rule {
                pattern: "*".to_owned(),
                policy: Policy::named(&word)?,
            }]),
            RawPolicy::Rules(rules) => rules
                .into_iter()
                .map(|(pattern, word)| Rule::written(pattern, &word))
                .collect(),
        }
    }
}

impl<'de> Deserialize<'de> for RawPolicy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = RawPolicy;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a policy")
            }
            fn visit_str<E: de::Error>(self, word: &str) -> Result<RawPolicy, E> {
                Ok(RawPolicy::All(word.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPolicy, A::Error> {
                let mut rules = Vec::new();
                while let Some(rule) = map.next_entry()? {
                    rules.push(rule);
                }
                Ok(RawPolicy::Rules(rules))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// Removes the comments (`//` keys, see the module's doc) before serde sees the keys.
fn strip_comments(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|key, _| !key.starts_with("//"));
            map.values_mut().for_each(strip_comments);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_comments),
        _ => {}
    }
}

/// What serde found wrong with a value, kept in the terms our messages use.
struct Mistake {
    /// Where, from the value given to [`typed`]: `oauth.scopes[1]` (empty: that value itself).
    at: String,
    problem: Problem,
}

enum Problem {
    /// What belongs there, and the kind of value found instead: never the value, which may be a
    /// credential.
    Kind { expected: String, got: &'static str },
    /// The last key of `at` is not a field there; `known` are the ones that are.
    Unknown { key: String, known: Vec<String> },
}

impl Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Problem::Kind { expected, got } => write!(f, "expected {expected}, got {got}"),
            Problem::Unknown { key, known } => match near(key, known.iter().map(String::as_str)) {
                Some(meant) => write!(f, "is not a known field: did you mean \"{meant}\"?"),
                None => write!(f, "is not a known field (known: {})", known.join(", ")),
            },
        }
    }
}

impl Mistake {
    /// The message of a mistake in the file's own settings (`"packages": "wheels" must be ...`).
    fn in_file(self) -> String {
        match &self.problem {
            _ if self.at.is_empty() => self.problem.to_string(),
            Problem::Kind { expected, got } => {
                format!("{} must be {expected}, got {got}", quoted(&self.at))
            }
            Problem::Unknown { .. } => format!("{} {}", quoted(&self.at), self.problem),
        }
    }
}

/// Reads `value` as `T`; a mistake says where it is and, from `fields` (see SERVER_FIELDS), what
/// belongs there.
fn typed<'de, T: Deserialize<'de>>(
    value: &'de Value,
    fields: &[(&str, &'static str)],
) -> Result<T, Mistake> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let (mut at, mut pattern, mut key) = (String::new(), String::new(), String::new());
        let mut found = Some(value);
        for segment in e.path() {
            match segment {
                Segment::Map { key: k } => {
                    found = found.and_then(|v| v.get(k));
                    let dot = if at.is_empty() { "" } else { "." };
                    at = format!("{at}{dot}{k}");
                    pattern = format!("{pattern}{dot}{k}");
                    key.clone_from(k);
                }
                Segment::Seq { index } => {
                    found = found.and_then(|v| v.get(index));
                    at = format!("{at}[{index}]");
                    pattern.push_str("[]");
                }
                Segment::Enum { .. } | Segment::Unknown => {}
            }
        }
        // serde's own words end in ", expected WHAT": the names of the fields for an unknown
        // one (each in backquotes), else the type it wanted, our fallback where `fields` has no
        // row. What comes before may quote the value: it is not used.
        let message = e.inner().to_string();
        let wanted = message
            .rsplit_once(", expected ")
            .map_or("something else", |(_, w)| w);
        let problem = if message.starts_with("unknown field `") {
            let known = wanted.split('`').skip(1).step_by(2).map(str::to_owned);
            Problem::Unknown {
                key,
                known: known.collect(),
            }
        } else {
            Problem::Kind {
                expected: expected_at(fields, &pattern).unwrap_or(wanted).to_owned(),
                got: found.map_or("nothing", kind),
            }
        };
        Mistake { at, problem }
    })
}

/// What `field` (with `[]` for an index) takes, from `fields`: its row, else its object's `.*`.
fn expected_at(fields: &[(&str, &'static str)], field: &str) -> Option<&'static str> {
    let row = |f: &str| fields.iter().find(|(k, _)| *k == f).map(|(_, e)| *e);
    row(field).or_else(|| row(&format!("{}.*", field.rsplit_once('.')?.0)))
}

/// `"data": "keep_runs_s"` for `data.keep_runs_s`: a setting of the file, then a field of it.
fn quoted(at: &str) -> String {
    match at.split_once('.') {
        Some((setting, field)) => format!("\"{setting}\": \"{field}\""),
        None => format!("\"{at}\""),
    }
}

/// The message for a setting of the file (a FILE_FIELDS row) whose value `got` is not one it takes.
fn must_be(field: &str, got: impl Display) -> String {
    let expected = expected_at(FILE_FIELDS, field).unwrap_or("something else");
    format!("{} must be {expected}, got {got}", quoted(field))
}

/// `value` as `accept` takes it, else the message naming `field` and `value` (only numbers come
/// here: no credential).
fn checked<V: Display, T>(
    field: &str,
    value: Option<V>,
    accept: impl Fn(&V) -> Option<T>,
) -> Result<Option<T>, String> {
    value
        .map(|v| accept(&v).ok_or_else(|| must_be(field, &v)))
        .transpose()
}

/// The field `key` is probably a typo of: at most two edits away, ignoring case.
fn near<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    known
        .into_iter()
        .map(|known| (strsim::damerau_levenshtein(&key, known), known))
        .filter(|&(distance, known)| distance <= 2 && distance < known.len().min(key.len().max(1)))
        .min()
        .map(|(_, known)| known)
}

/// The fields a server has: the top-level rows of SERVER_FIELDS.
fn server_fields() -> impl Iterator<Item = &'static str> {
    SERVER_FIELDS
        .iter()
        .map(|(field, _)| *field)
        .filter(|field| !field.is_empty() && !field.contains(['.', '[']))
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
    /// `field` (a SERVER_FIELDS row) holds `got`, which it does not take.
    fn expected(&self, field: &str, got: impl Display) -> ConfigError {
        let expected = expected_at(SERVER_FIELDS, field).unwrap_or("something else");
        self.field_error(field, format!("expected {expected}, got {got}"))
    }
    fn mistake(&self, mistake: Mistake) -> ConfigError {
        match mistake.at.as_str() {
            "" => self.server_error(mistake.problem.to_string()),
            field => self.field_error(field, mistake.problem.to_string()),
        }
    }
}

/// Reads one server's entry, and hands back its `"policy"` as written.
fn parse_server(
    ctx: &Ctx,
    entry: &Value,
    vars: &Vars,
    base_dir: &Path,
) -> Result<(ServerConfig, Option<RawPolicy>), ConfigError> {
    let name = ctx.server;
    if !valid_name(name) {
        return Err(
            ctx.server_error("invalid server name: use 1 to 64 characters from A-Z a-z 0-9 _ -")
        );
    }
    let raw: RawServer = typed(entry, SERVER_FIELDS).map_err(|m| ctx.mistake(m))?;

    // Claude's and Cursor's names for the two transports we speak, and the legacy one we cannot.
    let remote = match raw.transport.as_deref() {
        None => raw.url.is_some(),
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
    let local_only = [
        ("command", raw.command.is_some()),
        ("args", raw.args.is_some()),
        ("env", raw.env.is_some()),
        ("cwd", raw.cwd.is_some()),
    ];
    let remote_only = [
        ("url", raw.url.is_some()),
        ("headers", raw.headers.is_some()),
        ("oauth", raw.oauth.is_some()),
    ];
    let (misplaced, this, other) = if remote {
        (&local_only[..], "a remote server (\"url\")", "local")
    } else {
        (&remote_only[..], "a local server (\"command\")", "remote")
    };
    if let Some((field, _)) = misplaced.iter().find(|(_, given)| *given) {
        return Err(ctx.field_error(
            field,
            format!("belongs to {other} servers, but this is {this}: keep one kind per server"),
        ));
    }
    for key in raw.other.keys() {
        // A near miss ("arg", "Command", "timeout") would silently drop what the user meant.
        if let Some(meant) = near(key, server_fields()) {
            return Err(ctx.field_error(
                key,
                format!("is not a known field: did you mean \"{meant}\"?"),
            ));
        }
        tracing::warn!(
            "{}: server \"{name}\": unknown field \"{key}\" ignored (known fields: {})",
            ctx.path.display(),
            server_fields().collect::<Vec<_>>().join(", ")
        );
    }

    let disabled = raw.disabled.unwrap_or(false);
    // A disabled server is never started: a variable it names need not be set (it stays as written).
    let substituted = std::cell::RefCell::new(Vec::new());
    let vars = &Vars {
        unset_ok: disabled,
        substituted: Some(&substituted),
        ..*vars
    };
    let transport = if remote {
        parse_remote(ctx, &raw, vars)?
    } else {
        parse_stdio(ctx, &raw, vars, base_dir)?
    };

    let timeout = match raw.timeout_s {
        None => DEFAULT_TIMEOUT,
        Some(s) if timeout_within(s, MAX_TIMEOUT_S) => Duration::from_secs_f64(s),
        Some(s) => return Err(ctx.expected("timeout_s", s)),
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
    let server = ServerConfig {
        name: name.to_owned(),
        transport,
        description: raw.description.unwrap_or_default(),
        disabled,
        timeout,
        secrets,
    };
    Ok((server, raw.policy))
}

fn parse_stdio(
    ctx: &Ctx,
    raw: &RawServer,
    vars: &Vars,
    base_dir: &Path,
) -> Result<Transport, ConfigError> {
    let Some(command) = &raw.command else {
        return Err(ctx.field_error(
            "command",
            "is required: the program that starts the server, e.g. \"npx\"",
        ));
    };
    let command = vars.expand(ctx, "command", command)?;
    if command.trim().is_empty() {
        return Err(ctx.field_error("command", "is empty"));
    }
    let args = raw
        .args
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, arg)| vars.expand(ctx, &format!("args[{i}]"), arg))
        .collect::<Result<_, _>>()?;
    let env = raw
        .env
        .iter()
        .flatten()
        .map(|(key, value)| {
            let field = format!("env.{key}");
            if key.is_empty() || key.contains(['=', '\0']) {
                return Err(ctx.field_error(
                    &field,
                    "invalid variable name (empty, or contains '=' or NUL)",
                ));
            }
            Ok((key.clone(), vars.expand(ctx, &field, value)?))
        })
        .collect::<Result<_, _>>()?;
    let cwd = match &raw.cwd {
        None => None,
        Some(cwd) => {
            let expanded = vars.expand(ctx, "cwd", cwd)?;
            if expanded.is_empty() {
                return Err(ctx.field_error("cwd", "is empty"));
            }
            Some(base_dir.join(expanded))
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

fn parse_remote(ctx: &Ctx, raw: &RawServer, vars: &Vars) -> Result<Transport, ConfigError> {
    let Some(url) = &raw.url else {
        return Err(ctx.field_error(
            "url",
            "is required for a remote server: its MCP endpoint, e.g. \"https://example.com/mcp\"",
        ));
    };
    let url = vars.expand(ctx, "url", url)?;
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
    if raw.transport.as_deref() == Some("sse") {
        return Ok(Transport::Unsupported {
            reason:
                "it uses the legacy HTTP+SSE transport (\"type\": \"sse\"), which mcp-code-mode \
                     has no client for; most such servers also serve streamable HTTP (often at \
                     /mcp): use that URL with \"type\": \"http\""
                    .to_owned(),
        });
    }

    let headers = raw.headers.iter().flatten()
        .map(|(key, value)| {
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
            let value = vars.expand(ctx, &field, value)?;
            if http::HeaderValue::from_str(&value).is_err() {
                // Not shown: header values are credentials.
                return Err(ctx.field_error(
                    &field,
                    "its value (not shown) is not a valid HTTP header value: it has a line break or another control character",
                ));
            }
            Ok((key.clone(), value))
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let oauth = match &raw.oauth {
        None => OAuthSettings::default(),
        Some(Obj(oauth)) => parse_oauth(ctx, oauth, vars)?,
    };
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

fn parse_oauth(ctx: &Ctx, raw: &RawOAuth, vars: &Vars) -> Result<OAuthSettings, ConfigError> {
    let string = |key: &str, value: &Option<String>| -> Result<Option<String>, ConfigError> {
        let Some(value) = value else {
            return Ok(None);
        };
        let field = format!("oauth.{key}");
        let value = vars.expand(ctx, &field, value)?;
        if value.is_empty() {
            return Err(ctx.field_error(&field, "is empty"));
        }
        Ok(Some(value))
    };
    let client_id = string("client_id", &raw.client_id)?;
    let client_secret = string("client_secret", &raw.client_secret)?;
    let scopes = match &raw.scopes {
        None => Vec::new(),
        Some(Scopes(scopes)) => {
            if let Some(i) = scopes.iter().position(|s| s.trim().is_empty()) {
                return Err(ctx.field_error(&format!("oauth.scopes[{i}]"), "is empty"));
            }
            scopes.iter().map(|s| s.trim().to_owned()).collect()
        }
    };
    let client_credentials = match string("grant", &raw.grant)?.as_deref() {
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
    let redirect_port = match &raw.redirect_port {
        None => 0,
        Some(n) => n
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| ctx.expected("oauth.redirect_port", n))?,
    };
    let client_metadata_url = string("client_metadata_url", &raw.client_metadata_url)?;
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
            (
                r#"{"preload": [1]}"#,
                "\"preload[0]\" must be a package name (a string), got a number",
            ),
            (
                r#"{"wheel": "x"}"#,
                "\"wheel\" is not a known field: did you mean \"wheels\"?",
            ),
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
                "expected a positive number of seconds (at most 86400), got a string",
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
    fn a_wrong_type_deep_in_a_server_names_its_path_and_never_the_value() {
        let d = Dir::new();
        let cases = [
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"scopes": ["read", 7]}}"#,
                "field \"oauth.scopes[1]\": expected a scope name, got a number",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"scopes": 7}}"#,
                "field \"oauth.scopes\": expected an array of scope names, got a number",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"redirect_port": "8765"}}"#,
                "field \"oauth.redirect_port\": expected a port number (0 to 65535), got a string",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"client_secret": 12345678}}"#,
                "field \"oauth.client_secret\": expected a string, got a number",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": ["12345678"]}"#,
                "field \"oauth\": expected an object, got an array",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"clientid": "x"}}"#,
                "field \"oauth.clientid\": is not a known field: did you mean \"client_id\"?",
            ),
            (
                r#"{"url": "https://e.com/mcp", "oauth": {"token": "x"}}"#,
                "field \"oauth.token\": is not a known field (known: client_id, client_secret",
            ),
            (
                r#"{"url": "https://e.com/mcp", "headers": {"X-Key": 12345678}}"#,
                "field \"headers.X-Key\": expected a string, got a number",
            ),
            (
                r#"{"url": "https://e.com/mcp", "headers": {"X-Key": ["12345678"]}}"#,
                "field \"headers.X-Key\": expected a string, got an array",
            ),
            (
                r#"{"command": "x", "env": {"PIN": 12345678}}"#,
                "field \"env.PIN\": expected a string, got a number",
            ),
            (
                r#"{"command": "x", "env": "PIN=12345678"}"#,
                "field \"env\": expected an object of strings, got a string",
            ),
            (
                r#"{"command": "x", "args": ["ok", ["12345678"]]}"#,
                "field \"args[1]\": expected a string, got an array",
            ),
        ];
        for (entry, expected) in cases {
            let path = d.config(&format!(r#"{{"servers": {{"r": {entry}}}}}"#));
            let e = error(&path, &[]);
            assert!(
                e.starts_with(&format!("{}: server \"r\": field ", path.display())),
                "{e}"
            );
            assert!(e.contains(expected), "{entry}: {e}");
            assert!(!e.contains("12345678"), "a value leaked: {e}");
        }
    }

    #[test]
    fn comments_are_ignored_at_any_depth() {
        let d = Dir::new();
        let path = d.config(
            r#"{"//": "top", "servers": {"//": "a note", "a": {
                "// why": "x", "url": "https://e.com/mcp",
                "oauth": {"// scopes": "read only", "scopes": "read"},
                "policy": {"//": "read-only tools", "read_*": "allow"}
            }}, "data": {"// inline": "8 KiB", "inline_bytes": 8192},
               "sessions": {"//": 1, "max": 2}, "packages": {"//": "none"}}"#,
        );
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(remote(&config.servers[0]).oauth.scopes, ["read"]);
        assert_eq!(config.approvals.servers["a"].len(), 1);
        assert_eq!(config.data.inline_bytes, Some(8192));
        assert_eq!(config.sessions.max, Some(2));
    }

    #[test]
    fn data_and_sessions_check_their_types_ranges_and_keys() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {}, "data": {"max_file_bytes": 10, "keep_runs_s": 1.5, "keep_runs_mb": 3},
                "sessions": {"max": 2, "idle_s": 30, "memory_mb": 256}}"#,
        );
        let c = load_in(&path, &[]).expect("loads");
        assert_eq!(
            c.data,
            DataSettings {
                max_file_bytes: Some(10),
                keep_runs_s: Some(1.5),
                keep_runs_mb: Some(3),
                ..Default::default()
            }
        );
        assert_eq!(
            c.sessions,
            SessionSettings {
                max: Some(2),
                idle_s: Some(30.0),
                memory_mb: Some(256)
            }
        );
        for (setting, says) in [
            (
                r#""data": {"max_file_bytes": 1.5}"#,
                r#""data": "max_file_bytes" must be a whole number above 0, got 1.5"#,
            ),
            (
                r#""data": {"inline_bytes": 0}"#,
                r#""data": "inline_bytes" must be a whole number above 0, got 0"#,
            ),
            (
                r#""data": {"keep_runs_s": "1h"}"#,
                r#""data": "keep_runs_s" must be a number of seconds above 0, got a string"#,
            ),
            (
                r#""data": {"max_file_byte": 1}"#,
                r#""data": "max_file_byte" is not a known field: did you mean "max_file_bytes"?"#,
            ),
            (
                r#""data": [8388608]"#,
                r#""data" must be an object such as {"max_file_bytes": 8388608"#,
            ),
            (
                r#""sessions": {"max": 0}"#,
                r#""sessions": "max" must be a whole number of at least 1, got 0"#,
            ),
            (
                r#""sessions": {"idle_s": 86401}"#,
                r#""sessions": "idle_s" must be seconds, more than 0 and at most 86400, got 86401"#,
            ),
            (
                r#""sessions": {"memory_mb": 64}"#,
                &format!(
                    r#""sessions": "memory_mb" must be MiB from {} to {}, got 64"#,
                    SESSION_MEMORY_MB.start(),
                    SESSION_MEMORY_MB.end()
                ),
            ),
            (
                r#""sessions": {"idle": 5}"#,
                r#""sessions": "idle" is not a known field: did you mean "idle_s"?"#,
            ),
            (
                r#""sessions": "many""#,
                r#""sessions" must be an object {"max": N"#,
            ),
        ] {
            let path = d.config(&format!(r#"{{"servers": {{}}, {setting}}}"#));
            let e = error(&path, &[]);
            assert!(
                e.starts_with(&format!("{}: ", path.display())) && e.contains(says),
                "{setting}: {e}"
            );
        }
    }

    #[test]
    fn the_tables_name_the_fields_serde_reads() {
        // Each server field the messages (and "did you mean") know is one RawServer reads.
        for field in server_fields() {
            let entry = serde_json::json!({ field: null });
            let raw: RawServer =
                typed(&entry, SERVER_FIELDS).unwrap_or_else(|m| panic!("{field}: {}", m.problem));
            assert!(raw.other.is_empty(), "{field} is not a field of RawServer");
        }
        let data = Value::Object(
            DATA_KEYS
                .map(|k| (k.to_owned(), 1.into()))
                .into_iter()
                .collect(),
        );
        let raw: RawData = typed(&data, FILE_FIELDS)
            .ok()
            .expect("DATA_KEYS are RawData's");
        assert!(raw.max_file_bytes.is_some() && raw.keep_runs_mb.is_some());
    }

    #[test]
    fn empty_servers_is_fine() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {}}"#);
        assert!(load_in(&path, &[]).expect("loads").servers.is_empty());
    }
}
