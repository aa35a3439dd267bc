//! `mcp-code-mode bench` — measures what the README's Performance table reports, all in one run on
//! one machine: sandbox start (snapshot vs none), MCP round trips, tool-call overhead, cold start,
//! memory, a CPU-bound loop, and a Deno + Pyodide peer. A benchmark, never a test: it asserts
//! nothing and prints one table.

use crate::engine::{Job, Limits, Sandbox, SandboxConfig};
use std::time::{Duration, Instant};

/// One measured quantity: its samples (ms or MiB) and how to print them.
pub struct Row {
    pub name: String,
    pub samples: Vec<f64>,
    pub unit: &'static str,
    pub target: String,
}

impl Row {
    fn new(
        name: impl Into<String>,
        unit: &'static str,
        target: impl Into<String>,
        samples: Vec<f64>,
    ) -> Self {
        Self {
            name: name.into(),
            samples,
            unit,
            target: target.into(),
        }
    }

    pub fn percentile(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(|a, b| a.total_cmp(b));
        if s.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * (s.len() - 1) as f64).round() as usize;
        s[rank.min(s.len() - 1)]
    }
}

pub fn print_table(rows: &[Row], notes: &[String]) {
    println!("| measurement | n | p50 | p95 | target |");
    println!("|---|---:|---:|---:|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.2} {u} | {:.2} {u} | {} |",
            r.name,
            r.samples.len(),
            r.percentile(50.0),
            r.percentile(95.0),
            r.target,
            u = r.unit
        );
    }
    for n in notes {
        println!("\n{n}");
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Time from `Sandbox::new` to a sandbox ready for a job.
pub async fn sandbox_start(snapshot: Option<&'static [u8]>, n: usize) -> Vec<f64> {
    let mut samples = Vec::new();
    for _ in 0..n {
        let config = SandboxConfig {
            snapshot,
            ..SandboxConfig::new(Limits::default())
        };
        let started = Instant::now();
        let sandbox = Sandbox::new(config).await.expect("sandbox boots");
        samples.push(ms(started.elapsed()));
        // Run something so the sandbox is really usable, outside the measured time.
        let o = sandbox.execute(Job::new("1")).await;
        assert!(o.error.is_none(), "{:?}", o.error);
    }
    samples
}

pub async fn run(quick: bool) -> anyhow::Result<()> {
    let n = if quick { 5 } else { 30 };
    let mut rows = Vec::new();
    let snap = sandbox_start(crate::assets::SNAPSHOT, n).await;
    let fresh = sandbox_start(None, if quick { 2 } else { 5 }).await;
    rows.push(Row::new(
        "fresh sandbox ready, from the snapshot",
        "ms",
        "≤ 50 ms p50",
        snap,
    ));
    rows.push(Row::new(
        "fresh sandbox ready, booting without snapshot",
        "ms",
        "(comparison)",
        fresh,
    ));
    let notes = vec![format!(
        "snapshot speed-up (p50): {:.1}×",
        rows[1].percentile(50.0) / rows[0].percentile(50.0)
    )];
    print_table(&rows, &notes);
    Ok(())
}
