//! control — what the host of a running job may do to its clock from outside: pause the timeout
//! while the script waits on something that is not its own time (a person answering an approval),
//! and stop the job with an error of its own.
//!
//! The engine enforces the timeout (in the parent, for a forked sandbox) through
//! [`RunControl::expired`]; whoever holds a clone of the job's `RunControl` (the tool host) drives
//! it. Nothing here knows what the pause is for.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Shared between the engine, which waits on it, and the host, which pauses or stops the job.
#[derive(Clone, Default)]
pub struct RunControl(Arc<Inner>);

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// Pauses in effect (several calls may wait at once); the clock stops while any is.
    holds: usize,
    /// When the current pause began.
    since: Option<Instant>,
    /// Time spent paused before the current pause.
    paused: Duration,
    /// Set by [`RunControl::stop`]: the error the job ends with (its type and message).
    stop: Option<(String, String)>,
}

impl std::fmt::Debug for RunControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.0.state.lock();
        f.debug_struct("RunControl")
            .field("holds", &state.holds)
            .field("paused", &state.paused)
            .field("stopped", &state.stop.is_some())
            .finish()
    }
}

/// Holds the job's clock still until dropped.
#[must_use = "the clock runs again when this is dropped"]
pub struct Paused(RunControl);

impl Drop for Paused {
    fn drop(&mut self) {
        let mut state = self.0 .0.state.lock();
        state.holds -= 1;
        if state.holds == 0 {
            if let Some(since) = state.since.take() {
                state.paused += since.elapsed();
            }
        }
        drop(state);
        self.0 .0.changed.notify_waiters();
    }
}

impl RunControl {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the job's clock until the returned guard is dropped (pauses nest).
    pub fn pause(&self) -> Paused {
        let mut state = self.0.state.lock();
        state.holds += 1;
        if state.holds == 1 {
            state.since = Some(Instant::now());
        }
        drop(state);
        self.0.changed.notify_waiters();
        Paused(self.clone())
    }

    /// Ends the job at once with this error (`kind` is the Python exception type the outcome
    /// names), keeping what it printed, as a timeout does.
    pub fn stop(&self, kind: impl Into<String>, message: impl Into<String>) {
        self.0.state.lock().stop = Some((kind.into(), message.into()));
        self.0.changed.notify_waiters();
    }

    /// The time spent paused so far, the current pause included.
    pub fn paused_for(&self) -> Duration {
        let state = self.0.state.lock();
        state.paused + state.since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// Resolves once `timeout` of unpaused time has passed since `start` (`None`), or when the job
    /// is stopped (`Some((kind, message))`). Cancel-safe: it keeps no state of its own.
    pub async fn expired(&self, start: Instant, timeout: Duration) -> Option<(String, String)> {
        loop {
            let changed = self.0.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let deadline = {
                let state = self.0.state.lock();
                if let Some(stop) = &state.stop {
                    return Some(stop.clone());
                }
                (state.holds == 0).then(|| start + timeout + state.paused)
            };
            match deadline {
                None => changed.await,
                Some(deadline) if Instant::now() >= deadline => return None,
                Some(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = changed => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pause_extends_the_deadline_and_a_stop_ends_it() {
        let ms = Duration::from_millis;
        let control = RunControl::new();
        let start = Instant::now();
        let waiter = tokio::spawn({
            let control = control.clone();
            async move {
                control.expired(start, ms(300)).await;
                start.elapsed()
            }
        });
        tokio::time::sleep(ms(100)).await;
        let paused = control.pause();
        tokio::time::sleep(ms(600)).await;
        assert!(!waiter.is_finished(), "the clock ran while paused");
        drop(paused);
        let took = waiter.await.unwrap();
        assert!(took >= ms(900), "{took:?}");

        let stopped = tokio::spawn({
            let control = control.clone();
            async move {
                control
                    .expired(Instant::now(), Duration::from_secs(60))
                    .await
            }
        });
        tokio::time::sleep(ms(100)).await;
        control.stop("Stopped", "by the host");
        assert_eq!(
            stopped.await.unwrap(),
            Some(("Stopped".to_owned(), "by the host".to_owned()))
        );
    }
}
