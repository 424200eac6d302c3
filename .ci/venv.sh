#!/usr/bin/env bash
# Build (or reuse) a CPU test venv with the real aphrodite-engine VERSION.
# Usage: .ci/venv.sh VERSION   -> prints the venv path on stdout (logs on stderr).
# The venv lives outside the clone, keyed by a hash of its requirement file, and is rebuilt
# only when its import check fails. aphrodite itself goes in with --no-deps: its full
# dependency set drags in CUDA builds.
set -euo pipefail
ver=$1
here=$(cd "$(dirname "$0")" && pwd)
req="$here/requirements/requirements-cpu-aphrodite-$ver.txt"
[ -f "$req" ] || { echo "no requirement file for aphrodite $ver: $req" >&2; exit 2; }
key=$( (cat "$req"; echo "aphrodite-engine==$ver") | sha256sum | cut -c1-12)
root=${INT2KV_VENV_ROOT:-$HOME/.cache/aphrodite-int2kv/venvs}
venv="$root/aphrodite-$ver-$key"
check() { "$venv/bin/python" -c "import aphrodite, torch, triton, pytest; assert aphrodite.__version__ == '$ver', aphrodite.__version__" >/dev/null 2>&1; }
if ! check; then
  echo "[venv] building $venv" >&2
  rm -rf "$venv"; mkdir -p "$root"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip setuptools wheel >&2
  # torch pin stays in the same resolve as everything else, or a CUDA build sneaks in.
  "$venv/bin/pip" install -q -r "$req" >&2 || true   # pip prints resolver ERRORs about CUDA deps
  "$venv/bin/pip" install -q --no-deps "aphrodite-engine==$ver" >&2
  check || { echo "[venv] import check failed for $venv" >&2; "$venv/bin/python" -c "import aphrodite, torch, triton" >&2; exit 1; }
fi
echo "$venv"
