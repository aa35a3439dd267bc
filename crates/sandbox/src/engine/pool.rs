//! A warm pool: sandboxes booted ahead of demand, each handed out once and then discarded.
//!
//! A layer around `Sandbox`, which it uses unchanged. Refilling runs in the background, one boot
//! at a time, so a burst of requests is never slowed by several boots fighting for the cores.

use super::{EngineError, Limits, Sandbox, SandboxConfig};
use crate::bridge::{NoTools, ToolHost};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

pub struct Pool {
    limits: Limits,
    snapshot: Option<&'static [u8]>,
    size: usize,
    ready: Mutex<VecDeque<Sandbox>>,
    wanted: Arc<Notify>,
}

impl Pool {
    /// A pool keeping `size` sandboxes ready (0: boot each one on demand). Call from a tokio runtime.
    pub fn new(limits: Limits, snapshot: Option<&'static [u8]>, size: usize) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            limits,
            snapshot,
            size,
            ready: Mutex::new(VecDeque::new()),
            wanted: Arc::new(Notify::new()),
        });
        if size > 0 {
            tokio::spawn(refill(Arc::downgrade(&pool)));
        }
        pool
    }

    fn config(&self) -> SandboxConfig {
        SandboxConfig {
            snapshot: self.snapshot,
            warm_up: true,
            ..SandboxConfig::new(self.limits, self.snapshot)
        }
    }

    pub fn ready_count(&self) -> usize {
        self.ready.lock().len()
    }

    /// A ready sandbox serving `tools`, booted now if none is waiting.
    pub async fn take(&self, tools: Arc<dyn ToolHost>) -> Result<Sandbox, EngineError> {
        let pooled = self.ready.lock().pop_front();
        self.wanted.notify_one();
        let sandbox = match pooled {
            Some(sandbox) => sandbox,
            None => Sandbox::new(self.config()).await?,
        };
        sandbox.set_tools(tools);
        Ok(sandbox)
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
        if strong.ready_count() >= strong.size {
            let wanted = strong.wanted.clone();
            drop(strong); // the pool may be dropped while we wait: Drop wakes us to notice
            wanted.notified().await;
            continue;
        }
        let config = SandboxConfig {
            tools: Arc::new(NoTools),
            ..strong.config()
        };
        drop(strong);
        match Sandbox::new(config).await {
            Ok(sandbox) => {
                failures = 0;
                match pool.upgrade() {
                    Some(strong) => strong.ready.lock().push_back(sandbox),
                    None => return,
                }
            }
            Err(e) => {
                failures += 1;
                let wait = Duration::from_millis(250 << failures.min(7));
                tracing::error!("could not boot a pooled sandbox ({e}); retrying in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Where sandboxes come from: threads of this process (a [`Pool`]), or forks of a zygote process
/// (see [`super::zygote`]), the default in the product.
pub enum Sandboxes {
    Threads(Arc<Pool>),
    Forks {
        command: super::ZygoteCommand,
        limits: Limits,
        /// Started in the background at once; restarted on demand if it exits.
        zygote: Arc<tokio::sync::Mutex<Option<Arc<super::Zygote>>>>,
    },
}

impl Sandboxes {
    /// Sandboxes on threads, `size` kept booted ahead of demand.
    pub fn threads(limits: Limits, snapshot: Option<&'static [u8]>, size: usize) -> Self {
        Sandboxes::Threads(Pool::new(limits, snapshot, size))
    }

    /// Sandboxes forked from a zygote started with `command` (which boots the snapshot); it
    /// starts now, in the background. Call from a tokio runtime.
    pub fn forks(command: super::ZygoteCommand, limits: Limits) -> Self {
        let zygote = Arc::new(tokio::sync::Mutex::new(None));
        let starting = zygote.clone();
        let start = command.clone();
        tokio::spawn(async move {
            let mut slot = starting.lock().await;
            if slot.is_none() {
                match super::Zygote::start(&start, limits).await {
                    Ok(z) => *slot = Some(z),
                    Err(e) => tracing::error!("{e}"),
                }
            }
        });
        Sandboxes::Forks {
            command,
            limits,
            zygote,
        }
    }

    /// A ready sandbox serving `tools`.
    pub async fn take(&self, tools: Arc<dyn ToolHost>) -> Result<Sandbox, EngineError> {
        match self {
            Sandboxes::Threads(pool) => pool.take(tools).await,
            Sandboxes::Forks { .. } => self.fork(tools, None, None).await,
        }
    }

    /// A sandbox for `config` (its seed and live output; a thread sandbox boots for it).
    pub async fn take_for(&self, config: SandboxConfig) -> Result<Sandbox, EngineError> {
        match self {
            Sandboxes::Threads(_) => Sandbox::new(config).await,
            Sandboxes::Forks { .. } => {
                self.fork(config.tools, config.seed, config.live_output)
                    .await
            }
        }
    }

    async fn fork(
        &self,
        tools: Arc<dyn ToolHost>,
        seed: Option<u64>,
        live: Option<crate::bridge::LiveOutput>,
    ) -> Result<Sandbox, EngineError> {
        let Sandboxes::Forks {
            command,
            limits,
            zygote,
        } = self
        else {
            unreachable!("fork is only called for forks");
        };
        let current = {
            let mut slot = zygote.lock().await;
            match &*slot {
                Some(z) if z.is_alive() => z.clone(),
                _ => {
                    if slot.is_some() {
                        tracing::warn!("the sandbox zygote exited; starting a new one");
                    }
                    let z = super::Zygote::start(command, *limits).await?;
                    *slot = Some(z.clone());
                    z
                }
            }
        };
        Ok(Sandbox::Forked(current.fork(tools, seed, live).await?))
    }
}
