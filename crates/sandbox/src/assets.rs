//! assets — the files a sandbox boots from, embedded in the binary.
//!
//! Pyodide's five pinned boot files (checked against `pyodide-assets/SHA256SUMS` and packed by
//! this crate's build.rs) and our own `js/` sources, both at the repository's top level. A leaf module: it
//! knows nothing of V8, MCP or the network, so the V8 host and the browser-parity host serve
//! exactly these bytes. Embedded bytes live in `static`s: a `const` is copied in once per use.
//! The memory snapshot is not here: the product's build.rs makes it with this crate.

use std::borrow::Cow;

/// The Pyodide release every sandbox runs, as a literal for `concat!` (the binary's `--version`).
#[macro_export]
macro_rules! pyodide_version {
    () => {
        "314.0.8"
    };
}

/// The Pyodide release every sandbox runs.
pub const PYODIDE_VERSION: &str = pyodide_version!();

macro_rules! packed_file {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".lz4")),
            true,
        )
    };
}
macro_rules! raw_file {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../pyodide-assets/",
                $name
            )),
            false,
        )
    };
}

/// Pyodide's boot files by name, as build.rs checked them: (name, bytes, LZ4-packed). The wasm
/// and the JS shrink ~2× packed; the zip is compressed already. Nothing else is ever served to
/// the sandbox as a "file".
static PYODIDE_EMBEDDED: [(&str, &[u8], bool); 5] = [
    packed_file!("pyodide.asm.wasm"),
    raw_file!("python_stdlib.zip"),
    packed_file!("pyodide.asm.mjs"),
    packed_file!("pyodide-lock.json"),
    packed_file!("pyodide.mjs"),
];

/// Pyodide's module, the one boot file inflated anew for each reader and never kept: a process
/// compiles it once, and V8 keeps its own copy of a module's bytes. A second copy would stay in
/// the zygote and be in every child's page tables (9.4 MB: a fork copies them, an exit frees
/// them).
const NOT_KEPT: &str = "pyodide.asm.wasm";

/// The other boot files, each inflated once, on first use.
static PYODIDE_FILES: [std::sync::OnceLock<Vec<u8>>; 5] = [const { std::sync::OnceLock::new() }; 5];

/// Our JS modules and the Python prelude, by file name under `js/`.
pub static JS_FILES: [(&str, &str); 5] = [
    ("main_deno.js", include_str!("../../../js/main_deno.js")),
    ("host_deno.js", include_str!("../../../js/host_deno.js")),
    ("runner.js", include_str!("../../../js/runner.js")),
    ("codemode.py", include_str!("../../../js/codemode.py")),
    (
        "main_browser.js",
        include_str!("../../../js/main_browser.js"),
    ),
];

/// A pinned Pyodide file by its bare name (`pyodide.asm.wasm`) or its path under the sandbox's
/// index URL (`/pyodide/pyodide.asm.wasm`): borrowed, except Pyodide's module (see [`NOT_KEPT`]).
pub fn pyodide_file(path: &str) -> Option<Cow<'static, [u8]>> {
    let name = path.strip_prefix("/pyodide/").unwrap_or(path);
    let i = PYODIDE_EMBEDDED.iter().position(|(n, _, _)| *n == name)?;
    let (_, bytes, packed) = PYODIDE_EMBEDDED[i];
    let inflate = || {
        lz4_flex::decompress_size_prepended(bytes)
            .unwrap_or_else(|e| panic!("{name} does not inflate ({e}): this binary is damaged"))
    };
    Some(match (packed, name == NOT_KEPT) {
        (false, _) => Cow::Borrowed(bytes),
        (true, true) => Cow::Owned(inflate()),
        (true, false) => Cow::Borrowed(PYODIDE_FILES[i].get_or_init(inflate)),
    })
}

/// A boot file as embedded (packed or not), for the check that the binary holds it once.
pub fn pyodide_file_embedded(name: &str) -> Option<&'static [u8]> {
    PYODIDE_EMBEDDED
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, bytes, _)| *bytes)
}

pub fn js_file(name: &str) -> Option<&'static str> {
    JS_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// Pyodide's own ES modules, served as modules rather than as data.
pub fn pyodide_module(name: &str) -> Option<&'static str> {
    match name {
        "pyodide.mjs" | "pyodide.asm.mjs" => match pyodide_file(name)? {
            Cow::Borrowed(bytes) => std::str::from_utf8(bytes).ok(),
            Cow::Owned(_) => None,
        },
        _ => None,
    }
}

/// The page size the snapshot is packed by: most of a fresh Pyodide heap is whole zero pages.
const SNAPSHOT_PAGE: usize = 4096;

/// Packs a memory snapshot for embedding: its all-zero pages are left out (half of them), the
/// rest LZ4-compressed. Layout: total length (u64 LE), run count (u32 LE), runs of non-zero pages
/// as (first page, page count) (u32 LE each), then the LZ4 block of those pages, size-prepended.
pub fn pack_snapshot(bytes: &[u8]) -> Vec<u8> {
    let pages: Vec<&[u8]> = bytes.chunks(SNAPSHOT_PAGE).collect();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    let mut kept = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        if page.iter().all(|b| *b == 0) {
            continue;
        }
        kept.extend_from_slice(page);
        match runs.last_mut() {
            Some((first, count)) if (*first + *count) as usize == i => *count += 1,
            _ => runs.push((i as u32, 1)),
        }
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for (first, count) in &runs {
        out.extend_from_slice(&first.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }
    out.extend_from_slice(&lz4_flex::compress_prepend_size(&kept));
    out
}

/// The snapshot [`pack_snapshot`] packed. Its zero pages are never written, so they cost no
/// memory until something touches them.
pub fn unpack_snapshot(packed: &[u8]) -> Result<Vec<u8>, String> {
    let bad = || "the packed snapshot is malformed".to_owned();
    let u32_at = |at: usize| -> Result<usize, String> {
        let bytes = packed.get(at..at + 4).ok_or_else(bad)?;
        Ok(u32::from_le_bytes(bytes.try_into().map_err(|_| bad())?) as usize)
    };
    let total = u64::from_le_bytes(
        packed
            .get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let runs = u32_at(8)?;
    let body = 12 + runs * 8;
    let kept = lz4_flex::decompress_size_prepended(packed.get(body..).ok_or_else(bad)?)
        .map_err(|e| format!("the packed snapshot does not inflate: {e}"))?;
    let mut out = vec![0u8; total];
    let mut from = 0;
    for run in 0..runs {
        let (first, count) = (u32_at(12 + run * 8)?, u32_at(16 + run * 8)?);
        let start = first * SNAPSHOT_PAGE;
        let end = ((first + count) * SNAPSHOT_PAGE).min(total);
        let len = end.checked_sub(start).ok_or_else(bad)?;
        out.get_mut(start..end)
            .ok_or_else(bad)?
            .copy_from_slice(kept.get(from..from + len).ok_or_else(bad)?);
        from += len;
    }
    Ok(out)
}

/// The wheelhouse build.rs checked against `wheelhouse/requirements.txt`: `WHEELS` (file name,
/// bytes, embedded as they are: wheels are zips already), `WASM_SHA256` (every wasm module inside
/// them) and `LOCK_JSON` (Pyodide's lock format, generated from the wheels by `wheelhouse/lock.py`).
mod embedded_wheels {
    include!(concat!(env!("OUT_DIR"), "/wheelhouse.rs"));
}
pub use embedded_wheels::{LOCK_JSON as WHEELHOUSE_LOCK, WASM_SHA256 as WHEELHOUSE_WASM_SHA256};

/// An embedded wheel by its file name.
pub fn wheel(file_name: &str) -> Option<&'static [u8]> {
    embedded_wheels::WHEELS
        .iter()
        .find(|(n, _)| *n == file_name)
        .map(|(_, bytes)| *bytes)
}

/// The embedded wheels' file names.
pub fn wheel_names() -> impl Iterator<Item = &'static str> {
    embedded_wheels::WHEELS.iter().map(|(n, _)| *n)
}
