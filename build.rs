//! Build script: boots Pyodide once and saves the memory snapshot every sandbox restores (`OUT_DIR/pyodide.snapshot.packed`, embedded by src/assets.rs),
//! then, in sandboxes restored from it, compiles the wheelhouse's bytecode and makes the zygote's
//! compiled code (for Pyodide's module and the JS modules).
//!
//! It boots with the sandbox core (crates/sandbox, an ordinary build-dependency), so the snapshot
//! is made by exactly the code that restores it.

use mcp_code_mode_sandbox::{assets, engine, wheels, Chain};
use std::{fs, path::Path};

/// Set on this script's own child process, which makes the zygote's compiled code (see
/// [`compiled_code`]) and writes it beside the snapshot at the path given.
const COMPILED_CODE_STEP: &str = "MCP_CODE_MODE_BUILD_COMPILED_CODE";
/// Which of the step's two passes a child process runs (see [`compiled_code`]).
const COMPILED_CODE_PASS: &str = "MCP_CODE_MODE_BUILD_COMPILED_CODE_PASS";
const FIRST_PASS: &str = "first";
const SECOND_PASS: &str = "second";

/// What the build's sandbox runs before V8's compiled code is taken (see `make_compiled_code`):
/// imports of wheelhouse packages agents use most, three times over (each time from scratch),
/// so that V8 optimizes what imports run and every zygote starts with it.
const IMPORT_JOB: &str = r#"
import importlib, sys
names = ["sympy", "pydantic", "networkx", "bs4", "dateutil", "tabulate", "openpyxl", "markdown"]
before = set(sys.modules)
for _ in range(3):
    for name in names:
        importlib.import_module(name)
    for module in set(sys.modules) - before:
        del sys.modules[module]
"#;

fn main() {
    if let Some(snapshot) = std::env::var_os(COMPILED_CODE_STEP) {
        return compiled_code_step(Path::new(&snapshot));
    }
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
        .unwrap_or_else(|e| panic!("could not make the Pyodide memory snapshot: {}", Chain(&e)));
    let compressed = assets::pack_snapshot(&snapshot);
    fs::write(&out, &compressed).unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
    let snapshot_len = snapshot.len();
    bytecode(&runtime, snapshot);
    compiled_code(&out);
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
        .unwrap_or_else(|e| panic!("could not compile the wheelhouse's bytecode: {}", Chain(&e)));
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

/// The zygote's compiled code: for Pyodide's module (`OUT_DIR/pyodide.wasm-code`) and the JS
/// modules' code caches (`OUT_DIR/boot.js-code`), embedded by src/assets.rs; made in child
/// processes of this script: V8 takes compiled code only in a process with the flags it was made
/// with, and the zygote's flags (single-threaded V8) are not this process's, which has made the
/// snapshot already. In two passes (see `make_compiled_code`), a process each: the first writes
/// `pyodide.wasm-code.first`, which the second starts from.
fn compiled_code(snapshot_path: &Path) {
    let script = std::env::current_exe().expect("the build script's own path");
    for pass in [FIRST_PASS, SECOND_PASS] {
        let status = std::process::Command::new(&script)
            .env(COMPILED_CODE_STEP, snapshot_path)
            .env(COMPILED_CODE_PASS, pass)
            .status()
            .unwrap_or_else(|e| panic!("cannot start the build script again: {e}"));
        assert!(
            status.success(),
            "could not make the zygote's compiled code ({pass} pass: {status})"
        );
    }
}

fn compiled_code_step(snapshot_path: &Path) {
    let packed = fs::read(snapshot_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", snapshot_path.display()));
    let snapshot = assets::unpack_snapshot(&packed).unwrap_or_else(|e| panic!("{e}"));
    // The wheelhouse as the product serves it (its bytecode is beside the snapshot), for the
    // import job below.
    let dir = snapshot_path.with_file_name("bytecode");
    let mut zips: Vec<(&'static str, &'static [u8])> = Vec::new();
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
    {
        let path = entry.expect("a bytecode zip").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a zip's name")
            .to_owned();
        let bytes =
            fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        zips.push((name.leak(), bytes.leak()));
    }
    let house = wheels::Wheelhouse::embedded().unwrap_or_else(|e| panic!("{e}"));
    wheels::use_wheelhouse(house.with_bytecode(&zips));
    let first_code = snapshot_path.with_file_name("pyodide.wasm-code.first");
    let pass = std::env::var(COMPILED_CODE_PASS).expect("the pass is set with the step");
    let first: Option<&'static [u8]> = (pass == SECOND_PASS).then(|| {
        let bytes = fs::read(&first_code)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", first_code.display()));
        &*bytes.leak()
    });
    let code = engine::zygote::make_compiled_code(std::sync::Arc::new(snapshot), IMPORT_JOB, first)
        .unwrap_or_else(|e| {
            panic!(
                "could not make the zygote's compiled code ({pass} pass): {}",
                Chain(&e)
            )
        });
    let outputs = match first {
        None => vec![(first_code, code.wasm)],
        Some(_) => vec![
            (snapshot_path.with_file_name("pyodide.wasm-code"), code.wasm),
            (snapshot_path.with_file_name("boot.js-code"), code.js),
        ],
    };
    for (out, bytes) in outputs {
        fs::write(&out, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
    }
}
