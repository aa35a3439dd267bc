//! approval — which tool calls a script may make on its own, which ask the person, which never run.
//!
//! Each tool has a policy: `allow`, `ask` or `deny`. The config sets it per server (`"policy"`:
//! one policy, or tool-name globs mapped to policies); otherwise the tool's MCP annotations decide
//! (read-only → allow; destructive or open-world writes → ask; additive closed-world writes →
//! allow; a tool with no annotations → `approvals.unannotated`, `ask` unless configured).
//!
//! [`ApprovingHost`] applies the policy in front of the hub. An `ask` pauses the job's clock
//! ([`RunControl`]) and hands a [`Question`] to whoever serves the client (the MCP front turns it
//! into an elicitation); no asker means nobody can be asked, and `ask` is refused with a message
//! saying how to allow the tool. Every decision goes into the call's record and the log.
//! No MCP wire type is used here.

use crate::bridge::view::{PythonView, ViewCache};
use crate::bridge::{Approval, ServerCatalog, ToolCallError, ToolCallRecord, ToolHost, ToolSpec};
use crate::engine::RunControl;
use crate::hub::Hub;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long an `ask` waits for the person's answer unless `approvals.timeout_s` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Allow,
    Ask,
    Deny,
}

impl Policy {
    /// The policy a config names, or why `word` is none.
    pub fn named(word: &str) -> Result<Policy, String> {
        match word {
            "allow" => Ok(Policy::Allow),
            "ask" => Ok(Policy::Ask),
            "deny" => Ok(Policy::Deny),
            _ => Err(format!(
                "unknown policy \"{word}\": use \"allow\", \"ask\" or \"deny\""
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Allow => "allow",
            Policy::Ask => "ask",
            Policy::Deny => "deny",
        }
    }
}

/// One entry of a server's `"policy"`: tool names matching `pattern` (`*` any run of
/// characters, `?` one) get `policy`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub pattern: String,
    pub policy: Policy,
}

/// The approval settings of a config (and `--approve-all`).
#[derive(Debug, Clone, PartialEq)]
pub struct Approvals {
    /// Each server's rules, as written.
    pub servers: BTreeMap<String, Vec<Rule>>,
    /// The policy of a tool without annotations that no rule names (`approvals.unannotated`).
    pub unannotated: Policy,
    /// How long an `ask` waits for an answer (`approvals.timeout_s`).
    pub timeout: Duration,
    /// `--approve-all`: every `ask` is allowed without asking (`deny` still holds).
    pub approve_all: bool,
    /// The config file's name, for messages that say where to change a policy.
    pub file: String,
}

impl Default for Approvals {
    fn default() -> Self {
        Self {
            servers: BTreeMap::new(),
            unannotated: Policy::Ask,
            timeout: DEFAULT_TIMEOUT,
            approve_all: false,
            file: "the config file".into(),
        }
    }
}

/// A tool's policy and what set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub policy: Policy,
    pub by: String,
}

impl Approvals {
    /// The policy of `server`'s `tool`: the most specific rule naming it (an exact name, else the
    /// longest matching glob), else its annotations, else `unannotated`.
    pub fn verdict(&self, server: &str, tool: &ToolSpec) -> Verdict {
        let rule = self.servers.get(server).and_then(|rules| {
            rules
                .iter()
                .filter(|r| glob_match(&r.pattern, &tool.name))
                .max_by_key(|r| (!r.pattern.contains(['*', '?']), r.pattern.len()))
        });
        if let Some(rule) = rule {
            return Verdict {
                policy: rule.policy,
                by: format!(
                    "the rule \"{}\": \"{}\" of server \"{server}\" in {}",
                    rule.pattern,
                    rule.policy.as_str(),
                    self.file
                ),
            };
        }
        let hints = tool.annotations.as_ref().and_then(Value::as_object);
        let hint = |key: &str| hints.and_then(|h| h.get(key)).and_then(Value::as_bool);
        let (read_only, destructive, open_world) = (
            hint("readOnlyHint"),
            hint("destructiveHint"),
            hint("openWorldHint"),
        );
        let (policy, by) = match (read_only, destructive, open_world) {
            (Some(true), _, _) => (Policy::Allow, "its annotations: readOnlyHint"),
            (None, None, None) => (
                self.unannotated,
                "its lack of annotations (approvals.unannotated)",
            ),
            // MCP's defaults: a tool that may write is destructive and open-world unless it says not.
            (_, d, _) if d != Some(false) => (Policy::Ask, "its annotations: destructiveHint"),
            (_, _, o) if o != Some(false) => {
                (Policy::Ask, "its annotations: writes, openWorldHint")
            }
            _ => (
                Policy::Allow,
                "its annotations: additive writes only (destructiveHint and openWorldHint false)",
            ),
        };
        Verdict {
            policy,
            by: by.to_owned(),
        }
    }

    /// The line a tool's description starts with, so the discovery tools and Python's
    /// docstrings show its policy.
    fn label(&self, verdict: &Verdict) -> String {
        match verdict.policy {
            Policy::Ask if self.approve_all => "[approval: ask, approved by --approve-all]".into(),
            Policy::Ask => "[approval: ask: each call asks the user]".into(),
            Policy::Allow => "[approval: allow]".into(),
            Policy::Deny => "[approval: deny: calls fail]".into(),
        }
    }

    /// How to allow `server.tool` in the config, for messages.
    fn how_to_allow(&self, server: &str, tool: &str) -> String {
        format!(
            "to allow it, add \"policy\": {{\"{tool}\": \"allow\"}} to server \"{server}\" in {}, or start mcp-code-mode with --approve-all",
            self.file
        )
    }
}

/// Whether `name` matches `pattern`: `*` is any run of characters, `?` one character.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Why `pattern` is not a glob we take, if it is not.
pub fn check_glob(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("an empty tool pattern matches nothing: use \"*\" for every tool".into());
    }
    if let Some(c) = pattern.chars().find(|c| "[]{}!\\".contains(*c)) {
        return Err(format!(
            "the tool pattern \"{pattern}\" has '{c}': patterns take only * (any characters) and ? (one character)"
        ));
    }
    Ok(())
}

impl Rule {
    /// The rule a server's `"policy"` writes as `"pattern": "word"`, or what is wrong with it.
    pub fn written(pattern: String, word: &str) -> Result<Rule, String> {
        check_glob(&pattern)?;
        let policy = Policy::named(word).map_err(|e| format!("tool pattern \"{pattern}\": {e}"))?;
        Ok(Rule { pattern, policy })
    }
}

/// The catalogue with each tool's policy at the start of its description, made once per listing
/// of a server (keyed by the hub's tool list it was made from).
#[derive(Default)]
pub struct Described {
    cache: Mutex<HashMap<String, Labelled>>,
    view: ViewCache,
}

impl Described {
    pub fn catalog(
        &self,
        approvals: &Approvals,
        catalog: Vec<ServerCatalog>,
    ) -> Vec<ServerCatalog> {
        let mut cache = self.cache.lock();
        catalog
            .into_iter()
            .map(|mut server| {
                let name = server.server.clone();
                let tools = match cache.get(&name) {
                    Some((raw, described)) if Arc::ptr_eq(raw, &server.tools) => described.clone(),
                    _ => {
                        let described: Vec<ToolSpec> = server
                            .tools
                            .iter()
                            .map(|tool| {
                                let label = approvals.label(&approvals.verdict(&name, tool));
                                let mut tool = tool.clone();
                                tool.description = if tool.description.is_empty() {
                                    label
                                } else {
                                    format!("{label} {}", tool.description)
                                };
                                tool
                            })
                            .collect();
                        let described = Arc::new(described);
                        cache.insert(name, (server.tools.clone(), described.clone()));
                        described
                    }
                };
                server.tools = tools;
                server
            })
            .collect()
    }
}

/// A server's tools as the hub listed them, and the same with their policies shown.
type Labelled = (Arc<Vec<ToolSpec>>, Arc<Vec<ToolSpec>>);

/// What the person is asked about one call.
pub struct Question {
    pub server: String,
    pub tool: String,
    /// The whole question: who asks, the call with a readable summary of its arguments, why.
    pub message: String,
    /// The label of the "allow every remaining call to this tool in this run" choice.
    pub allow_all_label: String,
    pub answer: oneshot::Sender<Answer>,
}

/// The person's answer (or why there is none).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Run this call.
    Once,
    /// Run this call and every later call to the same tool in this execution.
    AllInRun,
    Declined,
    /// Stop the script.
    Cancelled,
    /// The question could not be put or answered (the client failed, the connection closed).
    Failed(String),
}

/// The approval policy in front of the hub, for one execution.
pub struct ApprovingHost {
    hub: Arc<Hub>,
    approvals: Arc<Approvals>,
    described: Arc<Described>,
    /// Where questions go; `None` when the client cannot ask its user.
    asker: Option<mpsc::UnboundedSender<Question>>,
    control: RunControl,
    state: Arc<RunState>,
}

#[derive(Default)]
struct RunState {
    /// Tools the person allowed for the rest of this execution.
    allowed: Mutex<HashSet<(String, String)>>,
    /// One question at a time: a second `ask` waits, then sees the first answer's allow-all.
    asking: tokio::sync::Mutex<()>,
    /// The call whose cancelled approval stopped the script: the job may end before the
    /// sandbox records it.
    stopped: Mutex<Option<ToolCallRecord>>,
}

impl ApprovingHost {
    pub fn new(
        hub: Arc<Hub>,
        approvals: Arc<Approvals>,
        described: Arc<Described>,
        asker: Option<mpsc::UnboundedSender<Question>>,
        control: RunControl,
    ) -> Self {
        Self {
            hub,
            approvals,
            described,
            asker,
            control,
            state: Default::default(),
        }
    }
}

impl ApprovingHost {
    /// The call whose approval the user cancelled (which stopped the script), if one was.
    pub fn stopped_call(&self) -> Option<ToolCallRecord> {
        self.state.stopped.lock().clone()
    }
}

impl ToolHost for ApprovingHost {
    fn catalog(&self) -> Vec<ServerCatalog> {
        self.described.catalog(&self.approvals, self.hub.catalog())
    }

    fn python_view(&self) -> Arc<PythonView> {
        // The version first: the catalogue read after it is at least that new.
        let version = *self.hub.changes().borrow();
        Arc::new(
            self.described
                .view
                .view(version, &self.catalog(), &self.hub.unavailable()),
        )
    }

    fn unavailable(&self) -> Vec<(String, String)> {
        self.hub.unavailable()
    }

    fn wait_ready(&self, server: &str) -> BoxFuture<'static, Result<(), ToolCallError>> {
        self.hub.wait_ready(server)
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        let call = self.call_audited(server, tool, arguments);
        Box::pin(async move { call.await.0 })
    }

    fn call_audited(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, (Result<Value, ToolCallError>, Option<Approval>)> {
        let (hub, approvals, asker, control, state) = (
            self.hub.clone(),
            self.approvals.clone(),
            self.asker.clone(),
            self.control.clone(),
            self.state.clone(),
        );
        let (server, tool) = (server.to_owned(), tool.to_owned());
        Box::pin(async move {
            let started = std::time::Instant::now();
            // A server still starting has no tools listed yet: its policy needs them.
            let _ = hub.wait_ready(&server).await;
            let spec = hub
                .catalog()
                .into_iter()
                .find(|s| s.server == server)
                .and_then(|s| s.tools.iter().find(|t| t.name == tool).cloned());
            let Some(spec) = spec else {
                // Not a listed tool: the hub refuses it, naming what exists.
                return (hub.call(&server, &tool, arguments).await, None);
            };
            let verdict = approvals.verdict(&server, &spec);
            let name = format!("{server}.{tool}");
            let decided = |decision: &str, by: String| {
                tracing::info!(target: "approval", "{name}: {decision} by {by}");
                Approval {
                    decision: decision.to_owned(),
                    by,
                }
            };
            let refuse = |message: String, approval: Approval| {
                (Err(ToolCallError::Denied(message)), Some(approval))
            };
            let approval = match verdict.policy {
                Policy::Allow => decided("allowed", verdict.by),
                Policy::Deny => {
                    let message = format!("{name} is denied by {}", verdict.by);
                    return refuse(message, decided("denied", verdict.by));
                }
                Policy::Ask if approvals.approve_all => {
                    decided("approved", "--approve-all".to_owned())
                }
                Policy::Ask => {
                    let allowed = |state: &RunState| {
                        state
                            .allowed
                            .lock()
                            .contains(&(server.clone(), tool.clone()))
                    };
                    let for_run = || format!("the user, for every call to {name} in this run");
                    let Some(asker) = asker else {
                        let message = format!(
                            "{name} needs the user's approval (policy \"ask\", set by {}), but this MCP client cannot ask its user (it does not support elicitation), so the call was not made; {}",
                            verdict.by,
                            approvals.how_to_allow(&server, &tool)
                        );
                        let by = "no way to ask: the client does not support elicitation";
                        return refuse(message, decided("denied", by.to_owned()));
                    };
                    let _one = state.asking.lock().await;
                    if allowed(&state) {
                        decided("approved", for_run())
                    } else {
                        let paused = control.pause();
                        let (tx, rx) = oneshot::channel();
                        let question = Question {
                            message: format!(
                                "A script run by mcp-code-mode wants to call {name} on MCP server \"{server}\":\n{}\nAllow this call? (policy \"ask\", set by {})",
                                summarize(&tool, &arguments),
                                verdict.by
                            ),
                            allow_all_label: format!(
                                "Allow all remaining calls to {name} in this run"
                            ),
                            server: server.clone(),
                            tool: tool.clone(),
                            answer: tx,
                        };
                        let answer = if asker.send(question).is_err() {
                            Err("the request it belongs to has ended".to_owned())
                        } else {
                            match tokio::time::timeout(approvals.timeout, rx).await {
                                Ok(Ok(answer)) => Ok(answer),
                                Ok(Err(_)) => Err("the request it belongs to has ended".to_owned()),
                                Err(_) => Err(format!(
                                    "no answer within {} s (approvals.timeout_s)",
                                    approvals.timeout.as_secs_f64()
                                )),
                            }
                        };
                        drop(paused);
                        match answer {
                            Ok(Answer::Once) => decided("approved", "the user".to_owned()),
                            Ok(Answer::AllInRun) => {
                                state.allowed.lock().insert((server.clone(), tool.clone()));
                                decided("approved", for_run())
                            }
                            Ok(Answer::Declined) => {
                                return refuse(
                                    "declined by the user".to_owned(),
                                    decided("declined", "the user".to_owned()),
                                )
                            }
                            Ok(Answer::Cancelled) => {
                                let approval = decided("cancelled", "the user".to_owned());
                                *state.stopped.lock() = Some(ToolCallRecord {
                                    server: server.clone(),
                                    tool: tool.clone(),
                                    ms: crate::bridge::tools::round_ms(started.elapsed()),
                                    ok: false,
                                    approval: Some(approval.clone()),
                                });
                                control.stop(
                                    "ApprovalCancelled",
                                    format!("the user cancelled the approval of {name}: the script was stopped"),
                                );
                                return refuse(
                                    "cancelled by the user: the script is stopped".to_owned(),
                                    approval,
                                );
                            }
                            Ok(Answer::Failed(why)) | Err(why) => {
                                return refuse(
                                    format!("not approved: {why}; the call was not made"),
                                    decided("unanswered", why),
                                )
                            }
                        }
                    }
                }
            };
            (hub.call(&server, &tool, arguments).await, Some(approval))
        })
    }
}

/// `tool(key=value, ...)` with each value cut short, so the person reads what will happen.
pub fn summarize(tool: &str, arguments: &Map<String, Value>) -> String {
    const EACH: usize = 200;
    const ALL: usize = 1500;
    let mut parts = Vec::new();
    for (key, value) in arguments {
        let text = value.to_string();
        let shown = if text.len() > EACH {
            let end = text.floor_char_boundary(EACH);
            format!("{}… ({} bytes)", &text[..end], text.len())
        } else {
            text
        };
        parts.push(format!("{key}={shown}"));
    }
    let mut summary = format!("{tool}({})", parts.join(", "));
    if summary.len() > ALL {
        let end = summary.floor_char_boundary(ALL);
        summary = format!("{}… (cut)", &summary[..end]);
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, annotations: Option<Value>) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            python_name: String::new(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations,
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", "write_file"));
        assert!(glob_match("write_*", "write_file"));
        assert!(glob_match("*_file", "write_file"));
        assert!(glob_match("w?ite_*e", "write_file"));
        assert!(!glob_match("read_*", "write_file"));
        assert!(!glob_match("write", "write_file"));
        assert!(check_glob("a[b]").unwrap_err().contains("'['"));
        assert!(check_glob("").is_err());
    }

    #[test]
    fn defaults_from_annotations_and_the_most_specific_rule() {
        let mut a = Approvals::default();
        let ro = tool("read", Some(json!({"readOnlyHint": true})));
        let destructive = tool("write_file", Some(json!({"readOnlyHint": false})));
        let additive = tool(
            "mkdir",
            Some(json!({"readOnlyHint": false, "destructiveHint": false, "openWorldHint": false})),
        );
        let open = tool(
            "send",
            Some(json!({"readOnlyHint": false, "destructiveHint": false})),
        );
        let bare = tool("thing", None);
        assert_eq!(a.verdict("s", &ro).policy, Policy::Allow);
        assert_eq!(a.verdict("s", &destructive).policy, Policy::Ask);
        assert_eq!(a.verdict("s", &additive).policy, Policy::Allow);
        assert_eq!(a.verdict("s", &open).policy, Policy::Ask);
        assert_eq!(a.verdict("s", &bare).policy, Policy::Ask);
        a.unannotated = Policy::Deny;
        assert_eq!(a.verdict("s", &bare).policy, Policy::Deny);
        let rules = [("*", "deny"), ("write_*", "ask"), ("write_file", "allow")];
        a.servers.insert(
            "s".into(),
            rules
                .into_iter()
                .map(|(pattern, word)| Rule::written(pattern.into(), word).unwrap())
                .collect(),
        );
        assert_eq!(a.verdict("s", &destructive).policy, Policy::Allow);
        assert_eq!(a.verdict("s", &ro).policy, Policy::Deny);
        assert!(a.verdict("s", &ro).by.contains("\"*\": \"deny\""));
        assert_eq!(a.verdict("other", &ro).policy, Policy::Allow);
    }

    #[test]
    fn bad_rules_are_named() {
        let e = Rule::written("write_*".into(), "maybe").unwrap_err();
        assert_eq!(
            e,
            "tool pattern \"write_*\": unknown policy \"maybe\": use \"allow\", \"ask\" or \"deny\""
        );
        let e = Rule::written("write_[ab]".into(), "deny").unwrap_err();
        assert!(e.contains("'['"), "{e}");
        assert_eq!(Policy::named("deny"), Ok(Policy::Deny));
    }

    #[test]
    fn summaries_are_short() {
        let args = json!({"path": "/a/b.txt", "content": "x".repeat(1000)});
        let s = summarize("write_file", args.as_object().unwrap());
        assert!(s.starts_with("write_file("), "{s}");
        assert!(s.contains("path=\"/a/b.txt\""), "{s}");
        assert!(s.contains("(1002 bytes)") && s.len() < 400, "{s}");
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    /// Loads `text` as a config file named servers.json; the error's text when it fails.
    fn load(text: &str) -> Result<crate::config::Config, String> {
        let dir = std::env::temp_dir().join(format!(
            "mcp-code-mode-approval-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("servers.json");
        std::fs::write(&path, text).unwrap();
        let loaded = crate::config::load_with_env(&path, &|_| None).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        loaded
    }

    #[test]
    fn config_errors_name_the_file_the_server_and_the_field() {
        let e =
            load(r#"{"servers": {"fs": {"command": "x", "policy": {"read_*": 3}}}}"#).unwrap_err();
        assert!(
            e.contains("server \"fs\": field \"policy.read_*\": expected \"allow\", \"ask\" or \"deny\", got a number"),
            "{e}"
        );
        let e = load(r#"{"approvals": {"timeout": 3}, "servers": {}}"#).unwrap_err();
        assert!(
            e.contains(
                "\"approvals\": \"timeout\" is not a known field: did you mean \"timeout_s\"?"
            ),
            "{e}"
        );
        let e = load(r#"{"approvals": {"timeout_s": 0}, "servers": {}}"#).unwrap_err();
        assert!(
            e.contains("\"approvals\": \"timeout_s\" must be a positive number of seconds (at most 86400), got 0"),
            "{e}"
        );
        let e = load(r#"{"approvals": ["ask"], "servers": {}}"#).unwrap_err();
        assert!(
            e.contains("\"approvals\" must be an object {\"unannotated\": POLICY, \"timeout_s\": SECONDS}, got an array"),
            "{e}"
        );
        let e =
            load(r#"{"servers": {"fs": {"command": "x", "policy": {"write_*": "sometimes"}}}}"#)
                .unwrap_err();
        assert!(
            e.contains("servers.json: server \"fs\": field \"policy\": tool pattern \"write_*\": unknown policy \"sometimes\": use \"allow\", \"ask\" or \"deny\""),
            "{e}"
        );
        let e = load(r#"{"servers": {"fs": {"command": "x", "policy": {"write_[ab]": "deny"}}}}"#)
            .unwrap_err();
        assert!(e.contains("field \"policy\"") && e.contains("'['"), "{e}");
        let e = load(r#"{"servers": {"fs": {"command": "x", "policy": true}}}"#).unwrap_err();
        assert!(e.contains("field \"policy\": expected a policy"), "{e}");
        let e = load(r#"{"approvals": {"unannotated": "yes"}, "servers": {}}"#).unwrap_err();
        assert!(
            e.contains("servers.json: \"approvals\": \"unannotated\": unknown policy \"yes\""),
            "{e}"
        );
        let config = load(
            r#"{"approvals": {"unannotated": "deny", "timeout_s": 12}, "servers": {"fs": {"command": "x", "policy": "ask"}}}"#,
        )
        .unwrap();
        let a = &config.approvals;
        assert_eq!(
            (a.unannotated, a.timeout),
            (Policy::Deny, Duration::from_secs(12))
        );
        assert_eq!(
            a.servers["fs"],
            vec![Rule {
                pattern: "*".into(),
                policy: Policy::Ask
            }]
        );
        assert_eq!(a.file, "servers.json");
    }

    #[test]
    fn the_example_file_has_policies() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/mcp_servers.example.json");
        let home = |name: &str| (name == "HOME").then(|| "/home/u".to_owned());
        let config = crate::config::load_with_env(&path, &home).expect("the example loads");
        let rules = &config.approvals.servers["filesystem"];
        assert!(rules.contains(&Rule {
            pattern: "move_file".into(),
            policy: Policy::Deny
        }));
        assert_eq!(config.approvals.timeout, Duration::from_secs(300));
    }
}
