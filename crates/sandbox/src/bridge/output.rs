//! What a script prints: kept up to a cap, counted past it, optionally streamed as it comes.
//!
//! Shared between the sandbox thread (which writes) and the `Sandbox` handle (which reads what was
//! kept even when the isolate had to be killed), so output printed before a timeout is not lost.

use parking_lot::Mutex;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives kept bytes as they are written (the CLI streams them to its own stdout/stderr).
pub type LiveOutput = Box<dyn Fn(Stream, &[u8]) + Send + Sync>;

/// Receives every write after the cap: the bytes kept and how many were dropped (a forked child
/// sends both to its parent, which keeps the output even if the child is then killed).
pub type ForwardOutput = Box<dyn Fn(Stream, &[u8], u64) + Send + Sync>;

#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    dropped: u64,
}

pub struct OutputSink {
    max_bytes: usize,
    stdout: Kept,
    stderr: Kept,
    live: Option<LiveOutput>,
    forward: Option<ForwardOutput>,
}

#[derive(Clone)]
pub struct SharedOutput(Arc<Mutex<OutputSink>>);

/// The captured text of both streams, each ending with a notice if anything was dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapturedOutput {
    pub stdout: String,
    pub stderr: String,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
}

impl SharedOutput {
    pub fn new(max_bytes: usize, live: Option<LiveOutput>) -> Self {
        Self(Arc::new(Mutex::new(OutputSink {
            max_bytes,
            stdout: Kept::default(),
            stderr: Kept::default(),
            live,
            forward: None,
        })))
    }

    /// From now on, every write is also handed to `forward` (see [`ForwardOutput`]).
    pub fn set_forward(&self, forward: ForwardOutput) {
        self.0.lock().forward = Some(forward);
    }

    pub fn write(&self, stream: Stream, bytes: &[u8]) {
        self.write_counted(stream, bytes, 0);
    }

    /// Writes `bytes` through the cap and counts `dropped` more bytes that were already dropped
    /// elsewhere (by a forked child's own cap).
    pub fn write_counted(&self, stream: Stream, bytes: &[u8], dropped: u64) {
        let mut sink = self.0.lock();
        let max = sink.max_bytes;
        let kept = match stream {
            Stream::Stdout => &mut sink.stdout,
            Stream::Stderr => &mut sink.stderr,
        };
        let room = max.saturating_sub(kept.bytes.len());
        let (keep, drop) = bytes.split_at(bytes.len().min(room));
        kept.bytes.extend_from_slice(keep);
        kept.dropped += drop.len() as u64 + dropped;
        if let (Some(live), false) = (&sink.live, keep.is_empty()) {
            live(stream, keep);
        }
        if let Some(forward) = &sink.forward {
            forward(stream, keep, drop.len() as u64);
        }
    }

    /// The notice that ends a truncated stream, or None.
    pub fn truncation_notice(stream: Stream, dropped: u64, max_bytes: usize) -> Option<String> {
        let name = match stream {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        };
        (dropped > 0).then(|| {
            format!(
                "\n[mcp-code-mode: {name} truncated: {dropped} more bytes were dropped after the first {max_bytes} (--max-output)]\n"
            )
        })
    }

    /// What was captured, and a fresh start for the next job of a session (its own cap).
    pub fn take_captured(&self) -> CapturedOutput {
        let captured = self.captured();
        self.clear();
        captured
    }

    /// Forgets what was kept and dropped: the next job's output starts empty, under the whole cap.
    pub fn clear(&self) {
        let mut sink = self.0.lock();
        sink.stdout = Kept::default();
        sink.stderr = Kept::default();
    }

    pub fn captured(&self) -> CapturedOutput {
        let sink = self.0.lock();
        let text = |stream, kept: &Kept| {
            let mut s = String::from_utf8_lossy(&kept.bytes).into_owned();
            if let Some(notice) = Self::truncation_notice(stream, kept.dropped, sink.max_bytes) {
                s.push_str(&notice);
            }
            s
        };
        CapturedOutput {
            stdout: text(Stream::Stdout, &sink.stdout),
            stderr: text(Stream::Stderr, &sink.stderr),
            stdout_dropped: sink.stdout.dropped,
            stderr_dropped: sink.stderr.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_up_to_the_cap_and_counts_the_rest() {
        let out = SharedOutput::new(5, None);
        out.write(Stream::Stdout, b"abc");
        out.write(Stream::Stdout, b"defgh");
        out.write(Stream::Stderr, b"x");
        let c = out.captured();
        assert!(c
            .stdout
            .starts_with("abcde\n[mcp-code-mode: stdout truncated: 3 more bytes"));
        assert_eq!(c.stderr, "x");
        assert_eq!((c.stdout_dropped, c.stderr_dropped), (3, 0));
    }
}
