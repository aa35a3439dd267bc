//! wheels — the packages a sandbox can import: the wheelhouse embedded at build time
//! (`wheelhouse/`, checked by build.rs), plus the user's own wheels (`--wheels DIR`), added once
//! per process before the first sandbox starts.
//!
//! The sandbox reads the lock (Pyodide's format: each package's file, imports and dependencies)
//! and a wheel's bytes through `op_wheels_*`; Python installs a wheel into its in-memory
//! filesystem the first time a script imports one of its modules (js/codemode.py). A wheel's wasm
//! modules (`.so`) are the only wasm a ready sandbox may compile: `op_wasm_compile_listed` compiles
//! a module only if its sha256 is one of theirs ([`Wheelhouse::wasm_listed`]).

use crate::wheelcheck;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
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
            .map(|name| {
                (
                    name.to_owned(),
                    Cow::Borrowed(crate::assets::wheel(name).unwrap()),
                )
            })
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

impl Wheelhouse {
    /// The embedded wheelhouse plus the wheels in `dir` (a user's own: pure, or built for Pyodide
    /// 314.0.8's ABI; Pyodide's own builds are checked against its pinned lock), with `preload`
    /// installed into every sandbox ahead of its script. Every refusal names the wheel and why.
    pub fn with_user_wheels(dir: Option<&Path>, preload: &[String]) -> Result<Self, String> {
        let mut house = Self::embedded()?;
        let mut lock: Value = serde_json::from_str(&house.lock_json)
            .map_err(|e| format!("the embedded wheelhouse lock does not parse: {e}"))?;
        let packages = lock["packages"]
            .as_object_mut()
            .ok_or("the embedded wheelhouse lock has no packages")?;
        if let Some(dir) = dir {
            let pyodide_lock: Value = crate::assets::pyodide_file("pyodide-lock.json")
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null);
            let pyodide_files: BTreeMap<&str, &Value> = pyodide_lock["packages"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, e)| Some((e["file_name"].as_str()?, e)))
                .collect();
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| format!("--wheels {}: {e}", dir.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "whl"))
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(format!("--wheels {}: no .whl files there", dir.display()));
            }
            for path in files {
                let file = path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if let Some(why) = wheelcheck::tag_mismatch(&file) {
                    return Err(format!("--wheels {}: {why}", dir.display()));
                }
                let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let sha256 = wheelcheck::sha256_hex(&bytes);
                let entry = match pyodide_files.get(file.as_str()) {
                    Some(pinned) => {
                        if pinned["sha256"].as_str() != Some(sha256.as_str()) {
                            return Err(format!(
                                "--wheels {}: {file} has sha256 {sha256}, but Pyodide {}'s pyodide-lock.json pins {}: it is not Pyodide's own build",
                                dir.display(),
                                crate::assets::PYODIDE_VERSION,
                                pinned["sha256"].as_str().unwrap_or("?")
                            ));
                        }
                        (*pinned).clone()
                    }
                    None => user_entry(&file, &bytes, sha256)
                        .map_err(|e| format!("--wheels {}: {file}: {e}", dir.display()))?,
                };
                for (module_name, module) in wheelcheck::zip_entries(&bytes, |n| n.ends_with(".so"))
                    .map_err(|e| format!("--wheels {}: {file}: {e}", dir.display()))?
                {
                    wheelcheck::check_growth(&module).map_err(|e| {
                        format!("--wheels {}: {file}: {module_name}: {e}", dir.display())
                    })?;
                    house.wasm.insert(wheelcheck::sha256_hex(&module));
                }
                let name = entry["name"].as_str().unwrap_or_default().to_owned();
                if let Some(old) = packages.remove(&name) {
                    if let Some(old_file) = old["file_name"].as_str() {
                        house.files.remove(old_file);
                    }
                }
                packages.insert(name, entry);
                house.files.insert(file, Cow::Owned(bytes));
            }
        }
        // Every dependency must be there: checked once here, not when a script imports.
        for (name, entry) in packages.iter() {
            for dep in entry["depends"].as_array().into_iter().flatten() {
                let dep = dep.as_str().unwrap_or_default();
                if !packages.contains_key(&wheelcheck::normalize(dep))
                    && !packages.contains_key(dep)
                {
                    return Err(format!("{name} needs {dep}, which neither the wheelhouse nor --wheels has: add its wheel"));
                }
            }
        }
        for name in preload {
            if !packages.contains_key(&wheelcheck::normalize(name)) {
                return Err(format!(
                    "preload: no package {name:?} in the wheelhouse or --wheels"
                ));
            }
        }
        house.preload = preload.iter().map(|n| wheelcheck::normalize(n)).collect();
        lock["preload"] = serde_json::json!(house.preload);
        house.lock_json = lock.to_string();
        Ok(house)
    }
}

/// A lock entry for a user's wheel, from its METADATA (dependencies without environment markers:
/// a marker's dependency is not followed) and its files (the modules it provides).
fn user_entry(file: &str, bytes: &[u8], sha256: String) -> Result<Value, String> {
    let wanted = |n: &str| {
        let mut parts = n.split('/');
        let first = parts.next().unwrap_or("");
        first.ends_with(".dist-info")
            && matches!(parts.next(), Some("METADATA" | "top_level.txt"))
            && parts.next().is_none()
    };
    let entries = wheelcheck::zip_entries(bytes, wanted)?;
    let metadata = entries
        .iter()
        .find(|(n, _)| n.ends_with("/METADATA"))
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
        .ok_or("no .dist-info/METADATA: not a wheel")?;
    let field = |key: &str| {
        metadata
            .lines()
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
            .map(|v| v.trim().to_owned())
            .collect::<Vec<_>>()
    };
    let name = field("Name")
        .into_iter()
        .next()
        .ok_or("METADATA has no Name")?;
    let version = field("Version").into_iter().next().unwrap_or_default();
    let depends: Vec<String> = field("Requires-Dist")
        .iter()
        .filter(|r| !r.contains(';'))
        .map(|r| {
            let end = r
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
                .unwrap_or(r.len());
            wheelcheck::normalize(&r[..end])
        })
        .collect();
    let mut imports: Vec<String> = Vec::new();
    for n in zip_names(bytes)? {
        let first = n.split('/').next().unwrap_or("");
        if first.ends_with(".dist-info") || first.ends_with(".data") {
            continue;
        }
        let module = if n.contains('/') {
            (n.ends_with(".py") || n.ends_with(".so")).then_some(first)
        } else {
            n.strip_suffix(".py").or_else(|| {
                n.ends_with(".so")
                    .then(|| n.split('.').next().unwrap_or(""))
            })
        };
        if let Some(m) = module {
            if !m.is_empty()
                && m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !imports.iter().any(|i| i == m)
            {
                imports.push(m.to_owned());
            }
        }
    }
    imports.sort();
    Ok(serde_json::json!({
        "name": wheelcheck::normalize(&name),
        "version": version,
        "file_name": file,
        "install_dir": "site",
        "sha256": sha256,
        "package_type": "package",
        "imports": imports,
        "depends": depends,
        "unvendored_tests": false,
        "shared_library": false,
    }))
}

/// Every entry name in a zip.
fn zip_names(bytes: &[u8]) -> Result<Vec<String>, String> {
    let names = std::cell::RefCell::new(Vec::new());
    wheelcheck::zip_entries(bytes, |n| {
        names.borrow_mut().push(n.to_owned());
        false
    })?;
    Ok(names.into_inner())
}

impl Wheelhouse {
    /// Adds bytecode compiled for the embedded wheels (`<wheel file>.pyc.zip`): the lock then names
    /// it as the package's `"bytecode"`, installed with the wheel. Bytecode for a wheel no longer
    /// in use (a user's wheel replaced it) is left out.
    pub fn with_bytecode(mut self, zips: &[(&'static str, &'static [u8])]) -> Self {
        let Ok(mut lock) = serde_json::from_str::<Value>(&self.lock_json) else {
            return self;
        };
        if let Some(packages) = lock["packages"].as_object_mut() {
            for (name, bytes) in zips {
                let Some(wheel) = name.strip_suffix(".pyc.zip") else {
                    continue;
                };
                if let Some(entry) = packages
                    .values_mut()
                    .find(|e| e["file_name"].as_str() == Some(wheel))
                {
                    entry["bytecode"] = Value::from(*name);
                    self.files.insert((*name).to_owned(), Cow::Borrowed(*bytes));
                }
            }
        }
        self.lock_json = lock.to_string();
        self
    }
}
