#!/usr/bin/env bash
# Checks that every tracked C++, CUDA and proto source is formatted with .clang-format.
# Usage: scripts/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
# -c safe.directory: CI may run as root over a checkout owned by another user.
list=$(git -c safe.directory="$PWD" ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.proto')
mapfile -t files <<<"$list"
if [ -z "$list" ] || [ ${#files[@]} -eq 0 ]; then
  echo "check-format: git lists no sources here" >&2
  exit 1
fi
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}" </dev/null
  exit 0
fi
clang-format --dry-run --Werror "${files[@]}" </dev/null
echo "check-format: ${#files[@]} files formatted"
