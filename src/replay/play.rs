//! `Player`: a [`ToolHost`] that starts no server and answers every call from a cassette.
//!
//! Strict matching (the default) holds a script to what it did when recorded: each call must
//! equal an unused recorded one (server, tool, arguments), and the answers come back in the
//! order the calls completed when recorded ([`HANDOFF`] apart), so a script that reacts to
//! answers as they arrive (`asyncio.as_completed`, tasks that print) does the same things in the
//! same order. Calls that were in flight together may arrive in any order (their order is the
//! scheduler's, not the script's); a call recorded after another had completed waits for it
//! until nothing has happened for [`STALL`], then fails as out of order. `MatchMode::Any`
//! accepts any order and answers at once.
//!
//! A call the cassette does not hold fails with a `ToolError` naming the first divergence
//! (server, tool, an argument, or one call too many) and the nearest recorded call.

use super::cassette::{Call, Cassette};
use super::redact::Redactor;
use crate::bridge::view::PythonView;
use crate::bridge::{ServerCatalog, ToolCallError, ToolHost};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How calls are matched to the recorded ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MatchMode {
    /// In the recorded order (calls in flight together in any order among themselves); answers
    /// in the recorded completion order.
    #[default]
    Strict,
    /// In any order, each recorded call used once; answers at once.
    Any,
}

/// How long a held call waits with no answer given meanwhile. Then a call recorded after another
/// had completed fails as out of order: the script waits for it and will not make the other (a
/// shorter wait would also fail calls the host merely handled in another order than the script
/// made them, and those of a process starved of CPU). A call held only for the recorded
/// completion order is answered anyway: a client that caps the calls it has in flight (a
/// browser, six per host) may be unable to send the one it waits for.
const STALL: Duration = Duration::from_secs(3);

/// How long after the answer before it a held answer is given (see `Inner::answer`).
const HANDOFF: Duration = Duration::from_millis(20);

pub struct Player {
    inner: Arc<Inner>,
}

struct Inner {
    cassette: Cassette,
    /// The file's name, for messages (a script may read them: never its directory).
    label: String,
    mode: MatchMode,
    view: Arc<PythonView>,
    /// Arguments are redacted as they were when recorded, then compared.
    redact_keys: Redactor,
    used: Mutex<Vec<bool>>,
    /// Whether the call that completed `n`th when recorded has been answered, at `n - 1`.
    answered: Mutex<Vec<bool>>,
    /// How many calls, in the recorded completion order, have been answered without a gap.
    answered_prefix: watch::Sender<usize>,
    /// When the last answer was given.
    last_answer: Mutex<Option<tokio::time::Instant>>,
}

impl Player {
    /// A player of `cassette`, named `label` in messages.
    pub fn new(cassette: Cassette, label: &str, mode: MatchMode) -> Self {
        let servers: Vec<ServerCatalog> = cassette.header.servers.clone();
        let unavailable: Vec<(String, String)> = cassette
            .header
            .unavailable
            .iter()
            .map(|u| (u.server.clone(), u.state.clone()))
            .collect();
        let completed = cassette.calls.iter().filter(|c| c.done.is_some()).count();
        let inner = Inner {
            view: Arc::new(PythonView::new(&servers, &unavailable)),
            redact_keys: Redactor::new([], &cassette.header.redacted_keys),
            used: Mutex::new(vec![false; cassette.calls.len()]),
            answered: Mutex::new(vec![false; completed]),
            answered_prefix: watch::Sender::new(0),
            last_answer: Mutex::new(None),
            label: label.to_owned(),
            mode,
            cassette,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The recorded calls no call has used, described: after a run, what it did not do.
    pub fn unused(&self) -> Vec<String> {
        let used = self.inner.used.lock();
        self.inner
            .cassette
            .calls
            .iter()
            .filter(|c| !used[c.seq - 1])
            .map(|c| format!("#{} {}", c.seq, describe(&c.server, &c.tool, &c.arguments)))
            .collect()
    }
}

impl ToolHost for Player {
    fn catalog(&self) -> Vec<ServerCatalog> {
        self.inner.cassette.header.servers.clone()
    }

    fn python_view(&self) -> Arc<PythonView> {
        self.inner.view.clone()
    }

    fn unavailable(&self) -> Vec<(String, String)> {
        self.inner
            .cassette
            .header
            .unavailable
            .iter()
            .map(|u| (u.server.clone(), u.state.clone()))
            .collect()
    }

    fn wait_ready(&self, server: &str) -> BoxFuture<'static, Result<(), ToolCallError>> {
        let header = &self.inner.cassette.header;
        let result = if let Some(wait) = header.waits.iter().find(|w| w.server == server) {
            Err(ToolCallError::Recorded(wait.error.clone()))
        } else if let Some(down) = header.unavailable.iter().find(|u| u.server == server) {
            Err(ToolCallError::Unavailable(format!(
                "replay: MCP server '{server}' was {} when {} was recorded, and the script did not wait for it then",
                down.state, self.inner.label
            )))
        } else {
            Ok(())
        };
        Box::pin(async move { result })
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        let inner = self.inner.clone();
        let arguments = if inner.redact_keys.is_empty() {
            arguments
        } else {
            inner.redact_keys.arguments(&arguments)
        };
        let matched = {
            let mut used = inner.used.lock();
            let found = inner.cassette.calls.iter().position(|c| {
                !used[c.seq - 1] && c.server == server && c.tool == tool && c.arguments == arguments
            });
            if let Some(index) = found {
                used[index] = true;
            }
            found
        };
        let Some(index) = matched else {
            let message = inner.divergence(server, tool, &arguments);
            return Box::pin(async move { Err(ToolCallError::Replay(message)) });
        };
        Box::pin(async move { inner.answer(index).await })
    }
}

impl Inner {
    /// The answer of recorded call `index`, when its turn comes (see the module's doc).
    async fn answer(self: Arc<Self>, index: usize) -> Result<Value, ToolCallError> {
        let call = &self.cassette.calls[index];
        let Some(done) = call.done else {
            // The script ended before this call's answer when recorded: it never gets one.
            return std::future::pending().await;
        };
        if self.mode == MatchMode::Strict {
            let mut prefix = self.answered_prefix.subscribe();
            let held = *prefix.borrow() < done - 1;
            // Never closed (`self` holds the sender): each wait ends with an answer or a stall.
            while *prefix.borrow_and_update() < call.after {
                if !answered_in_time(&mut prefix, call.after).await {
                    self.used.lock()[index] = false;
                    return Err(ToolCallError::Replay(self.out_of_order(call)));
                }
            }
            while *prefix.borrow_and_update() < done - 1 {
                if !answered_in_time(&mut prefix, done - 1).await {
                    tracing::warn!(
                        "replay: answering recorded call #{} out of the recorded completion order: no answer was given for {} s (a client that caps concurrent calls, as a browser's six connections per host do, cannot send the call it waits for)",
                        call.seq,
                        STALL.as_secs()
                    );
                    break;
                }
            }
            if held {
                // The answer before this one was just given: let the client take it in first.
                // Two answers given at once may reach a script in either order (a browser reads
                // each on its own connection; the host's tasks finish in any order).
                let previous = *self.last_answer.lock();
                if let Some(previous) = previous {
                    tokio::time::sleep_until(previous + HANDOFF).await;
                }
            }
        }
        {
            let mut answered = self.answered.lock();
            answered[done - 1] = true;
            let prefix = answered.iter().take_while(|a| **a).count();
            *self.last_answer.lock() = Some(tokio::time::Instant::now());
            self.answered_prefix.send_replace(prefix);
        }
        call.answer()
            .expect("a completed call has an answer (checked on load)")
            .map_err(ToolCallError::Recorded)
    }

    /// Why `call` (matched, but recorded after calls this run has not made) fails.
    fn out_of_order(&self, call: &Call) -> String {
        let answered = self.answered.lock();
        // The first recorded call (in started order) that completed before `call` started and
        // has not been answered: what the script should have made first.
        let missing = self
            .cassette
            .calls
            .iter()
            .find(|c| matches!(c.done, Some(d) if d <= call.after && !answered[d - 1]));
        let called = describe(&call.server, &call.tool, &call.arguments);
        match missing {
            Some(first) => format!(
                "replay: {called} came in another order than recorded in {}: it is recorded call #{}, made after #{} {}, which this run has not made ({}); --replay-match any accepts another order",
                self.label,
                call.seq,
                first.seq,
                describe(&first.server, &first.tool, &first.arguments),
                difference(first, &call.server, &call.tool, &call.arguments),
            ),
            None => format!(
                "replay: {called} came in another order than recorded in {} (recorded call #{}); --replay-match any accepts another order",
                self.label, call.seq
            ),
        }
    }

    /// Why a call no unused recorded call matches fails: the first divergence from the nearest.
    fn divergence(&self, server: &str, tool: &str, arguments: &Map<String, Value>) -> String {
        let calls = &self.cassette.calls;
        let called = describe(server, tool, arguments);
        let used = self.used.lock();
        let unused: Vec<&Call> = calls.iter().filter(|c| !used[c.seq - 1]).collect();
        if unused.is_empty() {
            let last = calls
                .iter()
                .rev()
                .find(|c| c.server == server && c.tool == tool)
                .or(calls.last());
            let nearest = match last {
                Some(c) => format!(
                    "; the last recorded: #{} {}",
                    c.seq,
                    describe(&c.server, &c.tool, &c.arguments)
                ),
                None => String::new(),
            };
            return format!(
                "replay: {called} is one call more than recorded: {} holds {} call(s), all made already{nearest}",
                self.label,
                calls.len()
            );
        }
        // Strictly, the calls that could come next; failing those, any unused one.
        let prefix = *self.answered_prefix.borrow();
        let next: Vec<&Call> = unused
            .iter()
            .copied()
            .filter(|c| self.mode == MatchMode::Any || c.after <= prefix)
            .collect();
        let candidates = if next.is_empty() { unused } else { next };
        let nearest = candidates
            .into_iter()
            .min_by_key(|c| {
                (
                    closeness(c, server, tool),
                    differing_arguments(c, arguments),
                    c.seq,
                )
            })
            .expect("candidates are not empty");
        let never = if calls.iter().any(|c| c.server == server && c.tool == tool) {
            String::new()
        } else {
            format!(" (it holds no call to {server}.{tool})")
        };
        format!(
            "replay: {called} is not in {}{never}: {}; nearest recorded call: #{} {}",
            self.label,
            difference(nearest, server, tool, arguments),
            nearest.seq,
            describe(&nearest.server, &nearest.tool, &nearest.arguments)
        )
    }
}

/// Whether another answer comes before [`STALL`] passes without one, or `prefix` reaches `wanted`.
async fn answered_in_time(prefix: &mut watch::Receiver<usize>, wanted: usize) -> bool {
    if tokio::time::timeout(STALL, prefix.changed()).await.is_ok() {
        return true;
    }
    // A process starved of CPU wakes its timers together with the tasks queued meanwhile: let
    // those run (one may be the call waited for) before calling it a stall.
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    *prefix.borrow() >= wanted
}

/// 0: the same tool; 1: a tool of the same server with a close name; 2: the same server; 3: other.
fn closeness(call: &Call, server: &str, tool: &str) -> u8 {
    match (call.server == server, call.tool == tool) {
        (true, true) => 0,
        (true, false)
            if !crate::suggest::did_you_mean(tool, [call.tool.as_str()], 1).is_empty() =>
        {
            1
        }
        (true, false) => 2,
        (false, _) => 3,
    }
}

fn differing_arguments(call: &Call, arguments: &Map<String, Value>) -> usize {
    let missing = call
        .arguments
        .iter()
        .filter(|(k, v)| arguments.get(*k) != Some(v))
        .count();
    missing
        + arguments
            .keys()
            .filter(|k| !call.arguments.contains_key(*k))
            .count()
}

/// The first field in which the call differs from `recorded`: server, tool, or the first
/// argument (in key order).
fn difference(recorded: &Call, server: &str, tool: &str, arguments: &Map<String, Value>) -> String {
    if recorded.server != server {
        return format!("server: recorded '{}', called '{server}'", recorded.server);
    }
    if recorded.tool != tool {
        return format!("tool: recorded '{}', called '{tool}'", recorded.tool);
    }
    let mut keys: Vec<&String> = recorded.arguments.keys().chain(arguments.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        match (recorded.arguments.get(key), arguments.get(key)) {
            (Some(was), Some(now)) if was != now => {
                return format!(
                    "argument '{key}': recorded {}, called with {}",
                    abbreviate(was),
                    abbreviate(now)
                )
            }
            (Some(was), None) => {
                return format!(
                    "argument '{key}' was recorded ({}) but not passed",
                    abbreviate(was)
                )
            }
            (None, Some(now)) => {
                return format!(
                    "argument '{key}' was passed ({}) but not recorded",
                    abbreviate(now)
                )
            }
            _ => {}
        }
    }
    "the same call".into()
}

/// `server.tool(key=value, …)` as Python would have called it, values as JSON, cut short.
fn describe(server: &str, tool: &str, arguments: &Map<String, Value>) -> String {
    const MOST: usize = 240;
    let arguments: Vec<String> = arguments
        .iter()
        .map(|(k, v)| format!("{k}={}", abbreviate(v)))
        .collect();
    let text = format!("{server}.{tool}({})", arguments.join(", "));
    crate::text::shorten(&text, MOST)
}

fn abbreviate(value: &Value) -> String {
    crate::text::shorten(&value.to_string(), 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::cassette::{Header, FORMAT, VERSION};
    use serde_json::json;

    /// One recorded call: (server, tool, arguments, result, done, after).
    type Line<'a> = (&'a str, &'a str, Value, Value, Option<usize>, usize);

    fn cassette(calls: &[Line]) -> Cassette {
        let calls: Vec<Call> = calls
            .iter()
            .enumerate()
            .map(|(i, (server, tool, arguments, answer, done, after))| Call {
                seq: i + 1,
                server: server.to_string(),
                tool: tool.to_string(),
                arguments: arguments.as_object().unwrap().clone(),
                result: Some(answer.clone()),
                error: None,
                ms: 1.0,
                done: *done,
                after: *after,
            })
            .collect();
        Cassette {
            header: Header {
                format: FORMAT.into(),
                version: VERSION,
                execution_id: "test".into(),
                recorded_at: String::new(),
                seed: None,
                script: None,
                limits: None,
                redacted_keys: vec!["token".into()],
                servers: Vec::new(),
                unavailable: Vec::new(),
                waits: Vec::new(),
                calls: calls.len(),
            },
            calls,
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    async fn call(p: &Player, tool: &str, a: Value) -> Result<Value, String> {
        p.call("fs", tool, args(a))
            .await
            .map_err(|e| e.message().to_owned())
    }

    /// Two calls made one after the other: read a, then read b.
    fn sequential() -> Cassette {
        cassette(&[
            ("fs", "read", json!({"path": "a"}), json!("A"), Some(1), 0),
            ("fs", "read", json!({"path": "b"}), json!("B"), Some(2), 1),
        ])
    }

    #[tokio::test]
    async fn strict_answers_in_order_and_names_each_kind_of_divergence() {
        let p = Player::new(sequential(), "run.jsonl", MatchMode::Strict);
        let e = call(&p, "read", json!({"path": "c"})).await.unwrap_err();
        assert_eq!(
            e,
            "replay: fs.read(path=\"c\") is not in run.jsonl: argument 'path': recorded \"a\", called with \"c\"; nearest recorded call: #1 fs.read(path=\"a\")"
        );
        let e = call(&p, "raed", json!({"path": "a"})).await.unwrap_err();
        assert!(
            e.contains("(it holds no call to fs.raed): tool: recorded 'read', called 'raed'"),
            "{e}"
        );
        let e = call(&p, "read", json!({"path": "a", "head": 1}))
            .await
            .unwrap_err();
        assert!(
            e.contains("argument 'head' was passed (1) but not recorded"),
            "{e}"
        );
        assert_eq!(call(&p, "read", json!({"path": "a"})).await.unwrap(), "A");
        assert_eq!(call(&p, "read", json!({"path": "b"})).await.unwrap(), "B");
        let e = call(&p, "read", json!({"path": "b"})).await.unwrap_err();
        assert!(
            e.contains("is one call more than recorded: run.jsonl holds 2 call(s), all made already; the last recorded: #2"),
            "{e}"
        );
        assert!(p.unused().is_empty());
    }

    #[tokio::test]
    async fn strict_refuses_another_order_which_any_accepts() {
        let p = Player::new(sequential(), "run.jsonl", MatchMode::Strict);
        let e = call(&p, "read", json!({"path": "b"})).await.unwrap_err();
        assert!(
            e.contains("came in another order than recorded in run.jsonl: it is recorded call #2, made after #1 fs.read(path=\"a\"), which this run has not made (argument 'path': recorded \"a\", called with \"b\")"),
            "{e}"
        );
        assert_eq!(p.unused().len(), 2, "the refused call stays unused");
        let p = Player::new(sequential(), "run.jsonl", MatchMode::Any);
        assert_eq!(call(&p, "read", json!({"path": "b"})).await.unwrap(), "B");
        assert_eq!(call(&p, "read", json!({"path": "a"})).await.unwrap(), "A");
    }

    #[tokio::test]
    async fn calls_in_flight_together_are_answered_in_the_recorded_completion_order() {
        // Both started before either completed; b completed first.
        let p = Arc::new(Player::new(
            cassette(&[
                ("fs", "read", json!({"path": "a"}), json!("A"), Some(2), 0),
                ("fs", "read", json!({"path": "b"}), json!("B"), Some(1), 0),
            ]),
            "run.jsonl",
            MatchMode::Strict,
        ));
        let order = Arc::new(Mutex::new(Vec::new()));
        let a = {
            let (p, order) = (p.clone(), order.clone());
            tokio::spawn(async move {
                let v = call(&p, "read", json!({"path": "a"})).await.unwrap();
                order.lock().push(v);
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            order.lock().is_empty(),
            "a waits for b, which completed first"
        );
        assert_eq!(call(&p, "read", json!({"path": "b"})).await.unwrap(), "B");
        order.lock().push("B-returned".into());
        a.await.unwrap();
        assert_eq!(*order.lock(), [json!("B-returned"), json!("A")]);
    }

    #[tokio::test]
    async fn redacted_keys_are_redacted_before_matching() {
        let p = Player::new(
            cassette(&[(
                "fs",
                "login",
                json!({"token": "[redacted]"}),
                json!("ok"),
                Some(1),
                0,
            )]),
            "run.jsonl",
            MatchMode::Strict,
        );
        assert_eq!(
            call(&p, "login", json!({"token": "hunter2"}))
                .await
                .unwrap(),
            "ok"
        );
    }
}
