//! config — finds and loads the JSON file that lists the downstream MCP servers.
//!
//! Two shapes are accepted: ours, `{"servers": {...}}`, and the one Claude Desktop and Cursor use,
//! `{"mcpServers": {...}}`, so an existing file can be pointed at as is. `${VAR}` and
//! `${VAR:-default}` are expanded in `command`, `args`, `env` values and `cwd`, from the process
//! environment and then from a `.env` file beside the config file.
//!
//! Keys starting with `//` are comments (JSON has none) and are ignored.
//!
//! **Invariant:** every error names the file, and where it applies the server and the field, so a
//! user can fix the file without reading this code. Problems that do not stop us from running
//! (unknown keys, HTTP servers we cannot reach yet) are warnings, not errors, except a near miss
//! of a known field (`"arg"`), which would silently drop what the user meant.

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

const KNOWN_FIELDS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "description",
    "disabled",
    "timeout_s",
    "type",
];

/// The loaded configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from, as given (used in messages).
    pub path: PathBuf,
    /// Every stdio server, disabled ones included (marked), sorted by name.
    pub servers: Vec<ServerConfig>,
}

/// One downstream server, started as a child process speaking MCP on stdio.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// Added to (not replacing) the environment the child inherits.
    pub env: BTreeMap<String, String>,
    /// Working directory; a relative `cwd` in the file is resolved against the file's folder.
    pub cwd: Option<PathBuf>,
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
#[derive(Debug, Clone, PartialEq)]
pub struct Secret {
    pub name: String,
    pub value: String,
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
    for other in root.keys().filter(|k| *k != key && !is_comment(k)) {
        tracing::warn!(
            "{}: unknown top-level key \"{other}\" ignored (expected only \"{key}\")",
            path.display()
        );
    }

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

    let mut parsed = Vec::new();
    for (name, entry) in servers.iter().filter(|(name, _)| !is_comment(name)) {
        let ctx = Ctx { path, server: name };
        if let Some(server) = parse_server(&ctx, entry, &vars, &base_dir)? {
            parsed.push(server);
        }
    }
    Ok(Config {
        path: path.to_path_buf(),
        servers: parsed,
    })
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
) -> Result<Option<ServerConfig>, ConfigError> {
    let name = ctx.server;
    if !valid_name(name) {
        return Err(
            ctx.server_error("invalid server name: use 1 to 64 characters from A-Z a-z 0-9 _ -")
        );
    }
    let Value::Object(entry) = entry else {
        return Err(ctx.server_error(format!(
            "expected an object with at least \"command\", got {}",
            kind(entry)
        )));
    };

    // Remote servers are common in copied Claude/Cursor files; skipping them keeps the rest usable.
    let transport = match entry.get("type") {
        None => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(other) => {
            return Err(ctx.field_error("type", format!("expected a string, got {}", kind(other))))
        }
    };
    let remote = matches!(
        transport,
        Some("http" | "sse" | "streamable-http" | "streamableHttp")
    );
    if remote || entry.contains_key("url") {
        tracing::warn!(
            "{}: server \"{name}\" is skipped: HTTP/SSE servers (\"url\" or \"type\": \"http\"/\"sse\") are not supported yet, only stdio servers with a \"command\"",
            ctx.path.display()
        );
        return Ok(None);
    }
    if let Some(t) = transport.filter(|t| *t != "stdio") {
        return Err(ctx.field_error(
            "type",
            format!("unknown transport \"{t}\": only \"stdio\" is supported"),
        ));
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
            "{}: server \"{name}\": unknown field \"{key}\" ignored (known fields: command, args, env, cwd, description, disabled, timeout_s)",
            ctx.path.display()
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

    let mut secrets = substituted.into_inner();
    secrets.extend(env.iter().map(|(name, value)| Secret {
        name: name.clone(),
        value: value.clone(),
    }));
    Ok(Some(ServerConfig {
        name: name.to_owned(),
        command,
        args,
        env,
        cwd,
        description,
        disabled,
        timeout,
        secrets,
    }))
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
                    format!("unterminated \"${{\" in {input:?} (write $${{ for a literal ${{)"),
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
fn kind(value: &Value) -> &'static str {
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
        assert_eq!(fs.command, "npx");
        assert_eq!(fs.args, ["-y", "pkg", "/tmp"]);
        assert_eq!(fs.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(fs.cwd.as_deref(), Some(d.dir.path().join("sub").as_path()));
        assert_eq!(fs.description, "files");
        assert!(!fs.disabled);
        assert_eq!(fs.timeout, Duration::from_millis(2500));
        let off = &config.servers[1];
        assert!(off.disabled);
        assert_eq!(off.timeout, DEFAULT_TIMEOUT);
        assert!(off.args.is_empty() && off.env.is_empty() && off.cwd.is_none());
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
            config.servers[0].cwd.as_deref(),
            Some(Path::new("/var/tmp"))
        );
    }

    #[test]
    fn http_servers_are_skipped_not_errors() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {"remote": {"url": "https://example.com/mcp"},
                            "sse": {"type": "sse", "command": "x"},
                            "local": {"type": "stdio", "command": "x"}}}"#,
        );
        let config = load_in(&path, &[]).expect("loads");
        let names: Vec<_> = config.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["local"]);
    }

    #[test]
    fn a_disabled_server_does_not_need_its_variables_set() {
        let d = Dir::new();
        let path = d.config(
            r#"{"servers": {"off": {"command": "x", "disabled": true, "env": {"K": "${UNSET_TOKEN}"}},
                            "on": {"command": "y"}}}"#,
        );
        let config = load_in(&path, &[]).expect("loads");
        assert_eq!(config.servers[0].env["K"], "${UNSET_TOKEN}");
        let path =
            d.config(r#"{"servers": {"on": {"command": "x", "env": {"K": "${UNSET_TOKEN}"}}}}"#);
        let e = load_in(&path, &[])
            .expect_err("an enabled server needs it")
            .to_string();
        assert!(e.contains("${UNSET_TOKEN} is not set"), "{e}");
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
        assert_eq!(a.command, "node");
        assert_eq!(
            a.args,
            ["--root=/srv", "fallback", "$HOME", "${LITERAL}", ""]
        );
        assert_eq!(a.env["TOKEN"], "Bearer s3cret");
        assert_eq!(a.cwd.as_deref(), Some(Path::new("/opt")));
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
        assert_eq!(a.env["T"], "from-file");
        assert_eq!(a.env["O"], "a \"quoted\" value");
        assert_eq!(a.env["S"], "$raw");
        assert_eq!(a.env["P"], "x");
        let a = &load_in(&path, &[("TOKEN", "from-env")])
            .expect("loads")
            .servers[0];
        assert_eq!(a.env["T"], "from-env");
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
                "unknown transport \"websocket\": only \"stdio\" is supported",
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
            .ends_with("server \"a\": expected an object with at least \"command\", got a string"));
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
            ["filesystem", "memory"],
            "the HTTP example is skipped"
        );
        assert_eq!(config.servers[0].args[2], "/home/u/projects");
        assert_eq!(config.servers[0].timeout, Duration::from_secs(30));
        assert_eq!(
            config.servers[1].env["MEMORY_FILE_PATH"],
            "/tmp/mcp-code-mode-memory.jsonl"
        );
        assert_eq!(
            config.servers[1].cwd.as_deref(),
            Some(path.parent().expect("a folder").join(".").as_path())
        );
    }

    #[test]
    fn empty_servers_is_fine() {
        let d = Dir::new();
        let path = d.config(r#"{"servers": {}}"#);
        assert!(load_in(&path, &[]).expect("loads").servers.is_empty());
    }
}
