//! assets — what this binary embeds: the sandbox core's files (Pyodide's pinned boot files and
//! our `js/`, re-exported), and what build.rs made with the core: the memory snapshot, the
//! zygote's compiled code (Pyodide's module, the JS modules) and the wheelhouse's bytecode.

pub use mcp_code_mode_sandbox::assets::*;
use mcp_code_mode_sandbox::engine::Snapshot;

/// The Pyodide memory snapshot build.rs made (see engine::make_snapshot), packed (see
/// `pack_snapshot`): 31 MB in 8.6. A `static`, so the binary holds one copy.
static SNAPSHOT_PACKED: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/pyodide.snapshot.packed"));

/// V8's compiled code for Pyodide's module as a zygote boots it (CPython's interpreter loop
/// optimized), made by build.rs (see engine::zygote::make_compiled_code): a zygote starts with
/// it instead of compiling that loop again.
pub static COMPILED_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pyodide.wasm-code"));

/// V8's code caches of the JS modules a zygote runs as it boots, made with [`COMPILED_WASM`]: a
/// zygote starts without parsing and compiling them again.
pub static COMPILED_JS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/boot.js-code"));

/// The snapshot every sandbox restores instead of booting, inflated once per process on first
/// use and kept: a thread pool restores it again and again.
pub fn snapshot() -> Snapshot {
    static INFLATED: std::sync::OnceLock<Snapshot> = std::sync::OnceLock::new();
    INFLATED.get_or_init(snapshot_once).clone()
}

/// A copy of the snapshot of its own, for a process that restores once (the zygote): its
/// sandbox takes the bytes without copying them, and they are freed once restored.
pub fn snapshot_once() -> Snapshot {
    Snapshot::new(
        unpack_snapshot(SNAPSHOT_PACKED)
            .unwrap_or_else(|e| panic!("{e}: build.rs packed it, so this binary is damaged")),
    )
}

/// The wheelhouse's bytecode build.rs compiled (see engine::make_bytecode): (`<wheel>.pyc.zip`,
/// zip of its `__pycache__/*.pyc`).
pub static BYTECODE: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/bytecode.rs"));

/// The snapshot as embedded, for the check that the binary holds it once.
pub fn snapshot_packed() -> &'static [u8] {
    SNAPSHOT_PACKED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_snapshot_unpacks_to_the_same_bytes() {
        let mut bytes = vec![0u8; 10 * 4096 + 100];
        bytes[5] = 1; // page 0
        bytes[3 * 4096..4 * 4096].fill(7); // page 3
        bytes[4 * 4096 + 9] = 2; // page 4, a run with page 3
        bytes[10 * 4096 + 99] = 3; // the short last page
        let packed = pack_snapshot(&bytes);
        assert!(packed.len() < 200, "{} bytes", packed.len());
        assert_eq!(unpack_snapshot(&packed).unwrap(), bytes);
        assert!(unpack_snapshot(&packed[..packed.len() - 3]).is_err());
        assert!(unpack_snapshot(&[]).is_err());
        let real = snapshot();
        assert_eq!(
            pack_snapshot(&real),
            SNAPSHOT_PACKED,
            "packing is deterministic"
        );
    }
}
