#!/bin/sh
# common/build_info/write_values.cmake on its own (cmake -P), on throw-away trees: the revision is
# the given one when set, the short hash of a checkout, with -dirty once a tracked file changes
# (an untracked file does not count), "unknown" for a tree that is no checkout or lies inside
# another repository's; and an unchanged value leaves the file untouched (no recompilation).
# usage: write_values_test.sh CMAKE SOURCE_DIR
set -eu
cmake=$1
script=$2/common/build_info/write_values.cmake
template=$2/common/build_info/build_info_values.cc.in
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# write_values TREE [REVISION]: prints the generated kRevision value.
write_values() {
  "$cmake" -DKVTIER_BI_TEMPLATE="$template" -DKVTIER_BI_OUT="$work/out.cc" \
    -DKVTIER_BI_SOURCE_DIR="$1" -DKVTIER_BI_GIT="$(command -v git)" \
    -DKVTIER_BI_REVISION="${2:-}" -DKVTIER_BI_VERSION=9.8.7 -P "$script"
  sed -n 's/^const char kRevision\[\] = "\(.*\)";$/\1/p' "$work/out.cc"
}
git_() { git -C "$work/repo" -c user.name=t -c user.email=t@t.invalid "$@"; }

mkdir "$work/plain"
[ "$(write_values "$work/plain")" = unknown ] || fail "a tree without git is not 'unknown'"
[ "$(write_values "$work/plain" 'v1"x\y')" = 'v1\"x\\y' ] || fail "a given revision is not kept, escaped"
grep -q 'kVersion\[\] = "9.8.7"' "$work/out.cc" || fail "the version is not written"

mkdir "$work/repo"
git_ init -q
echo one > "$work/repo/file"
git_ add file
git_ commit -q -m one
head=$(git_ rev-parse --short HEAD)
[ "$(write_values "$work/repo")" = "$head" ] || fail "a clean checkout is not $head"
before=$(stat -c %Y.%i "$work/out.cc")
sleep 1
[ "$(write_values "$work/repo")" = "$head" ] || fail "a second run changed the revision"
[ "$(stat -c %Y.%i "$work/out.cc")" = "$before" ] || fail "an unchanged revision rewrote the file"
echo untracked > "$work/repo/new"
[ "$(write_values "$work/repo")" = "$head" ] || fail "an untracked file made the tree dirty"
echo two > "$work/repo/file"
[ "$(write_values "$work/repo")" = "$head-dirty" ] || fail "a changed tracked file is not -dirty"
[ "$(write_values "$work/repo" given)" = given ] || fail "a given revision does not win over git"
mkdir "$work/repo/inner"
[ "$(write_values "$work/repo/inner")" = unknown ] || fail "a tree inside another checkout took its revision"
echo "write_values.cmake: ok"
