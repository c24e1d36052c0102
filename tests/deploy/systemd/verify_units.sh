#!/bin/sh
# Checks deploy/systemd: `systemd-analyze verify` accepts the units (with ExecStart= pointing at
# the built kvtierd) without a single warning, systemd-sysusers accepts the sysusers.d file, and
# `kvtierctl config validate` accepts the example configuration (kvtierd's own loader; not
# `kvtierd --check-config`, which also checks this machine's ports, directories and memory).
# Exit 77 (skipped) without systemd-analyze.
# usage: verify_units.sh DEPLOY_SYSTEMD_DIR KVTIERD KVTIERCTL
set -u
src=$1
kvtierd=$(realpath "$2")
kvtierctl=$(realpath "$3")
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not installed"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

cp "$src/kvtierd.service" "$src/kvtierd.socket" "$tmp/"
grep -q '^ExecStart=/usr/bin/kvtierd ' "$tmp/kvtierd.service" ||
  { echo "FAIL: kvtierd.service has no 'ExecStart=/usr/bin/kvtierd ...'"; fail=1; }
sed -i "s|^ExecStart=/usr/bin/kvtierd |ExecStart=$kvtierd |" "$tmp/kvtierd.service"
# verify also loads the units these refer to; run where relative names resolve to the copies.
out=$(cd "$tmp" && systemd-analyze verify --man=no "$tmp/kvtierd.service" "$tmp/kvtierd.socket" 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  echo "FAIL: systemd-analyze verify (exit $rc) says:"
  echo "$out"
  fail=1
else
  echo "ok: systemd-analyze verify kvtierd.service kvtierd.socket"
fi

# Directives the deployment depends on (a unit without them still verifies).
for want in '^Type=notify$' '^WatchdogSec=' '^User=kvtier$' '^ProtectSystem=strict$' \
    '^StateDirectory=kvtier$' '^RuntimeDirectory=kvtier$' '^RuntimeDirectoryPreserve=yes$' \
    '^LimitMEMLOCK=infinity$' '^NoNewPrivileges=yes$' '^ExecReload=/bin/kill -HUP \$MAINPID$'; do
  grep -q "$want" "$src/kvtierd.service" || { echo "FAIL: kvtierd.service lacks $want"; fail=1; }
done
grep -q '^ListenStream=/run/kvtier/kvtier.sock$' "$src/kvtierd.socket" ||
  { echo "FAIL: kvtierd.socket does not listen on /run/kvtier/kvtier.sock"; fail=1; }

if command -v systemd-sysusers >/dev/null 2>&1; then
  out=$(systemd-sysusers --dry-run --root="$tmp" "$src/kvtier.sysusers.conf" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || echo "$out" | grep -q 'kvtier.sysusers.conf' ||
      ! echo "$out" | grep -q "Creating user 'kvtier'"; then
    echo "FAIL: systemd-sysusers --dry-run (exit $rc) says:"
    echo "$out"
    fail=1
  else
    echo "ok: systemd-sysusers --dry-run kvtier.sysusers.conf"
  fi
fi

# The pool directory: create the user in a scratch root, then let systemd-tmpfiles make the
# directory there; it must be setgid, group-writable and owned by kvtier.
if command -v systemd-sysusers >/dev/null 2>&1 && command -v systemd-tmpfiles >/dev/null 2>&1; then
  root="$tmp/root"
  mkdir -p "$root/etc" "$root/dev/shm"
  if ! out=$(systemd-sysusers --root="$root" "$src/kvtier.sysusers.conf" 2>&1 &&
      systemd-tmpfiles --create --root="$root" "$src/kvtier.tmpfiles.conf" 2>&1); then
    echo "FAIL: systemd-tmpfiles --create kvtier.tmpfiles.conf: $out"
    fail=1
  else
    uid=$(awk -F: '$1 == "kvtier" { print $3 }' "$root/etc/passwd")
    got=$(stat -c '%a %u' "$root/dev/shm/kvtier" 2>&1)
    if [ "$got" != "2770 $uid" ]; then
      echo "FAIL: /dev/shm/kvtier is '$got', expected '2770 $uid' (mode, owner kvtier)"
      fail=1
    else
      echo "ok: systemd-tmpfiles makes /dev/shm/kvtier 2770 kvtier"
    fi
  fi
fi
grep -q '^  allowed_dirs: \[/dev/shm/kvtier\]$' "$src/kvtierd.yaml" ||
  { echo "FAIL: kvtierd.yaml's pools.allowed_dirs is not the tmpfiles directory"; fail=1; }

out=$("$kvtierctl" config validate "$src/kvtierd.yaml" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: kvtierctl config validate (exit $rc): $out"
  fail=1
else
  echo "ok: $out"
fi
# The example's socket is the one the units use.
grep -q '^  socket: /run/kvtier/kvtier.sock$' "$src/kvtierd.yaml" ||
  { echo "FAIL: kvtierd.yaml's server.socket is not /run/kvtier/kvtier.sock"; fail=1; }
exit $fail
