#!/usr/bin/env bash
# The installed package as an outside project uses it: `cmake --install` into a scratch prefix,
# kvtierd from that prefix on a scratch socket, then every code example of docs/QUICKSTART.md and
# docs/CLIENT.md (extracted by extract_examples.py) built and run against it: the C++ ones through
# find_package(kvtier) with the documented CMakeLists.txt (no flags of the test's own; among them
# the router, which links libkvtier and stubs of its own generated from the installed .proto files)
# and again through pkg-config, the C ones through pkg-config, the Python ones with the installed
# module. Also checks the installed .proto files, that libkvtier.so exports no generated code, the
# systemd units (ExecStart= in the prefix; systemd-analyze verify where installed), the sysusers
# and tmpfiles files, the example configuration and the documentation in the prefix. Fails on any build error, any example's non-zero exit, a missing
# or wrong installed file, or a daemon that does not stop cleanly on SIGTERM.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/kvtier-install-test.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "== cmake --install $build --prefix $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
prefix=$tmp/prefix
libdir=$(dirname "$(find "$prefix" -name 'libkvtier.so' | head -1)")
test -f "$prefix/include/kvtier/client.h"
test -f "$libdir/cmake/kvtier/kvtierConfig.cmake"
test -f "$libdir/pkgconfig/kvtier.pc"
# The contract for programs with stubs of their own; libkvtier's generated classes stay inside it.
for f in "$src"/proto/kvtier/v1/*.proto; do
  cmp -s "$f" "$prefix/share/kvtier/proto/kvtier/v1/$(basename "$f")" ||
    { echo "not installed: share/kvtier/proto/kvtier/v1/$(basename "$f")"; exit 1; }
done
[ "$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --variable=protodir kvtier)" -ef \
  "$prefix/share/kvtier/proto" ] || { echo "kvtier.pc: protodir is not the installed .proto root"; exit 1; }
if nm -DC --defined-only "$libdir/libkvtier.so" | grep -E 'kvtier::v1::|google::protobuf'; then
  echo "libkvtier.so exports generated protobuf code (client/libkvtier.map)"
  exit 1
fi

echo "== systemd units, example configuration and documentation in the prefix"
for f in lib/systemd/system/kvtierd.service lib/systemd/system/kvtierd.socket \
    lib/sysusers.d/kvtier.conf lib/tmpfiles.d/kvtier.conf share/kvtier/kvtierd.yaml \
    share/doc/kvtier/README.md share/doc/kvtier/systemd/README.md \
    share/doc/kvtier/kubernetes/README.md; do
  [ -f "$prefix/$f" ] || { echo "not installed: $prefix/$f"; exit 1; }
done
for f in kvtierd kvtierctl kvtier-codec; do
  page=$prefix/share/man/man1/$f.1
  [ -f "$page" ] || { echo "not installed: $page (deploy/CMakeLists.txt, help2man)"; exit 1; }
  grep -q "^\.TH $(echo "$f" | tr a-z A-Z) \"1\"" "$page" ||
    { head -3 "$page"; echo "$page is not a manual page of $f"; exit 1; }
  grep -qF -- '\-\-help' "$page" || { echo "$page does not list the flags"; exit 1; }
done
for f in "$src"/docs/*.md; do
  [ -f "$prefix/share/doc/kvtier/$(basename "$f")" ] ||
    { echo "not installed: share/doc/kvtier/$(basename "$f") (deploy/CMakeLists.txt)"; exit 1; }
done
unit=$prefix/lib/systemd/system/kvtierd.service
grep -qx "ExecStart=$prefix/bin/kvtierd --config=/etc/kvtier/kvtierd.yaml" "$unit" ||
  { grep '^ExecStart=' "$unit"; echo "the installed unit does not start $prefix/bin/kvtierd"; exit 1; }
grep -qx "Documentation=file://$prefix/share/doc/kvtier/systemd/README.md" "$unit" ||
  { grep '^Documentation=' "$unit"; echo "the installed unit's Documentation= is not installed"; exit 1; }
cmp -s "$src/deploy/systemd/kvtierd.socket" "$prefix/lib/systemd/system/kvtierd.socket"
cmp -s "$src/deploy/systemd/kvtier.sysusers.conf" "$prefix/lib/sysusers.d/kvtier.conf"
cmp -s "$src/deploy/systemd/kvtier.tmpfiles.conf" "$prefix/lib/tmpfiles.d/kvtier.conf"
# The installed example as a configuration (kvtierd --check-config would check this machine's
# ports, directories and memory instead of the file).
"$prefix/bin/kvtierctl" config validate "$prefix/share/kvtier/kvtierd.yaml"
if command -v systemd-analyze >/dev/null 2>&1; then
  out=$(cd "$prefix/lib/systemd/system" &&
    systemd-analyze verify --man=no "$unit" "$prefix/lib/systemd/system/kvtierd.socket" 2>&1) ||
    { echo "$out"; echo "systemd-analyze verify refuses the installed units"; exit 1; }
  [ -z "$out" ] || { echo "$out"; echo "systemd-analyze verify warns about the installed units"; exit 1; }
  echo "ok: systemd-analyze verify of the installed units"
fi

echo "== kvtierd from the prefix"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$prefix/bin/kvtierd" --state-dir="$tmp/state" --socket="$tmp/kvtier.sock" \
  --set=host.capacity=64MiB --set=host.pin=none --set=disk.capacity=64MiB --set=disk.chunk=4MiB \
  --set="pools.allowed_dirs=[$tmp]" --set="metrics.listen=127.0.0.1:$port" \
  > "$tmp/kvtierd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  [ -S "$tmp/kvtier.sock" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/kvtierd.log"; echo "kvtierd exited"; exit 1; }
  sleep 0.1
done
[ -S "$tmp/kvtier.sock" ] || { cat "$tmp/kvtierd.log"; echo "no socket after 30 s"; exit 1; }
export KVTIER_SOCKET=$tmp/kvtier.sock KVTIER_POOL_DIR=$tmp

echo "== examples of the documentation"
/usr/bin/python3 "$src/tests/install/extract_examples.py" --out "$tmp/examples" \
  "$src/docs/QUICKSTART.md" "$src/docs/CLIENT.md"

run() {
  echo "-- $*"
  if ! "$@"; then
    echo "FAILED: $*"
    tail -20 "$tmp/kvtierd.log"
    exit 1
  fi
}

echo "== C++ through find_package(kvtier): docs/CLIENT.md's CMakeLists.txt and router lines"
# The documented project as it stands (no standard or flags of its own), the router's lines
# appended as the document says; other_examples.cmake adds the other C++ examples beside it. The
# router links libkvtier and stubs of its own generated from the installed .proto files.
cp -r "$tmp/examples" "$tmp/consumer-src"
cat "$tmp/examples/CMakeLists.txt" "$tmp/examples/router.cmake" > "$tmp/consumer-src/CMakeLists.txt"
cmake -S "$tmp/consumer-src" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_PROJECT_INCLUDE="$src/tests/install/other_examples.cmake" > "$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log"; exit 1; }
cmake --build "$tmp/consumer" >> "$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; exit 1; }
while read -r exe; do
  run "$exe"
done < "$tmp/consumer/examples.txt"
grep -q '/my_router$' "$tmp/consumer/examples.txt"

echo "== C++ and C through pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
for f in "$tmp"/examples/*.cc; do
  # The router's own stubs come from its CMake build.
  grep -q '"kvtier/v1/' "$f" && continue
  exe=$tmp/pc-$(basename "${f%.cc}")
  # shellcheck disable=SC2046
  c++ -std=c++20 -Wall -Wextra -Werror "$f" -o "$exe" $(pkg-config --cflags --libs kvtier)
  run env LD_LIBRARY_PATH="$libdir" "$exe"
done
for f in "$tmp"/examples/*.c; do
  [ -e "$f" ] || continue
  exe=$tmp/pc-$(basename "${f%.c}")
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror "$f" -o "$exe" $(pkg-config --cflags --libs kvtier)
  run env LD_LIBRARY_PATH="$libdir" "$exe"
done

echo "== Python with the installed module"
pydir=$prefix/lib/python3/dist-packages
for f in "$tmp"/examples/*.py; do
  [ -e "$f" ] || continue
  if [ ! -d "$pydir" ]; then
    echo "the Python module was not built; skipping $(basename "$f")"
    continue
  fi
  run env PYTHONPATH="$pydir" /usr/bin/python3 "$f"
done

echo "== SIGTERM"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" -eq 0 ] || { tail -20 "$tmp/kvtierd.log"; echo "kvtierd exited with $status"; exit 1; }
echo "install test passed"
