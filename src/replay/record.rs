//! `Recorder`: a [`ToolHost`] in front of another (the hub) that passes everything through and
//! notes, for one execution, what the script saw and did: the catalogue it read, the servers it
//! waited for, and every call with its answer, in the order calls started and completed.

use super::cassette::{Call, Cassette, Header, RecordedLimits, Script, Unavailable, Wait};
use super::redact::Redactor;
use crate::bridge::tools::round_ms;
use crate::bridge::view::PythonView;
use crate::bridge::{Approval, ServerCatalog, ToolCallError, ToolHost};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Instant;

/// What the recording says about the run beyond its tool traffic.
pub struct RunInfo {
    pub execution_id: String,
    pub seed: Option<u64>,
    pub script: Option<Script>,
    pub limits: Option<RecordedLimits>,
}

pub struct Recorder {
    inner: Arc<dyn ToolHost>,
    redactor: Arc<Redactor>,
    log: Arc<Mutex<Log>>,
}

#[derive(Default)]
struct Log {
    calls: Vec<Call>,
    completed: usize,
    /// Each server the script's catalogue named, in the order first seen.
    servers: Vec<(String, Seen)>,
    waits: Vec<Wait>,
    /// Values seen under a `--redact` key: scrubbed from the rest of the cassette too (a tool
    /// may echo a password it was sent under another name, or in its text).
    key_values: std::collections::BTreeSet<String>,
}

enum Seen {
    /// Serving tools in some view the script read: a replay offers these (the last seen) from the
    /// start, as a script that waited for a starting server ended up seeing them.
    Running(ServerCatalog),
    /// Never serving tools while the script ran: how it first looked.
    Unavailable(String),
}

impl Recorder {
    pub fn new(inner: Arc<dyn ToolHost>, redactor: Arc<Redactor>) -> Self {
        Self {
            inner,
            redactor,
            log: Default::default(),
        }
    }

    /// The cassette of what was recorded so far. Calls still in flight (the script ended without
    /// their answer) are recorded unanswered: a replay never answers them either.
    pub fn cassette(&self, run: RunInfo) -> Cassette {
        let log = self.log.lock();
        let redactor = &self.redactor;
        // Calls and results were redacted as they came; values first seen under a `--redact`
        // key are scrubbed from everything once all are known.
        let scrub = Redactor::scrubbing(log.key_values.iter().cloned());
        let text = |s: &str| scrub.text(&redactor.text(s)).into_owned();
        let mut servers = Vec::new();
        let mut unavailable = Vec::new();
        for (name, seen) in &log.servers {
            match seen {
                Seen::Running(catalog) => servers.push(redacted_catalog(redactor, catalog)),
                Seen::Unavailable(state) => unavailable.push(Unavailable {
                    server: name.clone(),
                    state: text(state),
                }),
            }
        }
        let script = run.script.map(|s| Script {
            filename: s.filename,
            code: text(&s.code),
        });
        let waits = log
            .waits
            .iter()
            .map(|w| Wait {
                server: w.server.clone(),
                error: scrub.text(&w.error).into_owned(),
            })
            .collect();
        let mut calls = log.calls.clone();
        if !scrub.is_empty() {
            for call in &mut calls {
                call.arguments = scrub.secrets_in_map(&call.arguments);
                call.result = call.result.as_ref().map(|r| scrub.secrets_in(r));
                call.error = call.error.as_deref().map(|e| scrub.text(e).into_owned());
            }
        }
        Cassette {
            header: Header {
                format: super::cassette::FORMAT.into(),
                version: super::cassette::VERSION,
                execution_id: run.execution_id,
                recorded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                seed: run.seed,
                script,
                limits: run.limits,
                redacted_keys: redactor.keys().to_vec(),
                servers,
                unavailable,
                waits,
                calls: calls.len(),
            },
            calls,
        }
    }

    /// Notes one view of the catalogue the script read.
    fn saw(&self, catalog: &[ServerCatalog], unavailable: &[(String, String)]) {
        let mut log = self.log.lock();
        for server in catalog {
            let running = Seen::Running(server.clone());
            match log
                .servers
                .iter_mut()
                .find(|(name, _)| *name == server.server)
            {
                Some((_, seen)) => *seen = running,
                None => log.servers.push((server.server.clone(), running)),
            }
        }
        for (server, state) in unavailable {
            if !log.servers.iter().any(|(name, _)| name == server) {
                log.servers
                    .push((server.clone(), Seen::Unavailable(state.clone())));
            }
        }
    }
}

/// A catalogue entry as recorded: secrets out of its descriptions and schemas.
fn redacted_catalog(redactor: &Redactor, catalog: &ServerCatalog) -> ServerCatalog {
    let value = serde_json::to_value(catalog).expect("a catalogue serializes");
    serde_json::from_value(redactor.secrets_in(&value))
        .expect("replacing text inside strings keeps a catalogue's shape")
}

impl ToolHost for Recorder {
    fn catalog(&self) -> Vec<ServerCatalog> {
        self.inner.catalog()
    }

    /// Made here from the catalogue read once, so what is recorded is exactly what the script saw
    /// (the inner host's cached view could be of another version than a second read).
    fn python_view(&self) -> Arc<PythonView> {
        let catalog = self.inner.catalog();
        let unavailable = self.inner.unavailable();
        self.saw(&catalog, &unavailable);
        Arc::new(PythonView::new(&catalog, &unavailable))
    }

    fn unavailable(&self) -> Vec<(String, String)> {
        self.inner.unavailable()
    }

    fn wait_ready(&self, server: &str) -> BoxFuture<'static, Result<(), ToolCallError>> {
        let wait = self.inner.wait_ready(server);
        let (log, redactor, server) = (self.log.clone(), self.redactor.clone(), server.to_owned());
        Box::pin(async move {
            let result = wait.await;
            if let Err(e) = &result {
                log.lock().waits.push(Wait {
                    server,
                    error: redactor.text(e.message()).into_owned(),
                });
            }
            result
        })
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
        let index = {
            let mut log = self.log.lock();
            let log = &mut *log;
            self.redactor
                .collect_key_values_in(&arguments, &mut log.key_values);
            let (after, seq) = (log.completed, log.calls.len() + 1);
            log.calls.push(Call {
                seq,
                server: server.to_owned(),
                tool: tool.to_owned(),
                arguments: self.redactor.arguments(&arguments),
                result: None,
                error: None,
                ms: 0.0,
                done: None,
                after,
            });
            seq - 1
        };
        let call = self.inner.call_audited(server, tool, arguments);
        let (log, redactor) = (self.log.clone(), self.redactor.clone());
        Box::pin(async move {
            let started = Instant::now();
            let (result, approval) = call.await;
            let ms = round_ms(started.elapsed());
            // Redacted outside the lock: a result may be megabytes.
            let (recorded, failed) = match &result {
                Ok(value) => (Some(redactor.value(value)), None),
                Err(e) => (None, Some(redactor.text(e.message()).into_owned())),
            };
            let mut key_values = Default::default();
            if let Ok(value) = &result {
                redactor.collect_key_values(value, &mut key_values);
            }
            let mut log = log.lock();
            log.key_values.extend(key_values);
            log.completed += 1;
            let done = log.completed;
            let entry = &mut log.calls[index];
            entry.result = recorded;
            entry.error = failed;
            entry.ms = ms;
            entry.done = Some(done);
            (result, approval)
        })
    }
}
