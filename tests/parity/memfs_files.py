# Files in the sandbox's own in-memory filesystem: pathlib, shutil, zipfile, tempfile, os.walk.
import io
import os
import pathlib
import shutil
import tempfile
import zipfile

root = pathlib.Path(tempfile.mkdtemp(prefix="work", dir="/tmp"))
(root / "src" / "pkg").mkdir(parents=True)
for name, body in {"src/pkg/__init__.py": "", "src/pkg/core.py": "def f():\n    return 42\n",
                   "README.md": "# Demo\n\nÜnïcode ✓\n", "data.bin": ""}.items():
    (root / name).write_text(body, encoding="utf-8")
(root / "data.bin").write_bytes(bytes(range(256)))
print(sorted(str(p.relative_to(root)) for p in root.rglob("*")))
print([(d.replace(str(root), "<root>"), sorted(f)) for d, _, f in sorted(os.walk(root))])
shutil.copytree(root / "src", root / "backup")
shutil.move(root / "README.md", root / "backup" / "README.md")
print(sorted(os.listdir(root)), (root / "backup" / "README.md").read_text(encoding="utf-8").splitlines())
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
    for p in sorted(root.rglob("*.py")):
        zf.writestr(zipfile.ZipInfo(str(p.relative_to(root)), date_time=(2026, 1, 1, 0, 0, 0)), p.read_bytes())
with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as zf:
    print(zf.namelist(), zf.read("src/pkg/core.py").decode().strip())
print((root / "data.bin").stat().st_size, pathlib.PurePosixPath("/a/b/../c.tar.gz").suffixes)
try:
    open("/etc/hostname").read()
except OSError as e:
    print(type(e).__name__, e.errno)
shutil.rmtree(root)
print(root.exists())
