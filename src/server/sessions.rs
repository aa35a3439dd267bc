//! Sessions of `execute_code`: a sandbox kept alive between calls, so that a later call sees the
//! globals, imports and in-memory files an earlier one left.
//!
//! A session is opt-in (`session: "new"`), named by an unguessable id, and bound to the MCP
//! client that made it (its [`Owner`]: the stdio client, or one HTTP session's copy of the
//! server). Its calls run one at a time, in the order they came (a second call waits for the
//! first). It ends when closed, after `idle` without a call, when one of its calls hits a limit
//! (the sandbox is then gone), or when its owner goes away. An ended session's id keeps saying why
//! it ended (to its owner) until the owner goes away or too many ended ones pile up.
//!
//! **Invariant:** an id reaches only its owner's calls: to anyone else it is unknown, with the
//! very message an id never issued gets, so ids cannot be probed.
//! **Invariant:** a sandbox belongs to one session; it is dropped (its child killed, its isolate
//! stopped) when the session ends, and a session whose call hit a limit never runs again.

use crate::engine::{Outcome, Pool, RunControl, Sandbox};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// What a session may take (flags `--max-code-sessions`, `--code-session-idle`,
/// `--code-session-memory-mb`, or the config's `"sessions"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionLimits {
    /// Live sessions at once, across all clients.
    pub max: usize,
    /// A session with no call for this long ends.
    pub idle: Duration,
    /// MiB one session's sandbox may use in all, across its calls.
    pub memory_mb: u64,
}

impl SessionLimits {
    pub const DEFAULT_MAX: usize = 8;
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);
}

/// Who made a session: the stdio client, or one HTTP session's copy of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(u64);

impl Owner {
    pub const STDIO: Owner = Owner(0);

    /// A new owner (one per HTTP session).
    pub fn fresh() -> Owner {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Owner(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Ended sessions whose ids still say why, at most (the oldest are forgotten first).
const MAX_ENDED: usize = 1024;

/// Every session of the server, shared by all copies of it.
pub struct Sessions {
    /// Where a session's sandbox comes from: one whose memory limit is the session's.
    pool: Arc<Pool>,
    limits: SessionLimits,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

struct Entry {
    owner: Owner,
    /// The sandbox between calls (None before the first call, and after a reset). A call holds
    /// the lock while it runs, so a session's calls run one at a time, in order.
    sandbox: Arc<tokio::sync::Mutex<Option<Sandbox>>>,
    /// Why the session ended, once it has; checked by every call.
    ended: Mutex<Option<Ended>>,
    last_used: Mutex<Instant>,
    /// The control of the call running now, so that closing the session stops it.
    running: Mutex<Option<RunControl>>,
}

#[derive(Clone)]
struct Ended {
    why: String,
    at: Instant,
    /// Closed by its owner: a reset cannot bring it back.
    closed: bool,
}

impl Entry {
    fn end(&self, why: String, closed: bool) {
        let mut ended = self.ended.lock();
        if ended.is_none() || closed {
            *ended = Some(Ended {
                why,
                at: Instant::now(),
                closed,
            });
        }
        drop(ended);
        if let Some(control) = self.running.lock().take() {
            control.stop("RuntimeError", "the session was closed while this call ran");
        }
        // Free the sandbox now if no call holds it; a running call drops it when it ends.
        if let Ok(mut sandbox) = self.sandbox.try_lock() {
            sandbox.take();
        }
    }

    fn ended(&self) -> Option<Ended> {
        self.ended.lock().clone()
    }
}

/// A call's hold on its session: the sandbox to run in (None: take a fresh one), and the lock
/// that keeps the session's other calls waiting. Dropped without [`Lease::finish`] (the call was
/// cancelled while it ran), it ends the session: its sandbox went with the call.
pub struct Lease {
    pub id: String,
    entry: Arc<Entry>,
    slot: tokio::sync::OwnedMutexGuard<Option<Sandbox>>,
    finished: bool,
}

impl Lease {
    /// The session's sandbox, out of its slot while the call runs in it.
    pub fn take_sandbox(&mut self) -> Option<Sandbox> {
        self.slot.take()
    }

    /// Lets closing the session stop this call.
    pub fn running(&self, control: RunControl) {
        *self.entry.running.lock() = Some(control);
    }

    /// Puts the sandbox back for the session's next call, or, when the call ended it, ends the
    /// session and says why (for the report).
    pub fn finish(mut self, sandbox: Sandbox, alive: bool, outcome: &Outcome) -> Option<String> {
        self.finished = true;
        self.entry.running.lock().take();
        *self.entry.last_used.lock() = Instant::now();
        if let Some(ended) = self.entry.ended() {
            return Some(ended.why); // closed while it ran: the sandbox goes now
        }
        if alive {
            *self.slot = Some(sandbox);
            return None;
        }
        let why = match &outcome.error {
            Some(e) => format!(
                "its call hit a limit and its sandbox was stopped ({}: {})",
                e.kind, e.message
            ),
            None => "its sandbox ended".to_owned(),
        };
        self.entry.end(why.clone(), false);
        Some(why)
    }

    /// The call could not get a sandbox: the session ends, saying why.
    pub fn failed(mut self, why: &str) {
        self.finished = true;
        self.entry.running.lock().take();
        self.entry
            .end(format!("its sandbox could not start: {why}"), false);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.finished {
            self.entry.running.lock().take();
            self.entry.end(
                "its call was cancelled while it ran, and its sandbox with it".into(),
                false,
            );
        }
    }
}

impl Sessions {
    /// Sessions whose sandboxes come from `pool` (made with the session memory limit). Starts
    /// the sweeper that ends idle sessions (call from a tokio runtime).
    pub fn new(pool: Arc<Pool>, limits: SessionLimits) -> Arc<Sessions> {
        let sessions = Arc::new(Sessions {
            pool,
            limits,
            entries: Mutex::new(HashMap::new()),
        });
        tokio::spawn(sweep(Arc::downgrade(&sessions)));
        sessions
    }

    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// A fresh sandbox for a session's first call (or its first after a reset).
    pub async fn take_sandbox(
        &self,
        tools: Arc<dyn crate::bridge::ToolHost>,
        seed: Option<u64>,
    ) -> Result<Sandbox, crate::engine::EngineError> {
        self.pool.take_seeded(tools, seed).await
    }

    /// Starts a session for `owner` and holds it for its first call.
    pub fn open(&self, owner: Owner) -> Result<Lease, String> {
        let mut entries = self.entries.lock();
        let live = entries.values().filter(|e| e.ended().is_none()).count();
        if live >= self.limits.max {
            return Err(format!(
                "too many live sessions ({live}, the most is {}: --max-code-sessions): close one you no longer need with close_session, or run without a session",
                self.limits.max
            ));
        }
        let id = new_id();
        let entry = Arc::new(Entry {
            owner,
            sandbox: Arc::new(tokio::sync::Mutex::new(None)),
            ended: Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
            running: Mutex::new(None),
        });
        let slot = entry
            .sandbox
            .clone()
            .try_lock_owned()
            .expect("a new session's lock is free");
        entries.insert(id.clone(), entry.clone());
        Ok(Lease {
            id,
            entry,
            slot,
            finished: false,
        })
    }

    /// Holds `owner`'s session `id` for a call, once its earlier calls are done.
    pub async fn lease(&self, owner: Owner, id: &str) -> Result<Lease, String> {
        let entry = self.find(owner, id)?;
        self.check_live(id, &entry)?;
        let slot = entry.sandbox.clone().lock_owned().await;
        // It may have ended (or gone idle past the limit) while this call waited.
        self.check_live(id, &entry)?;
        Ok(Lease {
            id: id.to_owned(),
            entry,
            slot,
            finished: false,
        })
    }

    /// Ends `owner`'s session `id` (stopping a call running in it); Ok says what it was.
    pub fn close(&self, owner: Owner, id: &str) -> Result<String, String> {
        let entry = self.find(owner, id)?;
        let before = entry.ended();
        entry.end("it was closed (close_session)".into(), true);
        Ok(match before {
            Some(ended) if ended.closed => format!("session {id} was already closed"),
            Some(ended) => format!("session {id} closed (it had already ended: {})", ended.why),
            None => format!("session {id} closed"),
        })
    }

    /// Gives `owner`'s session `id` a fresh interpreter under the same id (stopping a call
    /// running in it); an ended session starts again, unless it was closed.
    pub async fn reset(&self, owner: Owner, id: &str) -> Result<String, String> {
        let entry = self.find(owner, id)?;
        if let Some(ended) = entry.ended() {
            if ended.closed {
                return Err(self.ended_error(id, &ended));
            }
        }
        if let Some(control) = entry.running.lock().take() {
            control.stop("RuntimeError", "the session was reset while this call ran");
        }
        let mut slot = entry.sandbox.clone().lock_owned().await;
        {
            // Counted and revived under the map's lock, so two resets cannot pass the cap.
            let entries = self.entries.lock();
            let live = entries
                .iter()
                .filter(|(other, e)| other.as_str() != id && e.ended().is_none())
                .count();
            let mut ended = entry.ended.lock();
            if let Some(e) = &*ended {
                if e.closed {
                    return Err(self.ended_error(id, e));
                }
                if live >= self.limits.max {
                    return Err(format!(
                        "session {id} cannot start again: too many live sessions ({live}, the most is {}: --max-code-sessions); close one with close_session",
                        self.limits.max
                    ));
                }
                *ended = None;
            }
        }
        slot.take();
        *entry.last_used.lock() = Instant::now();
        Ok(format!(
            "session {id} reset: its next call starts in a fresh interpreter (no globals, imports or files from before)"
        ))
    }

    /// Ends every session of `owner` and forgets them (its MCP session is over).
    pub fn end_owner(&self, owner: Owner) {
        let gone: Vec<Arc<Entry>> = {
            let mut entries = self.entries.lock();
            let ids: Vec<String> = entries
                .iter()
                .filter(|(_, e)| e.owner == owner)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| entries.remove(id)).collect()
        };
        if !gone.is_empty() {
            tracing::info!("{} code sessions ended with their MCP session", gone.len());
        }
        for entry in gone {
            entry.end("its MCP session ended".into(), true);
        }
    }

    /// How many sessions are live (tests, logs).
    pub fn live(&self) -> usize {
        let entries = self.entries.lock();
        entries.values().filter(|e| e.ended().is_none()).count()
    }

    fn find(&self, owner: Owner, id: &str) -> Result<Arc<Entry>, String> {
        let entry = self.entries.lock().get(id).cloned();
        match entry {
            Some(entry) if entry.owner == owner => Ok(entry),
            // Another client's session reads exactly as one never issued.
            _ => Err(unknown_error(id)),
        }
    }

    /// Ok if the session can take a call; ends it first if it has been idle too long.
    fn check_live(&self, id: &str, entry: &Entry) -> Result<(), String> {
        let idle = entry.last_used.lock().elapsed();
        if entry.ended().is_none() && idle > self.limits.idle && entry.running.lock().is_none() {
            entry.end(self.idle_reason(), false);
        }
        match entry.ended() {
            Some(ended) => Err(self.ended_error(id, &ended)),
            None => Ok(()),
        }
    }

    fn idle_reason(&self) -> String {
        format!(
            "it expired after {} s without a call (--code-session-idle)",
            self.limits.idle.as_secs_f64()
        )
    }

    fn ended_error(&self, id: &str, ended: &Ended) -> String {
        let again = if ended.closed {
            ""
        } else {
            ", or reset_session to start this id again in a fresh interpreter"
        };
        format!(
            "session {id} has ended: {}. Its globals and files are gone: start a new session with session=\"new\"{again}",
            ended.why
        )
    }

    /// Ends sessions idle past the limit (their sandboxes' memory goes back at once) and forgets
    /// the oldest ended ones past [`MAX_ENDED`].
    fn sweep_once(&self) {
        let mut entries = self.entries.lock();
        for entry in entries.values() {
            let idle = entry.last_used.lock().elapsed() > self.limits.idle;
            if idle && entry.ended().is_none() {
                // Only a session no call holds: a call waiting behind a running one keeps it.
                if let Ok(mut sandbox) = entry.sandbox.try_lock() {
                    sandbox.take();
                    drop(sandbox);
                    entry.end(self.idle_reason(), false);
                }
            }
        }
        let mut ended: Vec<(Instant, String)> = entries
            .iter()
            .filter_map(|(id, e)| e.ended().map(|x| (x.at, id.clone())))
            .collect();
        if ended.len() > MAX_ENDED {
            ended.sort();
            for (_, id) in &ended[..ended.len() - MAX_ENDED] {
                entries.remove(id);
            }
        }
    }
}

/// Runs [`Sessions::sweep_once`] a few times per idle period, until the sessions are dropped.
async fn sweep(sessions: Weak<Sessions>) {
    let every = match sessions.upgrade() {
        Some(s) => (s.limits.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        sessions.sweep_once();
    }
}

fn unknown_error(id: &str) -> String {
    let shown: String = id.chars().take(64).collect();
    format!(
        "unknown session \"{shown}\": this client has no session with that id (an id is valid only for the MCP session that started it, until it is closed). Start one with session=\"new\", or leave session out for a fresh sandbox"
    )
}

/// An unguessable id: 128 random bits.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS has entropy");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("s-{hex}")
}
