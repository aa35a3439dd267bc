//! Packages: the wheelhouse (wheelhouse/, embedded by crates/sandbox/build.rs) imports with no
//! extra call, offline, in both sandbox kinds; what it lacks fails naming it; micropip installs
//! from it only; its wasm modules, and no others, compile in a ready sandbox; a wheelhouse whose
//! wheel does not match its pinned hash is refused.

use crate::sandbox::REAL_GLOBAL;
use crate::util::{cli, execute, json};
use mcp_code_mode_sandbox::wheelcheck;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn packages_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/packages")
}

fn wheelhouse_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("wheelhouse")
}

/// Each script in tests/packages, run in a fresh thread sandbox, prints what its `.out` holds.
async fn script_prints_what_it_should(name: &str) {
    let dir = packages_dir();
    let code = std::fs::read_to_string(dir.join(format!("{name}.py"))).unwrap();
    let want = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap();
    let o = execute(&code).await;
    assert_eq!(o.error, None, "{name}: {}", o.stderr);
    assert_eq!(o.stdout, want, "{name}");
}

#[tokio::test]
async fn models_dates_and_tables() {
    script_prints_what_it_should("models_dates_tables").await;
}

#[tokio::test]
async fn html_text_and_graphs() {
    script_prints_what_it_should("html_text_graphs").await;
}

#[tokio::test]
async fn math_office_files_and_pdf() {
    script_prints_what_it_should("math_office_pdf").await;
}

#[tokio::test]
async fn binary_formats_sql_and_micropip() {
    script_prints_what_it_should("binary_formats_sql_micropip").await;
}

/// Every package in the lock is imported by one of the scripts above: a wheel added to the
/// wheelhouse needs a line that imports it and does something with it.
#[test]
fn every_wheelhouse_package_is_exercised() {
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(wheelhouse_dir().join(wheelcheck::LOCK_FILE)).unwrap(),
    )
    .unwrap();
    let mut scripts = String::new();
    for entry in std::fs::read_dir(packages_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py") {
            scripts += &std::fs::read_to_string(path).unwrap();
        }
    }
    let imported = |module: &str| {
        scripts.lines().any(|line| {
            let line = line.trim_start();
            let names = line
                .strip_prefix("import ")
                .or_else(|| line.strip_prefix("from "))
                .unwrap_or("");
            names
                .split([',', ' '])
                .any(|n| n.trim() == module || n.trim().starts_with(&format!("{module}.")))
        })
    };
    let packages = lock["packages"].as_object().unwrap();
    assert!(packages.len() >= 40, "{} packages", packages.len());
    for (name, entry) in packages {
        let imports: Vec<&str> = entry["imports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            imports.iter().any(|m| imported(m)),
            "no script in tests/packages imports {name} ({imports:?})"
        );
    }
}

/// The forked sandbox (the default) loads the same wheels, wasm modules included, and prints
/// the same bytes as a thread sandbox.
#[test]
fn a_forked_sandbox_imports_wheelhouse_packages_too() {
    let code = "import pydantic, msgpack, tabulate\nclass M(pydantic.BaseModel):\n    n: int\nprint(M(n='7').n * 6, msgpack.unpackb(msgpack.packb([1, 'a'])))\nprint(tabulate.tabulate([[1]], tablefmt='plain'))";
    let run = |kind: &str| {
        let out = cli(&["run", "--json", "--sandbox", kind, "-"], code);
        let v = json(&out);
        assert_eq!(v["error"], Value::Null, "{kind}: {v}");
        v["stdout"].as_str().unwrap().to_owned()
    };
    let fork = run("fork");
    assert_eq!(fork, "42 [1, 'a']\n1\n");
    assert_eq!(fork, run("thread"));
}

/// A wheel is installed without unpacking it: each file's bytes are read from the host when the
/// file is first opened (js/runner.js). Everything a package or a script does with its files
/// must behave as if the wheel had been unpacked: every file's bytes match the hash its RECORD
/// gives, sizes show before a read, modules are listed, the bytecode is there, and writing,
/// appending, truncating, renaming, copying and installing over files unread all see the bytes.
#[test]
fn an_installed_wheel_behaves_as_an_unpacked_one() {
    let code = r##"
import base64, codemode, csv, hashlib, importlib.metadata, importlib.util, os, pkgutil, shutil
site = codemode._site_packages()
codemode._WHEELHOUSE.install("pydantic")
codemode._WHEELHOUSE.install("markdown")
md = os.path.join(site, "markdown")
# Listed and sized before a byte is read, folders too; a folder not yet looked into is not empty.
modules = sorted(m.name for m in pkgutil.iter_modules([md]))
assert "core" in modules and "util" in modules and "extensions" in modules, modules
try:
    os.rmdir(os.path.join(md, "extensions"))
    raise AssertionError("removed a folder with files in it")
except OSError as e:
    assert e.errno == 55, e  # ENOTEMPTY (Emscripten's number)
assert "toc.py" in os.listdir(os.path.join(md, "extensions"))
assert os.path.isfile(os.path.join(site, "pydantic", "v1", "main.py"))
# A reference copy of markdown's files, read in full.
entry = codemode._WHEELHOUSE.packages()["markdown"]
assert codemode._host().install_wheel(entry["file_name"], "/tmp/ref")
def ref(name):
    with open(os.path.join("/tmp/ref/markdown", name), "rb") as f:
        return f.read()
assert os.path.getsize(os.path.join(md, "core.py")) == len(ref("core.py")) > 20000
def path(name):
    return os.path.join(md, name)
def read(p):
    with open(p, "rb") as f:
        return f.read()
# Read in parts, at an offset, whole and again: the same bytes (a first whole read is unpacked
# straight into the reader's buffer, a later one from a copy kept).
with open(path("inlinepatterns.py"), "rb") as f:
    head = f.read(100)
    assert head + f.read() == ref("inlinepatterns.py") and len(head) == 100
fd = os.open(path("test_tools.py"), os.O_RDONLY)
assert os.pread(fd, 50, 10) == ref("test_tools.py")[10:60]
os.close(fd)
assert read(path("__meta__.py")) == read(path("__meta__.py")) == read(path("__meta__.py")) == ref("__meta__.py")
with open(path("blockprocessors.py"), "rb") as f:
    assert f.read() == ref("blockprocessors.py") and f.read() == b""
    f.seek(5)
    assert f.read(20) == ref("blockprocessors.py")[5:25]
# Every file of every installed distribution matches its RECORD.
checked = 0
for dist in importlib.metadata.distributions(path=[site]):
    for row in csv.reader(dist.read_text("RECORD").splitlines()):
        recorded, digest, size = row
        if not digest:
            continue
        with open(os.path.join(site, recorded), "rb") as f:
            data = f.read()
        want = base64.urlsafe_b64decode(digest.split("=", 1)[1] + "==")
        assert hashlib.sha256(data).digest() == want and len(data) == int(size), recorded
        checked += 1
# The bytecode build.rs compiled sits beside the sources, and the import uses it.
import markdown.core
assert markdown.core.__cached__ == importlib.util.cache_from_source(markdown.core.__file__)
with open(markdown.core.__cached__, "rb") as f:
    assert f.read(8)[4:8] == b"\x01\x00\x00\x00"  # a hash-based pyc whose source is not checked (PEP 552)
# Writing to files no one has read yet.
with open(path("util.py"), "w") as f:
    f.write("x = 1\n")
with open(path("serializers.py"), "a") as f:
    f.write("# end\n")
os.truncate(path("blockparser.py"), 10)
with open(path("htmlparser.py"), "r+b") as f:
    f.write(b"abc")
os.rename(path("postprocessors.py"), "/tmp/moved.py")
shutil.copy(path("preprocessors.py"), "/tmp/copied.py")
os.unlink(path("treeprocessors.py"))
assert read(path("util.py")) == b"x = 1\n"
assert read(path("serializers.py")) == ref("serializers.py") + b"# end\n"
assert read(path("blockparser.py")) == ref("blockparser.py")[:10]
assert read(path("htmlparser.py")) == b"abc" + ref("htmlparser.py")[3:]
assert read("/tmp/moved.py") == ref("postprocessors.py") and not os.path.exists(path("postprocessors.py"))
assert read("/tmp/copied.py") == ref("preprocessors.py")
assert not os.path.exists(path("treeprocessors.py"))
# Installing again over them puts every file back, as unzipping over them would.
assert codemode._host().install_wheel(entry["file_name"], site)
for name in ("util.py", "serializers.py", "blockparser.py", "htmlparser.py", "treeprocessors.py"):
    assert read(path(name)) == ref(name), name
assert not codemode._host().install_wheel("no-such-1.0-py3-none-any.whl", site)
names = sorted(d.metadata["Name"].lower().replace("_", "-") for d in importlib.metadata.distributions(path=[site]))
assert names == ["annotated-types", "markdown", "pydantic", "pydantic-core", "typing-extensions", "typing-inspection"], names
print(checked > 150, importlib.metadata.version("markdown") == entry["version"])
"##;
    // Through `run`, which hands its sandboxes the bytecode build.rs compiled.
    for kind in ["fork", "thread"] {
        let v = json(&cli(&["run", "--json", "--sandbox", kind, "-"], code));
        assert_eq!(v["error"], Value::Null, "{kind}: {v}");
        assert_eq!(v["stdout"], "True True\n", "{kind}");
    }
}

#[tokio::test]
async fn a_module_the_wheelhouse_lacks_fails_naming_it() {
    let o = execute("import numpy").await;
    let e = o.error.expect("an error");
    assert_eq!(e.kind, "ModuleNotFoundError");
    assert!(
        e.message.contains("No module named 'numpy'")
            && e.message.contains("wheelhouse")
            && e.message.contains("--wheels DIR"),
        "{}",
        e.message
    );
    // A script that handles the error itself sees an ordinary ModuleNotFoundError, and probing
    // for an optional module finds nothing, as everywhere.
    let o = execute("import importlib.util\ntry:\n    import not_a_package\nexcept ImportError as e:\n    print(type(e).__name__, e.name)\nimportlib.util.find_spec('numpy') is None").await;
    assert_eq!(o.error, None);
    assert_eq!(o.stdout, "ModuleNotFoundError not_a_package\n");
    assert_eq!(o.result, serde_json::json!(true));
}

#[tokio::test]
async fn micropip_installs_from_the_wheelhouse_only_and_says_why_not() {
    let o = execute(
        "import micropip\nawait micropip.install(['tabulate', 'humanize>=4'])\nimport tabulate, humanize\n\
         out = []\nfor req in ['numpy', 'pydantic<1', 'not a requirement!']:\n    try:\n        await micropip.install(req)\n        out.append('installed?')\n    except ValueError as e:\n        out.append(str(e))\nout",
    )
    .await;
    assert_eq!(o.error, None, "{}", o.stderr);
    let out: Vec<String> = serde_json::from_value(o.result).unwrap();
    assert!(
        out[0].contains("numpy is not in the wheelhouse") && out[0].contains("--wheels DIR"),
        "{out:?}"
    );
    assert!(out[1].contains("the wheelhouse has pydantic 2."), "{out:?}");
    assert!(
        out[2].starts_with("micropip.install('not a requirement!')"),
        "{out:?}"
    );
}

/// A ready sandbox compiles the wasm modules of the wheelhouse's packages (byte for byte) and
/// nothing else: not a module of the script's own, not a wheel's module with one byte changed.
#[tokio::test]
async fn only_the_wheelhouse_wasm_modules_compile() {
    let code = format!(
        "{REAL_GLOBAL}\nimport msgpack, glob\nfrom pyodide.ffi import to_js\n\
         so = open(glob.glob('/lib/python3.14/site-packages/msgpack/*.so')[0], 'rb').read()\n\
         out = [type(g.WebAssembly.Module.new(to_js(so))).__name__]\n\
         for bytes_ in [so[:-1] + bytes([so[-1] ^ 1]), bytes([0, 97, 115, 109, 1, 0, 0, 0])]:\n    \
         try:\n        g.WebAssembly.Module.new(to_js(bytes_))\n        out.append('compiled')\n    \
         except Exception as e:\n        out.append('refused' if 'disallowed by embedder' in str(e) else str(e))\nout"
    );
    let o = execute(&code).await;
    assert_eq!(o.error, None, "{}", o.stderr);
    assert_eq!(
        o.result,
        serde_json::json!(["JsProxy", "refused", "refused"])
    );
}

/// Compiling a wheelhouse module again hands back the one compiled already: a script that asks
/// for it hundreds of times and keeps every answer holds one module's memory, not hundreds the
/// memory budget would not see (a module's code and bytes live outside V8's heap).
#[tokio::test]
async fn a_wheelhouse_module_compiled_again_is_the_same_module() {
    let code = format!(
        "{REAL_GLOBAL}\nimport msgpack, glob\nfrom pyodide.ffi import to_js\n\
         so = to_js(open(glob.glob('/lib/python3.14/site-packages/msgpack/*.so')[0], 'rb').read())\n\
         kept = [g.WebAssembly.Module.new(so) for _ in range(300)]\n\
         same = getattr(g.Object, 'is')\n\
         [all(same(kept[0], m) for m in kept), len(kept)]"
    );
    let o = execute(&code).await;
    assert_eq!(o.error, None, "{}", o.stderr);
    assert_eq!(o.result, serde_json::json!([true, 300]));
}

/// A copy of the wheelhouse for a check to fail on.
fn wheelhouse_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(wheelhouse_dir()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    dir
}

#[test]
fn the_wheelhouse_checks_pass_and_a_tampered_wheel_is_refused() {
    let checked = wheelcheck::check_wheelhouse(&wheelhouse_dir()).expect("the wheelhouse passes");
    assert!(checked.iter().any(|w| !w.wasm_sha256.is_empty()));
    let copy = wheelhouse_copy();
    let dir = copy.path();
    let wheel = dir.join("tabulate-0.10.0-py3-none-any.whl");
    let mut bytes = std::fs::read(&wheel).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&wheel, &bytes).unwrap();
    let err = wheelcheck::check_wheelhouse(dir)
        .err()
        .expect("a tampered wheel is refused");
    assert!(
        err.contains("tabulate-0.10.0-py3-none-any.whl has sha256")
            && err.contains("requirements.txt pins"),
        "{err}"
    );
    std::fs::remove_file(&wheel).unwrap();
    let err = wheelcheck::check_wheelhouse(dir)
        .err()
        .expect("a missing wheel is refused");
    assert!(
        err.contains("pins tabulate==0.10.0, whose wheel is not in"),
        "{err}"
    );
    std::fs::write(dir.join("extra-1.0-py3-none-any.whl"), b"PK").unwrap();
    let err = wheelcheck::check_wheelhouse(dir)
        .err()
        .expect("an unpinned wheel is refused");
    assert!(
        err.contains("extra-1.0-py3-none-any.whl is not pinned"),
        "{err}"
    );
}

/// A user's wheel directory: a pure wheel of one's own (needing a wheelhouse package) imports in
/// both sandbox kinds, also preloaded; a wheel for another ABI, or one posing as Pyodide's own
/// build with other bytes, stops start-up naming what was expected.
#[test]
fn a_users_wheels_load_and_wrong_ones_are_refused_at_start_up() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    std::fs::create_dir(&good).unwrap();
    let wheel = |path: &Path| {
        let file = std::fs::File::create(path).unwrap();
        let mut zip = zip_writer(file);
        zip("hello_pkg/__init__.py", "import tabulate\ndef table(rows):\n    return tabulate.tabulate(rows, tablefmt='plain')\n");
        // Markers are evaluated for the sandbox: six is needed there, numpy (an extra) and pywin32
        // (Windows) are not, and are not in the wheelhouse, so start-up would refuse them.
        zip("hello_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: hello-pkg\nVersion: 1.0\nRequires-Dist: tabulate\nRequires-Dist: numpy; extra == 'np'\nRequires-Dist: six>=1.0; python_version >= \"3.8\" and platform_system == \"Emscripten\"\nRequires-Dist: pywin32 (>=300); sys_platform == \"win32\"\n\n");
        zip("", "");
    };
    wheel(&good.join("hello_pkg-1.0-py3-none-any.whl"));
    let good_dir = good.to_str().unwrap();
    for kind in ["fork", "thread"] {
        let out = cli(
            &[
                "run",
                "--json",
                "--sandbox",
                kind,
                "--wheels",
                good_dir,
                "-",
            ],
            "import codemode, hello_pkg\nprint(hello_pkg.table([[1, 2]]))\nprint(sorted(codemode._WHEELHOUSE.installed))",
        );
        assert_eq!(
            json(&out)["stdout"],
            "1  2\n['hello-pkg', 'six', 'tabulate']\n",
            "{kind}: {}",
            json(&out)
        );
        let out = cli(
            &[
                "run",
                "--json",
                "--sandbox",
                kind,
                "--wheels",
                good_dir,
                "--preload",
                "hello-pkg",
                "-",
            ],
            "import sys\nprint(sorted(m for m in ('hello_pkg', 'tabulate') if m in sys.modules))",
        );
        assert_eq!(
            json(&out)["stdout"],
            "['hello_pkg', 'tabulate']\n",
            "{kind}: {}",
            json(&out)
        );
    }
    // The same through the config file's "packages" (a directory relative to the file).
    let config = dir.path().join("config.json");
    std::fs::File::create(&config)
        .unwrap()
        .write_all(br#"{"servers": {}, "packages": {"wheels": "good", "preload": ["hello-pkg"]}}"#)
        .unwrap();
    let out = cli(
        &["run", "--json", "--config", config.to_str().unwrap(), "-"],
        "import sys\nprint('hello_pkg' in sys.modules)",
    );
    assert_eq!(json(&out)["stdout"], "True\n", "{}", json(&out));

    let refused = |name: &str, want: &[&str]| {
        let bad = dir.path().join(format!("bad-{name}"));
        std::fs::create_dir(&bad).unwrap();
        wheel(&bad.join(name));
        let out = cli(&["run", "--wheels", bad.to_str().unwrap(), "-"], "1");
        let stderr = crate::util::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        for w in want {
            assert!(stderr.contains(w), "{name}: {stderr}");
        }
    };
    refused(
        "hello_pkg-1.0-cp311-cp311-manylinux_2_17_x86_64.whl",
        &[
            "is tagged cp311-cp311-manylinux_2_17_x86_64",
            "cp314-cp314-pyemscripten_2026_0_wasm32",
        ],
    );
    refused(
        "numpy-2.4.6-cp314-cp314-pyemscripten_2026_0_wasm32.whl",
        &["pyodide-lock.json pins a292c1f5", "not Pyodide's own build"],
    );
    let out = cli(
        &["run", "--wheels", good_dir, "--preload", "nonesuch", "-"],
        "1",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(crate::util::text(&out.stderr).contains("preload: no package \"nonesuch\""));
    // Refused at start-up (exit 2), naming the wheel and what is wrong with it: a marker that
    // cannot be read, and a file that would land outside site-packages.
    let refused_wheel = |file: &str, entries: &[(&str, &str)], want: &str| {
        let bad = dir.path().join(file);
        std::fs::create_dir(&bad).unwrap();
        let mut zip = zip_writer(std::fs::File::create(bad.join(file)).unwrap());
        for (name, text) in entries {
            zip(name, text);
        }
        zip("", "");
        let out = cli(&["run", "--wheels", bad.to_str().unwrap(), "-"], "1");
        let stderr = crate::util::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("{file}: {want}")), "{stderr}");
    };
    refused_wheel(
        "odd-1.0-py3-none-any.whl",
        &[
            ("odd/__init__.py", ""),
            ("odd-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: odd\nVersion: 1.0\nRequires-Dist: six; python_versoin >= '3'\n\n"),
        ],
        "METADATA's `Requires-Dist: six; python_versoin >= '3'`: the marker cannot be read: no marker variable \"python_versoin\"",
    );
    refused_wheel(
        "evil-1.0-py3-none-any.whl",
        &[
            ("evil/__init__.py", ""),
            (
                "evil-1.0.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n\n",
            ),
            ("../../../tmp/evil.py", "print('escaped')\n"),
        ],
        "the entry \"../../../tmp/evil.py\" would be installed outside site-packages",
    );
}

/// A zip writer for the test's wheels (stored entries); an empty name finishes the file.
fn zip_writer(file: std::fs::File) -> impl FnMut(&str, &str) {
    use std::io::Write;
    let mut zip = Some(zip::ZipWriter::new(file));
    move |name: &str, text: &str| {
        let Some(writer) = zip.as_mut() else { return };
        if name.is_empty() {
            zip.take().unwrap().finish().unwrap();
            return;
        }
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        writer.start_file(name, stored).unwrap();
        writer.write_all(text.as_bytes()).unwrap();
    }
}

/// `serve` and `run` install the bytecode build.rs compiled with each wheel (the sandbox never
/// writes bytecode itself, so a .pyc there came with the package), tests left out.
#[test]
fn packages_come_with_their_bytecode() {
    let code = "import os, sympy, tabulate\nimport sympy.core.tests\n\
                print([os.path.exists(m.__cached__) for m in (tabulate, sympy, sympy.core.tests)])";
    for kind in ["fork", "thread"] {
        let v = json(&cli(&["run", "--json", "--sandbox", kind, "-"], code));
        assert_eq!(v["stdout"], "[True, True, False]\n", "{kind}: {v}");
    }
}
