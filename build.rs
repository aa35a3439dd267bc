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
        "wheelhouse/wheelhouse-lock.json",
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
    let snapshot_len = snapshot.len();
    bytecode(&runtime, snapshot);
    // Shown with `cargo build -vv`; not a warning, so a normal build prints nothing.
    println!(
        "Pyodide snapshot: {} bytes ({} compressed) in {} ms",
        snapshot_len,
        compressed.len(),
        started.elapsed().as_millis()
    );
}

/// The wheelhouse's bytecode, compiled in a sandbox restored from the snapshot just made:
/// `OUT_DIR/bytecode/<wheel>.pyc.zip` and `OUT_DIR/bytecode.rs`, which src/assets.rs includes.
fn bytecode(runtime: &tokio::runtime::Runtime, snapshot: Vec<u8>) {
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).to_path_buf();
    let zips = runtime
        .block_on(engine::make_bytecode(Some(std::sync::Arc::new(snapshot))))
        .unwrap_or_else(|e| panic!("could not compile the wheelhouse's bytecode: {e}"));
    let dir = out.join("bytecode");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
    let mut code = String::from("&[\n");
    for (name, bytes) in &zips {
        let path = dir.join(name);
        fs::write(&path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        code.push_str(&format!(
            "    ({name:?}, include_bytes!({:?}) as &[u8]),\n",
            path.display().to_string()
        ));
    }
    code.push_str("]\n");
    let list = out.join("bytecode.rs");
    fs::write(&list, code).unwrap_or_else(|e| panic!("cannot write {}: {e}", list.display()));
}
