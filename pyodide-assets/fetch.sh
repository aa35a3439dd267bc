#!/usr/bin/env bash
# Re-creates this folder's five Pyodide boot files from the npm package and checks them against
# SHA256SUMS. The files are committed, so a build never needs this; run it to audit them or after
# changing the pinned version (then update SHA256SUMS and `pyodide_version!` in crates/sandbox/src/assets.rs).
set -euo pipefail
version=314.0.8
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "pyodide@$version" >/dev/null && tar xzf "pyodide-$version.tgz")
for f in pyodide.asm.wasm python_stdlib.zip pyodide.asm.mjs pyodide-lock.json pyodide.mjs; do
  cp "$work/package/$f" "$here/$f"
done
(cd "$here" && sha256sum -c SHA256SUMS)
