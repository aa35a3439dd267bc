//! wheelcheck — reading and checking wheels, shared by build.rs (the wheelhouse: every wheel
//! pinned with its hash) and the engine (a user's `--wheels` directory). Only std, sha2,
//! miniz_oxide and wasmparser: build.rs includes this file as it is.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

pub const REQUIREMENTS_FILE: &str = "requirements.txt";
pub const LOCK_FILE: &str = "wheelhouse-lock.json";
/// The platform tag of Pyodide 314.0.8's binary wheels (PEP 783).
pub const PLATFORM_TAG: &str = "pyemscripten_2026_0_wasm32";

/// One wheel that passed the checks.
pub struct CheckedWheel {
    pub file: String,
    pub path: PathBuf,
    pub sha256: String,
    /// sha256 of each wasm module (`*.so`) inside it.
    pub wasm_sha256: Vec<String>,
}

/// PEP 503's normal form, which wheel file names also reduce to.
pub fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// `name==version` and its `--hash=sha256:` from a requirements file (continuation lines joined).
pub fn pinned(requirements: &Path) -> Result<BTreeMap<String, (String, String)>, String> {
    let shown = requirements.display();
    let text = fs::read_to_string(requirements).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let joined = text.replace("\\\n", " ");
    let mut pins = BTreeMap::new();
    for line in joined.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let pin = words.next().unwrap_or_default();
        let (name, version) = pin
            .split_once("==")
            .ok_or_else(|| format!("{shown}: {pin:?} is not pinned with =="))?;
        let hashes: Vec<&str> = words
            .filter_map(|w| w.strip_prefix("--hash=sha256:"))
            .collect();
        let [hash] = hashes[..] else {
            return Err(format!("{shown}: {name} needs exactly one --hash=sha256:"));
        };
        pins.insert(
            normalize(name),
            (version.to_owned(), hash.to_ascii_lowercase()),
        );
    }
    Ok(pins)
}

/// Checks a wheelhouse directory: every wheel `requirements.txt` pins is there with the sha256
/// it pins, there is no other, and the lock names each with the same hash.
pub fn check_wheelhouse(dir: &Path) -> Result<Vec<CheckedWheel>, String> {
    let mut pins = pinned(&dir.join(REQUIREMENTS_FILE))?;
    let lock_path = dir.join(LOCK_FILE);
    let lock = fs::read_to_string(&lock_path)
        .map_err(|e| format!("cannot read {}: {e}", lock_path.display()))?;
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "whl"))
        .collect();
    files.sort();
    let mut checked = Vec::new();
    for path in files {
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mut parts = file.splitn(3, '-');
        let (name, version) = (
            normalize(parts.next().unwrap_or("")),
            parts.next().unwrap_or(""),
        );
        let Some((want_version, want)) = pins.remove(&name) else {
            return Err(format!("wheelhouse/{file} is not pinned in wheelhouse/requirements.txt: add it (python3 wheelhouse/lock.py --requirements) or remove it"));
        };
        if want_version != version {
            return Err(format!(
                "wheelhouse/{file}: requirements.txt pins {name}=={want_version}"
            ));
        }
        let bytes = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let got = sha256_hex(&bytes);
        if got != want {
            return Err(format!("wheelhouse/{file} has sha256 {got}, but requirements.txt pins {want}: the wheel was changed or damaged; run wheelhouse/fetch.sh"));
        }
        if !lock.contains(&format!("\"sha256\": \"{got}\""))
            || !lock.contains(&format!("\"file_name\": \"{file}\""))
        {
            return Err(format!("wheelhouse/{file} is not in wheelhouse/{LOCK_FILE} with this sha256: run python3 wheelhouse/lock.py"));
        }
        let modules = zip_entries(&bytes, |name| name.ends_with(".so"))
            .map_err(|e| format!("wheelhouse/{file}: {e}"))?;
        for (name, module) in &modules {
            check_growth(module).map_err(|e| format!("wheelhouse/{file}: {name}: {e}"))?;
        }
        let wasm_sha256 = modules
            .iter()
            .map(|(_, module)| sha256_hex(module))
            .collect();
        checked.push(CheckedWheel {
            file,
            path,
            sha256: got,
            wasm_sha256,
        });
    }
    if let Some((name, (version, _))) = pins.into_iter().next() {
        return Err(format!("wheelhouse/requirements.txt pins {name}=={version}, whose wheel is not in wheelhouse/: run wheelhouse/fetch.sh"));
    }
    Ok(checked)
}

/// Why a wheel's file name does not fit Pyodide 314.0.8 (CPython 3.14, emscripten ABI 2026_0),
/// naming the tags expected; None when it fits.
pub fn tag_mismatch(file: &str) -> Option<String> {
    let stem = file.strip_suffix(".whl")?;
    let parts: Vec<&str> = stem.split('-').collect();
    if parts.len() < 5 {
        return Some(format!("{file} is not a wheel file name"));
    }
    let (python, abi, platform) = (
        parts[parts.len() - 3],
        parts[parts.len() - 2],
        parts[parts.len() - 1],
    );
    let pythons: Vec<&str> = python.split('.').collect();
    let pure = platform == "any"
        && abi == "none"
        && pythons
            .iter()
            .any(|p| matches!(*p, "py3" | "py314" | "cp314"));
    let wasm = platform.split('.').any(|p| p == PLATFORM_TAG)
        && ((abi == "cp314" && pythons.contains(&"cp314"))
            || (abi == "abi3" && pythons.iter().any(|p| p.starts_with("cp3")))
            || (abi == "none" && pythons.contains(&"py3")));
    if pure || wasm {
        None
    } else {
        Some(format!("{file} is tagged {python}-{abi}-{platform}, which Pyodide 314.0.8 cannot load: a wheel must be py3-none-any or cp314-cp314-{PLATFORM_TAG} (or abi3)"))
    }
}

/// One entry of a zip's central directory: its name, its size unpacked, and where its data is.
pub struct ZipEntry {
    pub name: String,
    pub size: usize,
    method: u16,
    /// Where its local header is, and its data's size there (compressed).
    local: usize,
    packed: usize,
}

fn u16_at(zip: &[u8], at: usize) -> Result<usize, String> {
    zip.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
        .ok_or_else(|| "not a zip file".to_owned())
}

fn u32_at(zip: &[u8], at: usize) -> Result<usize, String> {
    zip.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| "not a zip file".to_owned())
}

/// The entries of a zip, in its central directory's order. Only the directory is read (the end of
/// the zip): a process that lists every wheel touches none of their files' pages.
pub fn zip_directory(zip: &[u8]) -> Result<Vec<ZipEntry>, String> {
    let bad = || "not a zip file".to_owned();
    let u16_at = |at| u16_at(zip, at);
    let u32_at = |at| u32_at(zip, at);
    let end = (0..zip.len().saturating_sub(21))
        .rev()
        .find(|&i| zip[i..].starts_with(b"PK\x05\x06"))
        .ok_or("not a zip file (no end of central directory)")?;
    let (count, mut at) = (u16_at(end + 10)?, u32_at(end + 16)?);
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        if !zip.get(at..).is_some_and(|z| z.starts_with(b"PK\x01\x02")) {
            return Err("a damaged central directory".into());
        }
        let (method, packed, size) = (u16_at(at + 10)?, u32_at(at + 20)?, u32_at(at + 24)?);
        let (name_len, extra_len, comment_len) =
            (u16_at(at + 28)?, u16_at(at + 30)?, u16_at(at + 32)?);
        let local = u32_at(at + 42)?;
        let name_bytes = zip.get(at + 46..at + 46 + name_len).ok_or_else(bad)?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        at += 46 + name_len + extra_len + comment_len;
        if local.checked_add(packed).is_none_or(|end| end > zip.len()) {
            return Err(format!("{name}: an entry past the end"));
        }
        entries.push(ZipEntry {
            name,
            size,
            method: method as u16,
            local,
            packed,
        });
    }
    Ok(entries)
}

impl ZipEntry {
    /// Its compression method (0 stored, 8 deflate; others are read by whoever knows them).
    pub fn method(&self) -> u16 {
        self.method
    }

    /// Its data as stored in `zip` (compressed), found through its local header.
    pub fn packed<'z>(&self, zip: &'z [u8]) -> Result<&'z [u8], String> {
        let local = self.local;
        let data_at = local + 30 + u16_at(zip, local + 26)? + u16_at(zip, local + 28)?;
        data_at
            .checked_add(self.packed)
            .and_then(|end| zip.get(data_at..end))
            .ok_or_else(|| format!("{}: an entry past the end", self.name))
    }

    /// Unpacks the entry (of `zip`, the directory's own) into `dest`, which must be `size` long.
    pub fn read_into(&self, zip: &[u8], dest: &mut [u8]) -> Result<(), String> {
        let data = self.packed(zip)?;
        let damaged = || format!("{} is damaged", self.name);
        if dest.len() != self.size {
            return Err(damaged());
        }
        match self.method {
            0 if data.len() == dest.len() => dest.copy_from_slice(data),
            8 => {
                let written = miniz_oxide::inflate::decompress_slice_iter_to_slice(
                    dest,
                    std::iter::once(data),
                    false,
                    true,
                )
                .map_err(|e| format!("{} does not inflate: {e:?}", self.name))?;
                if written != dest.len() {
                    return Err(damaged());
                }
            }
            0 => return Err(damaged()),
            method => {
                return Err(format!(
                    "{}: compression method {method} is not supported",
                    self.name
                ))
            }
        }
        Ok(())
    }

    pub fn read(&self, zip: &[u8]) -> Result<Vec<u8>, String> {
        let mut bytes = vec![0; self.size];
        self.read_into(zip, &mut bytes)?;
        Ok(bytes)
    }
}

/// The entries of a zip whose names `want` accepts, unpacked: (name, bytes). A wheel's `.so`
/// entries must be wasm modules.
pub fn zip_entries(
    zip: &[u8],
    want: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut found = Vec::new();
    for entry in zip_directory(zip)? {
        if !want(&entry.name) {
            continue;
        }
        let bytes = entry.read(zip)?;
        if entry.name.ends_with(".so") && !bytes.starts_with(b"\0asm") {
            return Err(format!("{} is not a wasm module", entry.name));
        }
        found.push((entry.name, bytes));
    }
    Ok(found)
}

/// Refuses a wasm module that grows a memory or a table with its own instructions. The sandbox
/// charges growth to the script's memory budget where it goes through JavaScript
/// (`WebAssembly.Memory.prototype.grow`, which Emscripten's `emscripten_resize_heap` calls); a raw
/// `memory.grow` or `table.grow` in a side module would grow the shared memory or a table past
/// that count.
pub fn check_growth(module: &[u8]) -> Result<(), String> {
    use wasmparser::{Operator, Parser, Payload};
    for payload in Parser::new(0).parse_all(module) {
        let payload = payload.map_err(|e| format!("not a readable wasm module: {e}"))?;
        let Payload::CodeSectionEntry(body) = payload else {
            continue;
        };
        let mut operators = body
            .get_operators_reader()
            .map_err(|e| format!("not a readable wasm module: {e}"))?;
        while !operators.eof() {
            let operator = operators
                .read()
                .map_err(|e| format!("not a readable wasm module: {e}"))?;
            if let Operator::MemoryGrow { .. } | Operator::TableGrow { .. } = operator {
                return Err(format!(
                    "its code grows memory itself ({operator:?} at byte {}), which the sandbox's \
                     memory limit would not count: such modules are not loaded",
                    operators.original_position()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_growth;

    /// A module with one memory and one function whose body is `body` (locals count first).
    fn module(body: &[u8]) -> Vec<u8> {
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        m.extend([0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f]); // type: () -> i32
        m.extend([0x03, 0x02, 0x01, 0x00]); // one function of that type
        m.extend([0x05, 0x03, 0x01, 0x00, 0x01]); // one memory, 1 page
        let size = body.len() as u8;
        m.extend([0x0a, size + 2, 0x01, size]);
        m.extend(body);
        m
    }

    #[test]
    fn a_module_that_grows_memory_itself_is_refused() {
        // i32.const 1; memory.grow 0; end
        let e = check_growth(&module(&[0x00, 0x41, 0x01, 0x40, 0x00, 0x0b])).unwrap_err();
        assert!(e.contains("MemoryGrow") && e.contains("not loaded"), "{e}");
        // ref.null func; i32.const 1; table.grow 0; end
        let e = check_growth(&module(&[
            0x00, 0xd0, 0x70, 0x41, 0x01, 0xfc, 0x0f, 0x00, 0x0b,
        ]))
        .unwrap_err();
        assert!(e.contains("TableGrow"), "{e}");
        // memory.size 0; end: reading memory's size is fine.
        check_growth(&module(&[0x00, 0x3f, 0x00, 0x0b])).unwrap();
        assert!(check_growth(b"\0asm\x01\0\0\0\x0a\xff").is_err());
    }
}
