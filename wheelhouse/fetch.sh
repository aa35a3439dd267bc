#!/usr/bin/env bash
# Re-downloads this folder's wheels from PyPI, exactly those requirements.txt pins, each checked
# against its --hash (pip's --require-hashes). The wheels are committed, so a build never needs
# this; run it to audit them. To add a package: pip download it (and what it needs) with the
# flags below without --require-hashes into this folder, then `python3 lock.py --requirements`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dest=${1:-$here}
pip download --no-deps --only-binary=:all: --require-hashes \
  --platform pyemscripten_2026_0_wasm32 --platform any \
  --python-version 3.14 --implementation cp --abi cp314 --abi abi3 --abi none \
  -r "$here/requirements.txt" -d "$dest"
