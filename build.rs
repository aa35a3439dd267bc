//! Build script: boots Pyodide once and saves the memory snapshot every sandbox restores (`OUT_DIR/pyodide.snapshot.packed`, embedded by src/assets.rs).
//!
//! It boots with the sandbox core (crates/sandbox, an ordinary build-dependency), so the snapshot
//! is made by exactly the code that restores it.

use mcp_code_mode_sandbox::{assets, engine};
use std::{fs, path::Path};

fn main() {
    for file in [
        "js/runner.js",
        "js/main_deno.js",
        "js/host_deno.js",
        "js/codemode.py",
    ] {
        println!("cargo:rerun-if-changed={file}");
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("pyodide.snapshot.packed");
    let started = std::time::Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let snapshot = runtime
        .block_on(engine::make_snapshot())
        .unwrap_or_else(|e| panic!("could not make the Pyodide memory snapshot: {e}"));
    let compressed = assets::pack_snapshot(&snapshot);
    fs::write(&out, &compressed).unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
    // Shown with `cargo build -vv`; not a warning, so a normal build prints nothing.
    println!(
        "Pyodide snapshot: {} bytes ({} compressed) in {} ms",
        snapshot.len(),
        compressed.len(),
        started.elapsed().as_millis()
    );
}
