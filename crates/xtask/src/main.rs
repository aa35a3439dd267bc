//! `cargo xtask …` (an alias in .cargo/config.toml): mcp-code-mode's development tasks, kept out
//! of the product binary. One task so far: `bench`, the Performance tables of the README.

mod bench;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::Command;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "mcp-code-mode's development tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Measure round trips, overhead, cold start, memory, forked sandboxes beside threads, HTTP,
    /// the local executor and package imports through the release binary, as its clients see
    /// it; print the tables the README's Performance section shows. (A sandbox made ready,
    /// measured in-process: `cargo bench --bench sandbox`.)
    Bench(BenchArgs),
}

#[derive(Args)]
struct BenchArgs {
    /// Fewer samples: a quick look rather than the figures for the README.
    #[arg(long)]
    quick: bool,
    /// Measure only these rows (2-11; 8 is the forked sandbox beside threads, 9 HTTP and HAProxy, 10 the local executor beside the sandbox, 11 importing wheelhouse packages), e.g. `--only 2,8`.
    #[arg(long, value_delimiter = ',', value_name = "ROWS", value_parser = clap::value_parser!(u8).range(1..=11))]
    only: Vec<u8>,
    /// The binary to measure, e.g. an older build kept for an A/B (default: this checkout's,
    /// built first with `cargo build --release`).
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let Task::Bench(args) = Cli::parse().task;
    let binary = match args.binary {
        Some(path) => std::fs::canonicalize(&path)
            .with_context(|| format!("--binary {}: no such file", path.display()))?,
        None => release_binary()?,
    };
    eprintln!("bench: measuring {}", binary.display());
    tokio::runtime::Runtime::new()?.block_on(bench::run(binary, args.quick, &args.only))
}

/// `cargo build --release` of this checkout's binary, and its path.
fn release_binary() -> anyhow::Result<PathBuf> {
    // Set by cargo for the programs it runs: the cargo (and toolchain) that runs this one.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = bench::source_dir();
    eprintln!("bench: cargo build --release --bin mcp-code-mode");
    let built = Command::new(&cargo)
        .args(["build", "--release", "--package", "mcp-code-mode"])
        .args(["--bin", "mcp-code-mode"])
        .current_dir(&root)
        .status()
        .context("cannot run cargo")?;
    if !built.success() {
        bail!("`cargo build --release --bin mcp-code-mode` failed ({built})");
    }
    // Where cargo put it: target/ or $CARGO_TARGET_DIR (or a config's build.target-dir).
    let metadata = Command::new(&cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(&root)
        .output()
        .context("cannot run cargo metadata")?;
    let metadata: serde_json::Value =
        serde_json::from_slice(&metadata.stdout).context("cargo metadata printed no JSON")?;
    let target = metadata["target_directory"]
        .as_str()
        .context("cargo metadata names no target directory")?;
    Ok(PathBuf::from(target).join("release/mcp-code-mode"))
}
