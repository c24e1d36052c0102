#!/usr/bin/env bash
# The README's first command. On a fresh Debian 12 machine: installs the Debian packages, builds
# kvtierd, kvtierctl and the example engine (build-quickstart/), starts kvtierd with its embedded
# default configuration in a scratch directory (only the paths, the metrics port and two tier sizes
# are set: a small host tier, so that the replay also reaches the disk tier), replays a short
# agentic workload through the example engine (NVFP4 cold pages, every returned page checked),
# prints the daemon's per-tier table (kvtierctl stats) and stops the daemon with SIGTERM.
# The build holds everything `cmake --install build-quickstart` installs (daemon, tools, libkvtier,
# headers, CMake package, kvtier.pc), so docs/QUICKSTART.md's next step works from it.
# Usage: scripts/quickstart.sh [kvtier-example-engine flags, e.g. --requests 64 --codec raw]
#   Flags given here replace the script's defaults for the engine (--requests 48).
#   KVTIER_BUILD_DIR=DIR uses the executables of an existing build in DIR instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
. scripts/env.sh
if [ -n "${KVTIER_BUILD_DIR:-}" ]; then
  bin=$(cd "$KVTIER_BUILD_DIR" && pwd)/bin
  echo "== using the build in $KVTIER_BUILD_DIR"
else
  cmake -S . -B build-quickstart -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=OFF \
    -DKVTIER_BUILD_BENCHMARKS=OFF -DKVTIER_BUILD_PYTHON=OFF > /dev/null
  cmake --build build-quickstart
  bin=$PWD/build-quickstart/bin
fi

# The engine's flags: the script's defaults, each left out when the command line names it.
given() {
  local flag=$1 arg
  shift
  for arg in "$@"; do
    case $arg in "$flag" | "$flag"=*) return 0 ;; esac
  done
  return 1
}
engine_flags=()
given --requests "$@" || engine_flags+=(--requests 48)

dir=$(mktemp -d /tmp/kvtier-quickstart.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$dir"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export KVTIER_SOCKET=$dir/kvtier.sock

echo
echo "== kvtierd (state and socket in $dir, metrics on 127.0.0.1:$port)"
"$bin/kvtierd" --state-dir="$dir/state" --socket="$KVTIER_SOCKET" \
  --set=host.capacity=16MiB --set=host.chunk=2MiB --set=disk.capacity=1GiB --set=disk.chunk=64MiB \
  --set="metrics.listen=127.0.0.1:$port" \
  > "$dir/kvtierd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  [ -S "$KVTIER_SOCKET" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/kvtierd.log"; exit 1; }
  sleep 0.1
done
"$bin/kvtierctl" status

echo
echo "== kvtier-example-engine: agentic sessions (shared system prompts, tool calls) through libkvtier"
"$bin/kvtier-example-engine" ${engine_flags[@]+"${engine_flags[@]}"} "$@"

echo
echo "== kvtierctl stats"
"$bin/kvtierctl" stats

echo
echo "== stopping kvtierd (SIGTERM)"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
if [ "$status" -ne 0 ]; then
  tail -20 "$dir/kvtierd.log"
  echo "kvtierd exited with status $status"
  exit 1
fi
echo "kvtierd stopped cleanly. Next: docs/QUICKSTART.md"
