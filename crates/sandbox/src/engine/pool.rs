//! A warm pool: sandboxes made ahead of demand, each handed out once and then discarded.
//!
//! Sandboxes come from threads of this process (each restores the snapshot) or from a zygote
//! process (see [`super::zygote`]; the default in the product), where "made ahead" means a child
//! already forked and sealed, waiting for its job. A layer around `Sandbox`, which it uses
//! unchanged. Refilling runs in the background, one sandbox at a time, so a burst of requests is
//! never slowed by several boots fighting for the cores.

use super::{
    EngineError, ForkedSandbox, Limits, Sandbox, SandboxConfig, Snapshot, Zygote, ZygoteCommand,
};
use crate::bridge::{NoTools, ToolHost};
use crate::local::{LocalPython, LocalSandbox};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

pub struct Pool {
    source: Source,
    size: usize,
    ready: Mutex<VecDeque<Sandbox>>,
    wanted: Arc<Notify>,
    /// A sandbox was made once (the snapshot restores, the zygote forks).
    made_one: std::sync::atomic::AtomicBool,
}

enum Source {
    Threads {
        limits: Limits,
        snapshot: Option<Snapshot>,
    },
    Forks {
        command: ZygoteCommand,
        limits: Limits,
        /// Started with the pool; restarted on demand if it exits.
        zygote: tokio::sync::Mutex<Option<Arc<Zygote>>>,
    },
    /// No sandbox: each execution starts a host Python process (see [`crate::local`]).
    Local {
        python: Arc<LocalPython>,
        limits: Limits,
    },
}

/// How many forked children a server keeps waiting for a job: enough for back-to-back executions
/// and short bursts; each costs the zygote one fork and holds only the pages it has touched.
pub const SPARE_CHILDREN: usize = 2;

impl Pool {
    /// Thread sandboxes, `size` kept booted ahead of demand (0: boot each one on demand). Call
    /// from a tokio runtime.
    pub fn new(limits: Limits, snapshot: Option<Snapshot>, size: usize) -> Arc<Pool> {
        Self::start(Source::Threads { limits, snapshot }, size)
    }

    /// Sandboxes forked from a zygote started with `command` (which boots the snapshot), `spares`
    /// children forked ahead of demand (see [`SPARE_CHILDREN`]; 0: the zygote starts on first use).
    /// Call from a tokio runtime.
    pub fn forks(command: ZygoteCommand, limits: Limits, spares: usize) -> Arc<Pool> {
        let zygote = tokio::sync::Mutex::new(None);
        Self::start(
            Source::Forks {
                command,
                limits,
                zygote,
            },
            spares,
        )
    }

    /// The local executor's "pool": nothing made ahead, each execution starts its own host Python
    /// process when it runs. Not a sandbox (see [`crate::local`]).
    pub fn local(python: LocalPython, limits: Limits) -> Arc<Pool> {
        let python = Arc::new(python);
        Self::start(Source::Local { python, limits }, 0)
    }

    /// The local executor's interpreter, when this pool is the local executor's (so every
    /// notice can say that scripts are not sandboxed).
    pub fn local_python(&self) -> Option<&LocalPython> {
        match &self.source {
            Source::Local { python, .. } => Some(python.as_ref()),
            _ => None,
        }
    }

    fn start(source: Source, size: usize) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            source,
            size,
            ready: Mutex::new(VecDeque::new()),
            wanted: Arc::new(Notify::new()),
            made_one: Default::default(),
        });
        if size > 0 {
            tokio::spawn(refill(Arc::downgrade(&pool)));
        }
        pool
    }

    /// Whether the pool serves without a first boot: it has made a sandbox once (or makes each
    /// one on demand). Later, every spare taken by a burst is busy, not down.
    pub fn has_come_up(&self) -> bool {
        self.size == 0 || self.made_one.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn ready_count(&self) -> usize {
        self.ready.lock().len()
    }

    /// A ready sandbox serving `tools`, made now if none is waiting.
    pub async fn take(&self, tools: Arc<dyn ToolHost>) -> Result<Sandbox, EngineError> {
        let sandbox = match self.pooled() {
            Some(sandbox) => sandbox,
            None => self.make().await?,
        };
        sandbox.set_tools(tools);
        Ok(sandbox)
    }

    /// A ready sandbox serving `tools` whose randomness all comes from `seed` (`serve --seed`:
    /// the same calls then print the same), else as [`Pool::take`].
    pub async fn take_seeded(
        &self,
        tools: Arc<dyn ToolHost>,
        seed: Option<u64>,
    ) -> Result<Sandbox, EngineError> {
        if seed.is_none() {
            return self.take(tools).await;
        }
        let mut config = match &self.source {
            Source::Threads { limits, snapshot } => SandboxConfig::new(*limits, snapshot.clone()),
            Source::Forks { limits, .. } | Source::Local { limits, .. } => {
                SandboxConfig::new(*limits, None)
            }
        };
        config.seed = seed;
        config.tools = tools;
        self.take_for(config).await
    }

    /// A sandbox for `config`'s tools, seed and live output. A thread sandbox draws its seed at
    /// boot, so one boots for it; a forked child draws it with the job, so a waiting one serves.
    pub async fn take_for(&self, config: SandboxConfig) -> Result<Sandbox, EngineError> {
        match &self.source {
            Source::Threads { .. } => return Sandbox::new(config).await,
            Source::Local { python, limits } => {
                let mut local = LocalSandbox::new(python.clone(), *limits, config.tools);
                local.ready_for(config.seed, config.live_output);
                return Ok(Sandbox::Local(local));
            }
            Source::Forks { .. } => {}
        }
        let sandbox = self.take(config.tools).await?;
        let Sandbox::Forked(mut child) = sandbox else {
            unreachable!("a pool of forks holds forked sandboxes");
        };
        child.ready_for(config.seed, config.live_output);
        Ok(Sandbox::Forked(child))
    }

    /// Waits until `n` sandboxes are ready (benchmarks and tests), or the timeout passes.
    pub async fn wait_ready(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.ready_count() < n.min(self.size) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// For forks, once the zygote is warm: the pages each child makes its own before its job
    /// comes (see `zygote::prefault`).
    pub async fn pages_ahead(&self) -> Option<super::zygote::PagesAhead> {
        let Source::Forks { zygote, .. } = &self.source else {
            return None;
        };
        zygote.lock().await.as_ref()?.pages_ahead()
    }

    /// Waits until sandboxes are as fast as they get: for forks, until the zygote has finished
    /// its warm-up (benchmarks and tests, which want the steady state); threads are at once.
    pub async fn wait_warm(&self, timeout: Duration) -> bool {
        let Source::Forks { zygote, .. } = &self.source else {
            return true;
        };
        let warmed = tokio::time::timeout(timeout, async {
            loop {
                let current = zygote.lock().await.clone();
                match current {
                    Some(z) if z.is_alive() => return z.wait_warm(timeout).await,
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
        warmed.await.unwrap_or(false)
    }

    /// A waiting sandbox, if one is still good: a forked child is not once it is
    /// [`outdated`](ForkedSandbox::outdated) (dropping it ends it).
    fn pooled(&self) -> Option<Sandbox> {
        let mut ready = self.ready.lock();
        self.wanted.notify_one();
        while let Some(sandbox) = ready.pop_front() {
            match &sandbox {
                Sandbox::Forked(child) if child.outdated() => continue,
                _ => return Some(sandbox),
            }
        }
        None
    }

    async fn make(&self) -> Result<Sandbox, EngineError> {
        let made = self.make_from_source().await;
        if made.is_ok() {
            self.made_one
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        made
    }

    async fn make_from_source(&self) -> Result<Sandbox, EngineError> {
        match &self.source {
            Source::Threads { limits, snapshot } => {
                Sandbox::new(SandboxConfig {
                    warm_up: true,
                    tools: Arc::new(NoTools),
                    ..SandboxConfig::new(*limits, snapshot.clone())
                })
                .await
            }
            Source::Forks { .. } => Ok(Sandbox::Forked(self.fork().await?)),
            Source::Local { python, limits } => Ok(Sandbox::Local(LocalSandbox::new(
                python.clone(),
                *limits,
                Arc::new(NoTools),
            ))),
        }
    }

    async fn fork(&self) -> Result<ForkedSandbox, EngineError> {
        let Source::Forks {
            command,
            limits,
            zygote,
        } = &self.source
        else {
            unreachable!("only a pool of forks forks");
        };
        let current = {
            let mut slot = zygote.lock().await;
            match &*slot {
                Some(z) if z.is_alive() => z.clone(),
                _ => {
                    if slot.is_some() {
                        tracing::warn!("the sandbox zygote exited; starting a new one");
                    }
                    let z = Zygote::start(command, *limits).await?;
                    *slot = Some(z.clone());
                    z
                }
            }
        };
        current.fork(Arc::new(NoTools), None, None).await
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.wanted.notify_one();
    }
}

async fn refill(pool: std::sync::Weak<Pool>) {
    let mut failures = 0u32;
    loop {
        let Some(strong) = pool.upgrade() else { return };
        strong.ready.lock().retain(|sandbox| match sandbox {
            Sandbox::Forked(child) => !child.outdated(),
            Sandbox::Thread(_) | Sandbox::Local(_) => true,
        });
        if strong.ready_count() >= strong.size {
            let wanted = strong.wanted.clone();
            drop(strong); // the pool may be dropped while we wait: Drop wakes us to notice
                          // Or a second passes: spares forked before the zygote warmed up are then replaced.
            let _ = tokio::time::timeout(Duration::from_secs(1), wanted.notified()).await;
            continue;
        }
        // Held while making: a pool dropped meanwhile is noticed at the next turn.
        match strong.make().await {
            Ok(sandbox) => {
                failures = 0;
                strong.ready.lock().push_back(sandbox);
            }
            Err(e) => {
                drop(strong);
                failures += 1;
                let wait = Duration::from_millis(250 << failures.min(7));
                tracing::error!(
                    "could not make a sandbox ahead of demand ({}); retrying in {wait:?}",
                    crate::Chain(&e)
                );
                tokio::time::sleep(wait).await;
            }
        }
    }
}
