//! Build script of the sandbox core: checks Pyodide's pinned boot files against
//! `pyodide-assets/SHA256SUMS` and packs those that shrink for embedding (LZ4, `OUT_DIR/<name>.lz4`; not the zip), which
//! src/assets.rs inflates once per process on first use; and the wheelhouse (top-level
//! `wheelhouse/`): every wheel `requirements.txt` pins must be there with the sha256 it pins, and
//! no other, and the lock must name the same files with the same hashes. The wheels are embedded
//! as they are (`OUT_DIR/wheelhouse.rs`), with the sha256 of every wasm module (`.so`) inside them:
//! the only modules a ready sandbox may compile.

use sha2::{Digest, Sha256};
use std::{fs, path::Path};

#[path = "src/wheelcheck.rs"]
#[allow(dead_code)]
mod wheelcheck;

fn main() {
    // Read at run time, not `env!`: a build script binary compiled for one checkout is reused by
    // cargo for another that shares the target directory.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest_dir).join("../../pyodide-assets");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let sums_path = dir.join("SHA256SUMS");
    println!("cargo:rerun-if-changed={}", sums_path.display());
    let sums = fs::read_to_string(&sums_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", sums_path.display()));
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let (want, name) = line
            .split_once("  ")
            .unwrap_or_else(|| panic!("{}: malformed line {line:?}", sums_path.display()));
        let path = dir.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        let bytes = fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {} ({e}); run pyodide-assets/fetch.sh",
                path.display()
            )
        });
        let got = format!("{:x}", Sha256::digest(&bytes));
        if got != want {
            panic!(
                "{} has sha256 {got}, but SHA256SUMS pins {want}; run pyodide-assets/fetch.sh",
                path.display()
            );
        }
        if name.ends_with(".zip") {
            continue; // already compressed: embedded as it is
        }
        let packed = Path::new(&out).join(format!("{name}.lz4"));
        fs::write(&packed, lz4_flex::compress_prepend_size(&bytes))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", packed.display()));
    }
    embed_wheelhouse(
        &Path::new(&manifest_dir).join("../../wheelhouse"),
        Path::new(&out),
    );
}

/// Checks the wheelhouse (see wheelcheck.rs) and writes `OUT_DIR/wheelhouse.rs`, which embeds it.
fn embed_wheelhouse(dir: &Path, out: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        println!("cargo:rerun-if-changed={}", entry.path().display());
    }
    let wheels = wheelcheck::check_wheelhouse(dir).unwrap_or_else(|e| panic!("{e}"));
    let mut code = String::from("pub static WHEELS: &[(&str, &[u8])] = &[\n");
    for wheel in &wheels {
        code.push_str(&format!(
            "    ({:?}, include_bytes!({:?})),\n",
            wheel.file,
            wheel.path.canonicalize().unwrap().display().to_string()
        ));
    }
    code.push_str("];\n/// The sha256 of every wasm module inside those wheels.\npub static WASM_SHA256: &[&str] = &[\n");
    for hash in wheels.iter().flat_map(|w| &w.wasm_sha256) {
        code.push_str(&format!("    {hash:?},\n"));
    }
    code.push_str(&format!(
        "];\npub static LOCK_JSON: &str = include_str!({:?});\n",
        dir.join(wheelcheck::LOCK_FILE)
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    ));
    let target = out.join("wheelhouse.rs");
    fs::write(&target, code).unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
}
