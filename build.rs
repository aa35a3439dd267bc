//! Build script: refuses to embed Pyodide boot files that do not match their pinned sha256.
//!
//! The files themselves are embedded by `src/engine/assets.rs` with `include_bytes!`; this script
//! only makes a tampered or half-downloaded `pyodide-assets/` a build error instead of a runtime
//! mystery.
use sha2::{Digest, Sha256};
use std::{fs, path::Path};

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pyodide-assets");
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
    }
    for js in ["js"] {
        println!("cargo:rerun-if-changed={js}");
    }
}
