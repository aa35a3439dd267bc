//! `cargo bench --bench sandbox`: a fresh sandbox made ready, timed inside one process (what no
//! client can see on its own) — the README's row 1 (a thread sandbox restored from the embedded
//! snapshot, and one booting Pyodide without it) and row 8a (a sealed child forked from a warmed
//! zygote, the binary's `__zygote`). Everything measured as a client sees it is
//! `cargo xtask bench`. Each sandbox runs `1` after the clock stops: one that cannot run is no
//! result.

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use mcp_code_mode::assets;
use mcp_code_mode::bridge::NoTools;
use mcp_code_mode::engine::{Job, Limits, Outcome, Sandbox, SandboxConfig, Zygote, ZygoteCommand};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn checked(outcome: Outcome, what: &str) {
    if let Some(e) = outcome.error {
        panic!("{what} could not run `1`: {}: {}", e.kind, e.message);
    }
}

fn thread_sandboxes(c: &mut Criterion) {
    // As `serve` and `run` do: thread sandboxes start from the build's compiled code.
    mcp_code_mode::engine::offer_compiled_code(assets::COMPILED_WASM, assets::COMPILED_JS);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let mut group = c.benchmark_group("sandbox_ready");
    group.sampling_mode(SamplingMode::Flat);
    // (name, snapshot, samples, time to spend): booting takes seconds, a restore ~0.2 s.
    let kinds = [
        ("thread_from_snapshot", Some(assets::snapshot()), 30, 10),
        ("thread_booting", None, 10, 40),
    ];
    for (name, snapshot, samples, seconds) in kinds {
        group.sample_size(samples);
        group.measurement_time(Duration::from_secs(seconds));
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut ready = Duration::ZERO;
                    for _ in 0..iters {
                        let config = SandboxConfig::new(Limits::default(), snapshot.clone());
                        let started = Instant::now();
                        let sandbox = Sandbox::new(config).await.expect("a thread sandbox");
                        ready += started.elapsed();
                        checked(sandbox.execute(Job::new("1")).await, "a thread sandbox");
                    }
                    ready
                })
            })
        });
    }
    group.finish();
}

fn forked_sandboxes(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let zygote = runtime.block_on(async {
        let command = ZygoteCommand {
            // Cargo builds the binary for its benches and names it here.
            program: env!("CARGO_BIN_EXE_mcp-code-mode").into(),
            args: vec!["__zygote".into()],
        };
        let zygote = Zygote::start(&command, Limits::default())
            .await
            .expect("the sandbox zygote");
        assert!(
            zygote.wait_warm(Duration::from_secs(120)).await,
            "the sandbox zygote did not finish warming up in 120 s"
        );
        zygote
    });
    let mut group = c.benchmark_group("sandbox_ready");
    group.sample_size(100);
    group.bench_function("fork", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut ready = Duration::ZERO;
                for _ in 0..iters {
                    let started = Instant::now();
                    let sandbox = zygote
                        .fork(Arc::new(NoTools), None, None)
                        .await
                        .expect("a forked sandbox");
                    ready += started.elapsed();
                    checked(sandbox.execute(Job::new("1")).await, "a forked sandbox");
                }
                ready
            })
        })
    });
    group.finish();
}

criterion_group!(benches, forked_sandboxes, thread_sandboxes);
criterion_main!(benches);
