// The embedded files, shared with build.rs (which includes this file to make the snapshot).
// Plain items only: it is `include!`d, so no inner attributes or `//!` docs here.

/// The Pyodide release every sandbox runs.
pub const PYODIDE_VERSION: &str = "314.0.8";

macro_rules! pyodide_file {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/pyodide-assets/",
                $name
            )),
        )
    };
}

/// Pyodide's boot files by name. Nothing else is ever served to the sandbox as a "file".
pub const PYODIDE_FILES: [(&str, &[u8]); 5] = [
    pyodide_file!("pyodide.asm.wasm"),
    pyodide_file!("python_stdlib.zip"),
    pyodide_file!("pyodide.asm.mjs"),
    pyodide_file!("pyodide-lock.json"),
    pyodide_file!("pyodide.mjs"),
];

/// Our JS modules and the Python prelude, by file name under `js/`.
pub const JS_FILES: [(&str, &str); 5] = [
    ("main_deno.js", include_str!("../js/main_deno.js")),
    ("host_deno.js", include_str!("../js/host_deno.js")),
    ("runner.js", include_str!("../js/runner.js")),
    ("codemode.py", include_str!("../js/codemode.py")),
    ("main_browser.js", include_str!("../js/main_browser.js")),
];

/// A pinned Pyodide file by its bare name (`pyodide.asm.wasm`) or its path under the sandbox's
/// index URL (`/pyodide/pyodide.asm.wasm`).
pub fn pyodide_file(path: &str) -> Option<&'static [u8]> {
    let name = path.strip_prefix("/pyodide/").unwrap_or(path);
    PYODIDE_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| *bytes)
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
        "pyodide.mjs" | "pyodide.asm.mjs" => {
            pyodide_file(name).and_then(|b| std::str::from_utf8(b).ok())
        }
        _ => None,
    }
}
