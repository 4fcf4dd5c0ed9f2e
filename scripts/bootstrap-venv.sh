#!/usr/bin/env bash
# Creates (once) the virtualenv for this project's pinned Python dependencies, in the cache
# outside the repository, keyed by a hash of its pinned dependencies; prints its path on stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${LPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-path-storage}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
# Keyed by the pinned dependencies only, so editing tool settings in pyproject.toml keeps the venv.
key=$("$python" - "$here/pyproject.toml" <<'PY'
import hashlib, json, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
pins = [project["dependencies"], project.get("optional-dependencies", {}), sys.version]
print(hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16])
PY
)
venv="$CACHE/venv-$key"
mkdir -p "$CACHE"
# One builder at a time: a second make (demo beside test) waits rather than removing the first's
# half-made venv.
exec 9>"$CACHE/venv-$key.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  echo "bootstrap: creating Python virtualenv $venv (pinned dependencies from pyproject.toml)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip==25.3 >&2
  "$venv/bin/pip" install --progress-bar on -e "$here[deploy,dev]" >&2
  touch "$venv/.complete"
else
  # The editable install points at one checkout; re-point it when run from another clone.
  if ! "$venv/bin/python" -c "import provisioner, sys; sys.exit(0 if provisioner.__file__.startswith('$here/') else 1)" 2>/dev/null; then
    "$venv/bin/pip" install --quiet --no-deps -e "$here" >&2
  fi
fi
echo "$venv"
