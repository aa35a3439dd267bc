//! assets — the files a sandbox boots from, embedded in the binary.
//!
//! Pyodide's five pinned boot files (checked against `pyodide-assets/SHA256SUMS` by build.rs) and
//! our own `js/` sources. A leaf module: it knows nothing of V8, MCP or the network, so both the
//! V8 host and the browser-parity host serve exactly these bytes.

include!("assets_files.rs");

/// The Pyodide memory snapshot build.rs made (see engine::make_snapshot), restored by every
/// sandbox instead of booting. None while build.rs itself is being compiled.
pub const SNAPSHOT: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/pyodide.snapshot"
)));
