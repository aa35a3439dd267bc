//! wheels — the packages a sandbox can import: the wheelhouse embedded at build time
//! (`wheelhouse/`, checked by build.rs), plus the user's own wheels (`--wheels DIR`), added once
//! per process before the first sandbox starts.
//!
//! The sandbox reads the lock (Pyodide's format: each package's file, imports and dependencies)
//! and a wheel's files through `op_wheels_*`; the first time a script imports one of a wheel's
//! modules, js/codemode.py installs it: js/runner.js lays its files out in the in-memory
//! filesystem unread, and each file's bytes are unpacked here the first time the sandbox opens it
//! (`import sympy` opens a third of sympy's 2,400 files). A wheel's wasm
//! modules (`.so`) are the only wasm a ready sandbox may compile: `op_wasm_compile_listed` compiles
//! a module only if its sha256 is one of theirs ([`Wheelhouse::wasm_listed`]).

use crate::wheelcheck;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The wheels one process serves its sandboxes.
pub struct Wheelhouse {
    /// Pyodide's lock format: `{"info": …, "packages": {name: {file_name, imports, depends, …}}}`.
    lock_json: String,
    files: BTreeMap<String, Cow<'static, [u8]>>,
    /// sha256 (hex) of every wasm module inside the wheels.
    wasm: HashSet<String>,
    /// Packages installed into every sandbox before its script runs.
    preload: Vec<String>,
    /// Every file's zip directory, read the first time a sandbox installs one (a zygote does in
    /// its warm-up, so its children find them read).
    directories: OnceLock<BTreeMap<String, Arc<Directory>>>,
}

/// The files of one wheel (or bytecode zip) as a sandbox installs them.
pub struct Directory {
    entries: Vec<wheelcheck::ZipEntry>,
    /// `[[path, size], …]` in `entries`' order: what js/runner.js lays out, and asks for by position.
    index_json: String,
}

impl Directory {
    fn new(entries: Vec<wheelcheck::ZipEntry>) -> Self {
        let entries: Vec<_> = entries
            .into_iter()
            .filter(|e| !e.name.ends_with('/') && installable(&e.name))
            .collect();
        let index: Vec<(&str, usize)> = entries.iter().map(|e| (&*e.name, e.size)).collect();
        Self {
            index_json: serde_json::to_string(&index).unwrap_or_default(),
            entries,
        }
    }

    pub fn index_json(&self) -> &str {
        &self.index_json
    }
}

/// Zip's method number for Zstandard (APPNOTE 4.4.5). The bytecode build.rs compiles is stored
/// so: it unpacks ~3× faster than deflate (`import sympy` reads 15 MB of it) and is smaller.
const ZSTD: u16 = 93;

fn read_entry(entry: &wheelcheck::ZipEntry, zip: &[u8], dest: &mut [u8]) -> Result<(), String> {
    if entry.method() != ZSTD {
        return entry.read_into(zip, dest);
    }
    thread_local! {
        // One context per thread, reused: making one per file cost more than unpacking most files.
        static UNPACK: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = Default::default();
    }
    let packed = entry.packed(zip)?;
    let unpacked = UNPACK.with_borrow_mut(|unpack| {
        if unpack.is_none() {
            *unpack = zstd::bulk::Decompressor::new().ok();
        }
        unpack.as_mut()?.decompress_to_buffer(packed, dest).ok()
    });
    match unpacked {
        Some(n) if n == dest.len() => Ok(()),
        _ => Err(format!("{} is damaged", entry.name)),
    }
}

/// `zip` with every entry recompressed with Zstandard at `level` (for build.rs's bytecode).
pub fn repack_zstd(zip: &[u8], level: i32) -> Result<Vec<u8>, String> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    let entries = wheelcheck::zip_directory(zip)?;
    for entry in &entries {
        let mut bytes = vec![0; entry.size];
        read_entry(entry, zip, &mut bytes)?;
        let packed = zstd::bulk::compress(&bytes, level).map_err(|e| e.to_string())?;
        let (name, offset) = (entry.name.as_bytes(), out.len());
        let too_big = || format!("{}: too big for a zip without zip64", entry.name);
        let size = |n: usize| u32::try_from(n).map_err(|_| too_big());
        // Version 6.3 (Zstandard); no flags; 1980-01-01 00:00; CRC-32; sizes; name; no extra.
        let fields = |header: &mut Vec<u8>| -> Result<(), String> {
            header.extend(63u16.to_le_bytes());
            header.extend(0u16.to_le_bytes());
            header.extend(ZSTD.to_le_bytes());
            header.extend([0, 0, 0x21, 0]);
            header.extend(crc32fast::hash(&bytes).to_le_bytes());
            header.extend(size(packed.len())?.to_le_bytes());
            header.extend(size(bytes.len())?.to_le_bytes());
            header.extend((name.len() as u16).to_le_bytes());
            header.extend(0u16.to_le_bytes());
            Ok(())
        };
        out.extend(b"PK\x03\x04");
        fields(&mut out)?;
        out.extend(name);
        out.extend(&packed);
        central.extend(b"PK\x01\x02");
        central.extend(63u16.to_le_bytes()); // made by
        fields(&mut central)?;
        central.extend([0; 10]); // comment length, disk, internal and external attributes
        central.extend(size(offset)?.to_le_bytes());
        central.extend(name);
    }
    let (central_at, count) = (out.len(), entries.len() as u16);
    out.extend(&central);
    out.extend(b"PK\x05\x06");
    out.extend([0; 4]);
    out.extend(count.to_le_bytes());
    out.extend(count.to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend((central_at as u32).to_le_bytes());
    out.extend(0u16.to_le_bytes());
    Ok(out)
}

/// Whether a zip entry is a file that can be installed where it says: relative, no `.`/`..`
/// parts (folders are made as their files need them).
pub fn installable(name: &str) -> bool {
    !name.starts_with('/')
        && !name.contains('\\')
        && name.split('/').all(|part| !matches!(part, "" | "." | ".."))
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
            directories: Default::default(),
        })
    }

    pub fn lock_json(&self) -> &str {
        &self.lock_json
    }

    pub fn wheel(&self, file_name: &str) -> Option<&[u8]> {
        self.files.get(file_name).map(|b| &**b)
    }

    /// The files of `file_name` (a wheel or a bytecode zip), None if there is no such file.
    pub fn directory(&self, file_name: &str) -> Option<Arc<Directory>> {
        let directories = self.directories.get_or_init(|| {
            self.files
                .iter()
                .filter_map(|(name, zip)| {
                    // Checked at build time (the wheelhouse) or at start-up (--wheels).
                    let entries = wheelcheck::zip_directory(zip)
                        .inspect_err(|e| tracing::error!("{name}: {e}"))
                        .ok()?;
                    Some((name.clone(), Arc::new(Directory::new(entries))))
                })
                .collect()
        });
        directories.get(file_name).cloned()
    }

    /// Unpacks the `i`-th file of `file_name`'s index into `dest` (exactly its size); false if
    /// there is no such file, or it does not unpack to that size.
    pub fn read_member(&self, file_name: &str, i: usize, dest: &mut [u8]) -> bool {
        let (Some(directory), Some(zip)) = (self.directory(file_name), self.wheel(file_name))
        else {
            return false;
        };
        directory
            .entries
            .get(i)
            .is_some_and(|entry| read_entry(entry, zip, dest).is_ok())
    }

    /// Every installable file of `file_name` unpacked, one after another in the index's order
    /// (for the browser-parity host, which reads a wheel in one request).
    pub fn unpacked(&self, file_name: &str) -> Option<Vec<u8>> {
        let directory = self.directory(file_name)?;
        let zip = self.wheel(file_name)?;
        let mut bytes = Vec::with_capacity(directory.entries.iter().map(|e| e.size).sum());
        for entry in &directory.entries {
            let at = bytes.len();
            bytes.resize(at + entry.size, 0);
            read_entry(entry, zip, &mut bytes[at..]).ok()?;
        }
        Some(bytes)
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
                .and_then(|b| serde_json::from_slice(&b).ok())
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
                let directory = wheelcheck::zip_directory(&bytes)
                    .map_err(|e| format!("--wheels {}: {file}: {e}", dir.display()))?;
                if let Some(bad) = directory
                    .iter()
                    .find(|e| !e.name.ends_with('/') && !installable(&e.name))
                {
                    return Err(format!(
                        "--wheels {}: {file}: the entry {:?} would be installed outside site-packages",
                        dir.display(),
                        bad.name
                    ));
                }
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

/// A lock entry for a user's wheel, from its METADATA (dependencies whose environment markers hold
/// in the sandbox) and its files (the modules it provides).
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
    // A dependency whose marker holds in the sandbox (not on this host) must be there.
    let mut depends: Vec<String> = Vec::new();
    for requirement in field("Requires-Dist") {
        let (spec, marker) = requirement.split_once(';').unwrap_or((&requirement, ""));
        let wanted = marker.trim().is_empty()
            || crate::marker::evaluate(marker).map_err(|e| {
                format!("METADATA's `Requires-Dist: {requirement}`: the marker cannot be read: {e}")
            })?;
        let end = spec
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(spec.len());
        if wanted && !spec[..end].is_empty() {
            depends.push(wheelcheck::normalize(&spec[..end]));
        }
    }
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
    Ok(wheelcheck::zip_directory(bytes)?
        .into_iter()
        .map(|e| e.name)
        .collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn six() -> (Wheelhouse, String) {
        let house = Wheelhouse::embedded().unwrap();
        let six = house
            .file_names()
            .find(|n| n.starts_with("six-"))
            .unwrap()
            .to_owned();
        (house, six)
    }

    #[test]
    fn a_wheels_files_are_read_by_position_at_their_exact_size_only() {
        let (house, six) = six();
        let files = wheelcheck::zip_entries(house.wheel(&six).unwrap(), |_| true).unwrap();
        let index: Vec<(String, usize)> =
            serde_json::from_str(house.directory(&six).unwrap().index_json()).unwrap();
        assert_eq!(index.len(), files.len());
        for (i, ((name, size), (file, bytes))) in index.iter().zip(&files).enumerate() {
            assert_eq!((name, *size), (file, bytes.len()));
            let mut dest = vec![0; *size];
            assert!(house.read_member(&six, i, &mut dest));
            assert_eq!(&dest, bytes, "{name}");
            assert!(
                !house.read_member(&six, i, &mut vec![0; size + 1]),
                "{name}"
            );
        }
        assert!(!house.read_member(&six, index.len(), &mut []));
        assert!(!house.read_member("no-such.whl", 0, &mut []));
        assert!(house.directory("no-such.whl").is_none());
    }

    #[test]
    fn a_zip_repacked_with_zstandard_holds_the_same_files() {
        let (house, six) = six();
        let zip = house.wheel(&six).unwrap();
        let repacked = repack_zstd(zip, 3).unwrap();
        let entries = wheelcheck::zip_directory(&repacked).unwrap();
        let originals = wheelcheck::zip_entries(zip, |_| true).unwrap();
        assert_eq!(entries.len(), originals.len());
        for (entry, (name, bytes)) in entries.iter().zip(&originals) {
            assert_eq!((&entry.name, entry.method()), (name, ZSTD));
            let mut dest = vec![0; entry.size];
            read_entry(entry, &repacked, &mut dest).unwrap();
            assert_eq!(&dest, bytes, "{name}");
        }
        // Repacking reads its own format too; a buffer of another size is refused, not filled.
        assert_eq!(repack_zstd(&repacked, 3).unwrap(), repacked);
        let mut dest = vec![0; entries[0].size + 1];
        assert!(read_entry(&entries[0], &repacked, &mut dest).is_err());
    }

    #[test]
    fn only_relative_paths_inside_the_folder_are_installable() {
        for ok in ["six.py", "a/b/c.py", "x.dist-info/RECORD", "a..b/c"] {
            assert!(installable(ok), "{ok}");
        }
        for bad in [
            "/etc/passwd",
            "../x.py",
            "a/../../x",
            "a//b",
            "a/./b",
            "a\\b",
            "",
        ] {
            assert!(!installable(bad), "{bad}");
        }
    }
}
