//! wheels — the packages a sandbox can import: the wheelhouse embedded at build time
//! (`wheelhouse/`, checked by build.rs), plus the user's own wheels (`--wheels DIR`), added once
//! per process before the first sandbox starts.
//!
//! The sandbox reads the lock (Pyodide's format: each package's file, imports and dependencies)
//! and a wheel's bytes through `op_wheels_*`; Python installs a wheel into its in-memory
//! filesystem the first time a script imports one of its modules (js/codemode.py). A wheel's wasm
//! modules (`.so`) are the only wasm a ready sandbox may compile: `op_wasm_compile_listed` compiles
//! a module only if its sha256 is one of theirs ([`Wheelhouse::wasm_listed`]).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::OnceLock;

/// The wheels one process serves its sandboxes.
pub struct Wheelhouse {
    /// Pyodide's lock format: `{"info": …, "packages": {name: {file_name, imports, depends, …}}}`.
    lock_json: String,
    files: BTreeMap<String, Cow<'static, [u8]>>,
    /// sha256 (hex) of every wasm module inside the wheels.
    wasm: HashSet<String>,
    /// Packages installed into every sandbox before its script runs.
    preload: Vec<String>,
}

static WHEELHOUSE: OnceLock<Wheelhouse> = OnceLock::new();

/// The process's wheelhouse: the embedded one, plus what [`use_wheelhouse`] added.
pub fn wheelhouse() -> &'static Wheelhouse {
    WHEELHOUSE.get_or_init(|| Wheelhouse::embedded().expect("the embedded wheelhouse is valid"))
}

/// Sets the process's wheelhouse (before any sandbox starts); false if one was already in use.
pub fn use_wheelhouse(wheelhouse: Wheelhouse) -> bool {
    WHEELHOUSE.set(wheelhouse).is_ok()
}

impl Wheelhouse {
    /// The wheels build.rs checked and embedded.
    pub fn embedded() -> Result<Self, String> {
        let files = crate::assets::wheel_names()
            .map(|name| (name.to_owned(), Cow::Borrowed(crate::assets::wheel(name).unwrap())))
            .collect();
        Ok(Self {
            lock_json: crate::assets::WHEELHOUSE_LOCK.to_owned(),
            files,
            wasm: crate::assets::WHEELHOUSE_WASM_SHA256
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            preload: Vec::new(),
        })
    }

    pub fn lock_json(&self) -> &str {
        &self.lock_json
    }

    pub fn wheel(&self, file_name: &str) -> Option<&[u8]> {
        self.files.get(file_name).map(|b| &**b)
    }

    pub fn file_names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    pub fn preload(&self) -> &[String] {
        &self.preload
    }

    /// Whether `module` is one of the wheels' wasm modules, byte for byte.
    pub fn wasm_listed(&self, module: &[u8]) -> bool {
        self.wasm.contains(&format!("{:x}", Sha256::digest(module)))
    }

    /// The packages of the lock, by name.
    pub fn packages(&self) -> Map<String, Value> {
        serde_json::from_str::<Value>(&self.lock_json)
            .ok()
            .and_then(|v| v.get("packages").and_then(Value::as_object).cloned())
            .unwrap_or_default()
    }
}
