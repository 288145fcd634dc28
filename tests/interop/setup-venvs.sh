#!/usr/bin/env bash
# Creates the two Python venvs the interop tests use (the legacy and the modern MCP SDK cannot
# share one). Idempotent: a venv is rebuilt only when its requirements file changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base="${CARGO_TARGET_DIR:-$root/target}/interop"
mkdir -p "$base"
for which in legacy modern; do
  req="$here/requirements-$which.txt"
  venv="$base/venv-$which"
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [ -f "$venv/.requirements-hash" ] && [ "$(cat "$venv/.requirements-hash")" = "$want" ]; then
    continue
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  echo "$want" > "$venv/.requirements-hash"
done
