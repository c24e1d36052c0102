#!/usr/bin/env bash
# The `kvtier` package as its users install it, offline, by the commands docs/CLIENT.md shows
# ("Installing the Python package"): its examples pip_install.sh, pip_install_system.sh and
# pip_install_other.sh are extracted (tests/install/extract_examples.py) and run exactly as
# written, in a copy of the source tree (client/python and proto/, with build/lib/libkvtier.so
# a link to LIBKVTIER; the copy keeps pip's in-tree build out of the checkout):
#   1. pip_install.sh: a venv of Debian's Python, build isolation with setuptools and wheel from
#      /usr/share/python-wheels (python3-setuptools-whl, python3-wheel-whl);
#   2. pip_install_system.sh: a venv with Debian's site packages, --no-build-isolation;
#   3. pip_install_other.sh, once for each OTHER_PYTHON given (e.g. pyenv's CPython 3.9 and 3.13;
#      Debian's setuptools builds only under Debian's Python): a wheel built with the venv of 2,
#      installed into a venv of that interpreter ($PYTHON in the example).
# After each, test_installed_package.py imports the package from that venv only (no PYTHONPATH,
# no $KVTIER_LIBRARY) and makes a shared-memory round trip through a real KVTIERD.
# Usage: pip_install_test.sh PYTHON PACKAGE_DIR LIBKVTIER KVTIERD [OTHER_PYTHON...]
# (PYTHON runs the helpers; the examples name /usr/bin/python3 themselves.)
set -euo pipefail
python=$1
package=$(cd "$2" && pwd)
library=$3
kvtierd=$4
shift 4
others=("$@")
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$(dirname "$package")")
wheels=/usr/share/python-wheels
tmp=$(mktemp -d /tmp/kvtier-pip-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

for w in setuptools wheel; do
  if ! ls "$wheels"/$w-*.whl >/dev/null 2>&1; then
    echo "no $w wheel in $wheels: install python3-$w-whl (scripts/install-deps.sh)" >&2
    exit 1
  fi
done

"$python" "$src/tests/install/extract_examples.py" --out "$tmp/examples" "$src/docs/CLIENT.md"
for e in pip_install.sh pip_install_system.sh pip_install_other.sh; do
  test -f "$tmp/examples/$e" || { echo "docs/CLIENT.md has no example $e" >&2; exit 1; }
done

tree=$tmp/tree
mkdir -p "$tree/client" "$tree/build/lib"
cp -r "$package" "$tree/client/python"
cp -r "$src/proto" "$tree/proto"
ln -s "$(realpath "$library")" "$tree/build/lib/libkvtier.so"

clean() { rm -rf "$tree/client/python/build" "$tree/client/python"/*.egg-info "$tree/dist"; }

run_example() {
  echo "== docs/CLIENT.md: $1"
  sed 's/^/   /' "$tmp/examples/$1"
  clean
  (cd "$tree" && env -u KVTIER_LIBRARY bash -euo pipefail "$tmp/examples/$1")
}

run_round_trip() {
  env -u PYTHONPATH -u KVTIER_LIBRARY "$1/bin/python" "$here/test_installed_package.py" \
    --kvtierd "$kvtierd" --venv "$1"
}

run_example pip_install.sh
run_round_trip "$tree/.venv"
run_example pip_install_system.sh
run_round_trip "$tree/.venv-system"
for other in "${others[@]}"; do
  rm -rf "$tree/.venv-other"
  PYTHON=$other run_example pip_install_other.sh
  wheel=$(ls "$tree"/dist/kvtier-*.whl)
  case $wheel in
    *-py3-none-linux_*.whl) ;;
    *) echo "the wheel $wheel is not tagged py3-none-linux_<arch>" >&2; exit 1 ;;
  esac
  run_round_trip "$tree/.venv-other"
done
echo "pip install test passed"
