#!/usr/bin/env bash
# The `kvtier` package as its users install it, offline: a fresh virtual environment of PYTHON (no
# system site packages), then `pip install` of a copy of the source tree's client/python (with
# proto/ beside it, as in the tree) in the two offline ways docs/CLIENT.md gives:
#   1. build isolation, setuptools and wheel from Debian's /usr/share/python-wheels
#      (python3-setuptools-whl, python3-wheel-whl);
#   2. --no-build-isolation in an environment that has setuptools and wheel.
# Each time the package bundles LIBKVTIER, and test_installed_package.py then imports it (from the
# venv only: no PYTHONPATH, no $KVTIER_LIBRARY) and makes a shared-memory round trip through a
# real KVTIERD. The copy keeps pip's in-tree build (build/, *.egg-info) out of the checkout.
# Usage: pip_install_test.sh PYTHON PACKAGE_DIR LIBKVTIER KVTIERD
set -euo pipefail
python=$1
package=$(cd "$2" && pwd)
library=$3
kvtierd=$4
here=$(cd "$(dirname "$0")" && pwd)
wheels=/usr/share/python-wheels
tmp=$(mktemp -d /tmp/kvtier-pip-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

for w in setuptools wheel; do
  if ! ls "$wheels"/$w-*.whl >/dev/null 2>&1; then
    echo "no $w wheel in $wheels: install python3-$w-whl (scripts/install-deps.sh)" >&2
    exit 1
  fi
done

mkdir -p "$tmp/tree/client"
cp -r "$package" "$tmp/tree/client/python"
cp -r "$(dirname "$(dirname "$package")")/proto" "$tmp/tree/proto"
rm -rf "$tmp/tree/client/python/build" "$tmp/tree/client/python"/*.egg-info

run_round_trip() {
  local venv=$1
  env -u PYTHONPATH -u KVTIER_LIBRARY "$venv/bin/python" "$here/test_installed_package.py" \
    --kvtierd "$kvtierd" --venv "$venv"
}

echo "== 1. $python -m venv; pip install --no-index --find-links $wheels ./client/python"
"$python" -m venv "$tmp/isolated"
KVTIER_LIBRARY=$library "$tmp/isolated/bin/python" -m pip install --no-cache-dir --no-index \
  --find-links "$wheels" --quiet "$tmp/tree/client/python"
run_round_trip "$tmp/isolated"

echo "== 2. $python -m venv; pip install wheel; pip install --no-build-isolation ./client/python"
rm -rf "$tmp/tree/client/python/build" "$tmp/tree/client/python"/*.egg-info
"$python" -m venv "$tmp/no-isolation"
"$tmp/no-isolation/bin/python" -m pip install --no-cache-dir --no-index --find-links "$wheels" \
  --quiet setuptools wheel
KVTIER_LIBRARY=$library "$tmp/no-isolation/bin/python" -m pip install --no-cache-dir --no-index \
  --no-build-isolation --quiet "$tmp/tree/client/python"
run_round_trip "$tmp/no-isolation"
echo "pip install test passed"
