#!/bin/sh
# Lays out what the runtime image holds, from a build tree: kvtierd and kvtierctl (stripped) in
# usr/bin, the image's configuration in etc/kvtier. The Containerfile's build stage runs it, and so
# does the image test (tests/deploy/container), which builds the runtime stage from the test's own
# build tree instead of compiling in the build stage.
# usage: stage.sh BUILD_DIR SOURCE_DIR DEST_DIR
set -eu
build=$1
src=$2
dest=$3
install -d -m 0755 "$dest/usr/bin" "$dest/etc/kvtier"
install -m 0755 --strip "$build/bin/kvtierd" "$build/bin/kvtierctl" "$dest/usr/bin/"
install -m 0644 "$src/deploy/container/kvtierd.yaml" "$dest/etc/kvtier/kvtierd.yaml"
