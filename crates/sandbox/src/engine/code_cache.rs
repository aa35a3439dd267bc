//! V8's code caches of the JS modules a sandbox loads (Pyodide's and ours), made as a zygote
//! boots, so that a zygote starts without parsing and compiling them again.
//!
//! Pyodide's loader is 1.25 MB of JS. Without a cache V8 pre-parses all of it and then compiles
//! each function the boot runs, one by one, on the zygote's only thread. A cache deno_core makes
//! right after a module compiles would hold its top level only; one made after a boot holds
//! every function the boot ran (1.2 MB of bytecode for Pyodide's loader). The build makes it
//! (`zygote::make_compiled_code`): in the booted isolate it compiles each module's source
//! again, which V8 finds in its compilation cache with those functions compiled, and serializes
//! that.
//!
//! V8 checks a cache's header (its version, its flags, the source's length) and refuses one that
//! does not match, but trusts the rest: a cache is offered only for the very source it was made
//! from (its sha256 is kept beside it and checked first).

use deno_core::{v8, JsRuntime};
use sha2::{Digest, Sha256};

/// The modules a sandbox loads, by the paths of their `file:` specifiers.
const MODULES: [&str; 5] = [
    "/codemode/main_deno.js",
    "/codemode/host_deno.js",
    "/codemode/runner.js",
    "/pyodide/pyodide.mjs",
    "/pyodide/pyodide.asm.mjs",
];

fn source_hash(source: &str) -> [u8; 32] {
    Sha256::digest(source.as_bytes()).into()
}

/// The code caches of every module `js` has run, serialized: for each module, its path (u16 LE
/// length, then the bytes), its source's sha256, and its cache (u32 LE length, then the bytes).
/// Fails with the path of a module V8 made no cache of.
pub(crate) fn make(js: &mut JsRuntime) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::new();
    for path in MODULES {
        let source = super::isolate::embedded_module(path).ok_or(path)?;
        deno_core::scope!(scope, js);
        let (Some(name), Some(text)) = (
            v8::String::new(scope, &format!("file://{path}")),
            v8::String::new(scope, source),
        ) else {
            return Err(path);
        };
        // As deno_core's loader compiles a module: same name, a module origin, no host options;
        // anything else and V8 would not find the compiled module in its compilation cache.
        let origin = v8::ScriptOrigin::new(
            scope,
            name.into(),
            0,
            0,
            false,
            0,
            None,
            false,
            false,
            true,
            None,
        );
        let mut compiling = v8::script_compiler::Source::new(text, Some(&origin));
        let cache = v8::script_compiler::compile_module(scope, &mut compiling)
            .and_then(|module| module.get_unbound_module_script(scope).create_code_cache())
            .ok_or(path)?;
        out.extend_from_slice(&(path.len() as u16).to_le_bytes());
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(&source_hash(source));
        out.extend_from_slice(&(cache.len() as u32).to_le_bytes());
        out.extend_from_slice(&cache);
    }
    Ok(out)
}

/// The cache in `caches` (as [`make`] wrote them) for the module at `path`, if it was made from
/// `source`; with a number naming it (deno_core hands it back if V8 refuses the cache).
pub(crate) fn find(
    caches: &'static [u8],
    path: &str,
    source: &str,
) -> Option<(u64, &'static [u8])> {
    let mut rest = caches;
    let mut take = |n: usize| -> Option<&'static [u8]> {
        let (taken, left) = rest.split_at_checked(n)?;
        rest = left;
        Some(taken)
    };
    loop {
        let name_len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let name = take(name_len)?;
        let hash = take(32)?;
        let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let cache = take(len)?;
        if name == path.as_bytes() {
            let ours = source_hash(source);
            let id = u64::from_le_bytes(ours[..8].try_into().ok()?);
            return (hash == ours).then_some((id, cache));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, source: &str, cache: &[u8]) -> Vec<u8> {
        let mut out = (path.len() as u16).to_le_bytes().to_vec();
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(&source_hash(source));
        out.extend_from_slice(&(cache.len() as u32).to_le_bytes());
        out.extend_from_slice(cache);
        out
    }

    #[test]
    fn a_cache_is_found_only_for_the_source_it_was_made_from() {
        let mut caches = entry("/a.js", "let a = 1;", b"AAAA");
        caches.extend(entry("/b.js", "let b = 2;", b"BB"));
        let caches: &'static [u8] = caches.leak();
        assert_eq!(
            find(caches, "/b.js", "let b = 2;").map(|(_, c)| c),
            Some(&b"BB"[..])
        );
        assert_eq!(
            find(caches, "/a.js", "let a = 1;").map(|(_, c)| c),
            Some(&b"AAAA"[..])
        );
        // Same length, other text: V8 alone would take the cache.
        assert_eq!(find(caches, "/a.js", "let a = 2;"), None);
        assert_eq!(find(caches, "/c.js", "let c = 3;"), None);
        assert_eq!(find(&[], "/a.js", "let a = 1;"), None);
        // Cut anywhere, the blob yields no cache rather than a part of one.
        for cut in 0..caches.len() {
            assert_eq!(
                find(&caches[..cut], "/b.js", "let b = 2;"),
                None,
                "cut at {cut}"
            );
        }
    }
}
