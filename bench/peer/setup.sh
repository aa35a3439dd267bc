#!/usr/bin/env bash
# Installs the Deno + Pyodide peer that `cargo xtask bench` compares against: the `deno` binary
# (from npm's `deno` package) and the same Pyodide our binary embeds (pyodide@314.0.8), into a
# cache folder outside the repository. Needs npm and network once; the benchmark itself then
# runs the peer offline (Deno gets no network permission).
#
#   bash bench/peer/setup.sh            # installs into $HOME/.cache/mcp-code-mode/bench-peer
#   MCP_CODE_MODE_BENCH_PEER=/some/dir bash bench/peer/setup.sh
set -euo pipefail

DENO_VERSION=2.9.6
PYODIDE_VERSION=314.0.8
dir="${MCP_CODE_MODE_BENCH_PEER:-$HOME/.cache/mcp-code-mode/bench-peer}"

command -v npm >/dev/null || { echo "setup.sh: npm is needed (install Node.js)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
cat > package.json <<JSON
{
  "name": "mcp-code-mode-bench-peer",
  "private": true,
  "description": "Deno + Pyodide, as the peers run it; installed by bench/peer/setup.sh",
  "dependencies": {
    "deno": "$DENO_VERSION",
    "pyodide": "$PYODIDE_VERSION"
  }
}
JSON
npm install --no-audit --no-fund --loglevel=error

deno="$dir/node_modules/.bin/deno"
"$deno" --version | head -1
test -f node_modules/pyodide/pyodide.asm.wasm || { echo "setup.sh: pyodide is incomplete" >&2; exit 1; }
echo "bench peer ready in $dir"
