#!/usr/bin/python3
"""Runs every shell command block of a Markdown document, in order, as a reader would.

A block is a fenced code block tagged `sh` (or `bash`, `shell`). The blocks of one document run
in one bash session (variables, files and daemons carry from block to block), with `set -e`, in a
sandbox: a working directory that links every top-level entry of the source tree and maps `build`
and `build-quickstart` to the build under test, private mount, PID and network namespaces, and
copy-on-write overlays over /etc, /usr, /var, /opt, /root and /run, so that `sudo cmake --install
build --prefix /usr`, `/etc/kvtier`, `systemd-sysusers` and the daemon's default paths and ports
act for real and vanish afterwards. HOME is /root, the build's bin/ is at the end of PATH, and
KVTIER_BUILD_DIR=build lets scripts/quickstart.sh use the build under test.

Stand-ins, because the sandbox has no systemd as PID 1 and no terminal: `sudo` runs the command
as it is (the test runs as root); `sudoedit FILE` applies the block's `editor` directive to FILE;
`systemctl` starts, stops and restarts a unit by running its ExecStart= with the unit's User=,
Group=, state, cache and runtime directories, LimitMEMLOCK= and NOTIFY_SOCKET, waiting for
READY=1 (`daemon-reload` and `enable` without `--now` do nothing); `journalctl -u UNIT` prints
the unit's output and returns (it does not follow). The units themselves are checked by
systemd-analyze in the deploy tests.

Directives, HTML comments right before a block (several may precede one block):
  <!-- doc-test: skip REASON -->     the block is not run here; REASON names what runs it
  <!-- doc-test: daemon SOCKET -->   the block starts a long-running daemon: it runs in the
                                     background until SOCKET exists; it is stopped with SIGTERM
                                     before the next daemon block, a `stop` block, and at the end
  <!-- doc-test: stop -->            stop the running daemon of this document first
  <!-- doc-test: no-errexit -->      the block tests exit statuses itself (`case $? in`)
  <!-- doc-test: editor FIELD=VALUE ... -->  what the reader's editor changes in a YAML file
                                     (sudoedit), dotted field names
  <!-- doc-test: before
  COMMANDS -->                       context the document assumes, run before the block;
                                     `doc_daemon SOCKET COMMAND...` starts a daemon as `daemon`
A block marked `<!-- example: NAME -->` is an example another test runs (it must name a test that
uses NAME); every other code block marked that way is written to the working directory as NAME,
so that a block can compile `hello.cc` as the reader who saved it would.

Usage: doc_commands.py --source SRC --build BUILD DOC.md
       doc_commands.py --source SRC --listed DOC.md...   (fails when README.md or a docs/*.md
                                                          with shell blocks is not among them)
Exit status: 0 when every block ran and succeeded, 1 otherwise, 77 when the sandbox cannot be made
(not root, or no namespaces).
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SHELL_TAGS = {"sh", "bash", "shell"}
DIRECTIVE = re.compile(r"^<!-- doc-test: (\w[\w-]*)(.*?)(-->)?\s*$")
FENCE = re.compile(r"^(\s*)```(.*)$")
EXAMPLE = re.compile(r"^<!-- example: ([A-Za-z0-9_.-]+) -->\s*$")
OVERLAID = ["etc", "usr", "var", "opt", "root", "run"]


class Block:
    def __init__(self, line, tag, text):
        self.line = line
        self.tag = tag
        self.text = text
        self.directives = []  # (name, argument)
        self.example = None


def parse(path):
    """Returns the fenced code blocks of a Markdown file with the directives before each."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    pending = []
    example = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = DIRECTIVE.match(line.strip())
        if m:
            name, arg, closed = m.group(1), m.group(2).strip(), m.group(3)
            if not closed:  # a multi-line directive: up to the line that ends with -->
                body = [arg] if arg else []
                i += 1
                while i < len(lines) and not lines[i].rstrip().endswith("-->"):
                    body.append(lines[i])
                    i += 1
                if i >= len(lines):
                    sys.exit(f"{path}:{len(lines)}: doc-test directive '{name}' does not end")
                body.append(lines[i].rstrip()[:-3])
                arg = "\n".join(body).strip()
            pending.append((name, arg))
            i += 1
            continue
        m = EXAMPLE.match(line.strip())
        if m:
            example = m.group(1)
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            indent, tag = fence.group(1), fence.group(2).strip().split(" ")[0]
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j >= len(lines):
                sys.exit(f"{path}:{i + 1}: the code block does not end")
            body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[start:j]]
            block = Block(i + 1, tag, "\n".join(body) + "\n")
            block.directives = pending
            block.example = example
            blocks.append(block)
            pending, example = [], None
            i = j + 1
            continue
        if line.strip() and pending:
            sys.exit(f"{path}:{i + 1}: a doc-test directive is not followed by a code block")
        if line.strip():
            example = None
        i += 1
    if pending:
        sys.exit(f"{path}: a doc-test directive at the end is not followed by a code block")
    return blocks


def example_is_tested(source, name):
    """True when a file under tests/ names the example (the test that extracts and runs it)."""
    for root, _, files in os.walk(os.path.join(source, "tests")):
        for f in files:
            if f == os.path.basename(__file__):
                continue
            try:
                with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                    if name in fh.read():
                        return True
            except OSError:
                pass
    return False


PRELUDE = r"""
__where="(start)"
__daemon=""
trap '__rc=$?; __doc_stop_daemon || __rc=1; if [ $__rc -ne 0 ]; then echo "doc-test: FAILED (exit $__rc) in the block at $__where" >&2; fi; exit $__rc' EXIT
__doc_block() { __where=$1; echo; echo "=== $1"; }
__doc_stop_daemon() {
  [ -n "$__daemon" ] || return 0
  local pid=$__daemon rc
  __daemon=""
  # SIGTERM to kvtierd itself, so that the block's shell reports kvtierd's exit status.
  pkill -TERM -g "$pid" -x kvtierd 2>/dev/null || kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 600); do
    if ! kill -0 -- "-$pid" 2>/dev/null; then
      rc=$(cat "$__daemon_log.rc" 2>/dev/null || echo "unknown")
      if [ "$rc" != 0 ]; then
        echo "doc-test: the daemon of the block at $__daemon_where exited with status $rc:" >&2
        tail -n 30 "$__daemon_log" >&2
        return 1
      fi
      echo "(daemon of $__daemon_where stopped cleanly)"
      return 0
    fi
    sleep 0.1
  done
  echo "doc-test: the daemon of the block at $__daemon_where did not stop within 60 s" >&2
  kill -KILL -- "-$pid" 2>/dev/null || true
  return 1
}
doc_daemon() {  # SOCKET COMMAND...: for `before`: a daemon the document assumes is running
  local socket=$1
  shift
  __doc_daemon "$socket" "$PWD/.daemon-before-$RANDOM.log" "$(printf '%q ' "$@")"
}
__doc_daemon() {  # SOCKET LOG SCRIPT: runs SCRIPT in its own session until SOCKET exists
  local socket=$1 log=$2 script=$3
  __doc_stop_daemon
  setsid bash -c 'bash -e -c "$1"; echo $? > "$2"' _ "$script" "$log.rc" > "$log" 2>&1 &
  __daemon=$!
  __daemon_where=$__where
  __daemon_log=$log
  for _ in $(seq 1800); do
    [ -S "$socket" ] && { echo "(daemon of $__where serving on $socket)"; return 0; }
    if ! kill -0 "$__daemon" 2>/dev/null; then
      __daemon=""
      echo "doc-test: the daemon exited before $socket appeared:" >&2
      tail -n 30 "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "doc-test: $socket did not appear within 180 s:" >&2
  tail -n 30 "$log" >&2
  return 1
}
set -euo pipefail
"""


def script_for(doc, blocks, source, workdir):
    """The bash script that runs a document's blocks; also writes its example files."""
    out = [PRELUDE]
    ran = skipped = 0
    for n, b in enumerate(blocks):
        where = f"{os.path.basename(doc)}:{b.line}"
        if b.tag not in SHELL_TAGS:
            if b.example:
                path = os.path.join(workdir, b.example)
                if os.path.lexists(path):  # never over a link into the source tree
                    print(f"{where}: example '{b.example}' not written: the name is taken")
                else:
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(b.text)
            if b.directives:
                sys.exit(f"{where}: doc-test directives on a '{b.tag or 'plain'}' block")
            continue
        d = dict(b.directives)
        if b.example:
            if not example_is_tested(source, b.example):
                sys.exit(f"{where}: example '{b.example}' is run by no test under tests/")
            print(f"{where}: example '{b.example}', run by the test that extracts it")
            skipped += 1
            continue
        if "skip" in d:
            if not d["skip"]:
                sys.exit(f"{where}: 'skip' needs a reason")
            print(f"{where}: not run here: {d['skip']}")
            skipped += 1
            continue
        unknown = set(d) - {"daemon", "stop", "no-errexit", "editor", "before"}
        if unknown:
            sys.exit(f"{where}: unknown doc-test directive(s) {sorted(unknown)}")
        ran += 1
        out.append(f"__doc_block {shlex.quote(where)}")
        if "stop" in d:
            out.append("__doc_stop_daemon")
        if "before" in d:
            out.append("echo '(context the document assumes:)'")
            out.append(f"printf '%s\\n' {shlex.quote(d['before'])} | sed 's/^/+ /'")
            out.append(d["before"])
        if "editor" in d:
            out.append(f"export KVTIER_DOC_EDITS={shlex.quote(d['editor'])}")
        if "daemon" in d:
            if not d["daemon"]:
                sys.exit(f"{where}: 'daemon' needs the socket it creates")
            log = os.path.join(workdir, f".daemon-{n}.log")
            out.append(f"echo {shlex.quote('$ ' + b.text.rstrip())}")
            out.append(f'__doc_daemon "{d["daemon"]}" {shlex.quote(log)} {shlex.quote(b.text)}')
        else:
            if "no-errexit" in d:
                out.append("set +e")
            out.append(f"printf '%s\\n' {shlex.quote(b.text.rstrip())} | sed 's/^/$ /'")
            out.append(b.text.rstrip())
            out.append("set -e")
        out.append("unset KVTIER_DOC_EDITS")
    if ran + skipped == 0:
        sys.exit(f"{doc}: no shell blocks")
    out.append(f"__where=end; echo; echo 'doc-test: {ran} blocks ran, {skipped} run elsewhere'")
    return "\n".join(out) + "\n", ran


SUDO = """#!/bin/sh
# doc-test stand-in: the test runs as root, so sudo runs the command as it is.
while [ $# -gt 0 ]; do case $1 in -E|-H|-n) shift ;; *) break ;; esac; done
exec "$@"
"""

SUDOEDIT = """#!/usr/bin/python3
# doc-test stand-in for the reader's editor: applies KVTIER_DOC_EDITS (FIELD=VALUE, dotted names).
import os, sys, yaml
edits = os.environ.get("KVTIER_DOC_EDITS", "").split()
for path in sys.argv[1:]:
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    for edit in edits:
        field, value = edit.split("=", 1)
        node = doc
        *parents, leaf = field.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    print(f"(editor: {path}: {' '.join(edits) or 'no change'})", file=sys.stderr)
"""

JOURNALCTL = """#!/bin/sh
# doc-test stand-in: prints what the unit's process wrote (the systemctl stand-in's log); no -f.
unit=""
while [ $# -gt 0 ]; do case $1 in -u) unit=$2; shift 2 ;; *) shift ;; esac; done
unit=${unit%.service}
cat "/run/doc-test-units/$unit.log"
"""

SYSTEMCTL = r'''#!/usr/bin/python3
# doc-test stand-in for systemctl without systemd as PID 1: see tests/docs/doc_commands.py.
import os, pwd, grp, resource, signal, socket, subprocess, sys, time

STATE = "/run/doc-test-units"
PATHS = ["/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
         "/lib/systemd/system"]


def unit_file(name):
    for d in PATHS:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    sys.exit(f"Unit {name} not found.")


def service(name):
    values = {}
    section = None
    with open(unit_file(name)) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                values.setdefault(k, []).append(v)
    return {k: v[-1] for k, v in values.items()}, values


def pid_of(unit):
    try:
        pid = int(open(f"{STATE}/{unit}.pid").read())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def start(name):
    unit = name.removesuffix(".service")
    if pid_of(unit):
        return
    s, multi = service(unit + ".service")
    user = s.get("User", "root")
    group = s.get("Group", grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name)
    uid, gid = pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid
    for kind, base in (("RuntimeDirectory", "/run"), ("StateDirectory", "/var/lib"),
                       ("CacheDirectory", "/var/cache"), ("LogsDirectory", "/var/log")):
        for d in s.get(kind, "").split():
            path = os.path.join(base, d)
            os.makedirs(path, exist_ok=True)
            if os.stat(path).st_uid != uid:  # as systemd does: the tree changes owner
                subprocess.check_call(["chown", "-R", f"{uid}:{gid}", path])
            os.chown(path, uid, gid)
            os.chmod(path, int(s.get(kind + "Mode", "0755"), 8))
    env = dict(os.environ)
    for e in multi.get("Environment", []):
        for kv in e.split():
            k, v = kv.strip('"').split("=", 1)
            env[k] = v
    os.makedirs(STATE, exist_ok=True)
    notify_path = f"{STATE}/{unit}.notify"
    if os.path.exists(notify_path):
        os.unlink(notify_path)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    os.chmod(notify_path, 0o777)
    env["NOTIFY_SOCKET"] = notify_path
    argv = s["ExecStart"].lstrip("-@+!").split()

    limits = []
    if s.get("LimitMEMLOCK") == "infinity":
        limits.append(("LimitMEMLOCK", resource.RLIMIT_MEMLOCK, resource.RLIM_INFINITY))
    if "LimitNOFILE" in s:
        limits.append(("LimitNOFILE", resource.RLIMIT_NOFILE, int(s["LimitNOFILE"])))
    for name, which, value in limits:
        if resource.getrlimit(which)[1] not in (resource.RLIM_INFINITY,) and (
                value == resource.RLIM_INFINITY or value > resource.getrlimit(which)[1]):
            print(f"(systemctl stand-in: {name}= cannot be raised here, the hard limit is "
                  f"{resource.getrlimit(which)[1]})", file=sys.stderr)

    def child():
        for _, which, value in limits:
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass

    log = open(f"{STATE}/{unit}.log", "ab")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=child, cwd="/",
                            start_new_session=True, user=uid, group=gid,
                            extra_groups=[g.gr_gid for g in grp.getgrall() if user in g.gr_mem])
    with open(f"{STATE}/{unit}.pid", "w") as f:
        f.write(str(proc.pid))
    notify.settimeout(0.5)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            msg = notify.recv(4096).decode()
            if "READY=1" in msg.split("\n"):
                print(f"(systemctl stand-in: {unit} started as {user}:{group}, pid {proc.pid}, READY=1)",
                      file=sys.stderr)
                return
        except socket.timeout:
            pass
        if proc.poll() is not None:
            sys.stderr.write(open(f"{STATE}/{unit}.log").read()[-3000:])
            sys.exit(f"Job for {unit}.service failed: {argv[0]} exited with status {proc.returncode}")
    sys.exit(f"Job for {unit}.service failed: no READY=1 within 180 s")


def stop(name):
    unit = name.removesuffix(".service")
    pid = pid_of(unit)
    if not pid:
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(1200):
        try:
            os.kill(pid, 0)
        except OSError:
            print(f"(systemctl stand-in: {unit} stopped)", file=sys.stderr)
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    sys.exit(f"{unit} did not stop within 120 s")


args = [a for a in sys.argv[1:] if not a.startswith("-")]
flags = [a for a in sys.argv[1:] if a.startswith("-")]
verb, units = args[0], args[1:]
if verb in ("daemon-reload", "disable"):
    pass
elif verb == "enable":
    if "--now" in flags:
        for u in units:
            start(u)
elif verb == "start":
    for u in units:
        start(u)
elif verb == "stop":
    for u in units:
        stop(u)
elif verb == "restart":
    for u in units:
        stop(u)
        start(u)
elif verb == "is-active":
    sys.exit(0 if all(pid_of(u.removesuffix(".service")) for u in units) else 3)
else:
    sys.exit(f"systemctl stand-in: '{verb}' is not supported")
'''

SANDBOX = r"""
set -eu
ip link set lo up
for d in {overlaid}; do
  mkdir -p "$T/ov/$d/u" "$T/ov/$d/w"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$T/ov/$d/u,workdir=$T/ov/$d/w" "/$d"
done
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
grep -qw localhost /etc/hosts 2>/dev/null || echo "127.0.0.1 localhost" >> /etc/hosts
export HOME=/root PATH="$T/shim:$PATH:$BUILD/bin" KVTIER_BUILD_DIR=build
unset KVTIER_SOCKET KVTIER_TOKEN_FILE
cd "$T/work"
exec bash "$T/doc.sh"
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--build")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--listed", action="store_true", help="check that DOCs are all there are")
    parser.add_argument("doc", nargs="+")
    args = parser.parse_args()
    source = os.path.realpath(args.source)
    if args.listed:
        docs = ["README.md"] + sorted(os.path.join("docs", f)
                                      for f in os.listdir(os.path.join(source, "docs"))
                                      if f.endswith(".md"))
        missing = [d for d in docs if d not in args.doc and
                   any(b.tag in SHELL_TAGS for b in parse(os.path.join(source, d)))]
        for d in missing:
            print(f"{d} has shell blocks but no doc-test (tests/docs/CMakeLists.txt)")
        return 1 if missing else 0
    if not args.build or len(args.doc) != 1:
        parser.error("--build and one DOC")
    build = os.path.realpath(args.build)
    args.doc = args.doc[0]
    if os.geteuid() != 0:
        print("SKIP: the sandbox needs root (mount and network namespaces)")
        return 77
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        print(f"SKIP: no namespaces here: {probe.stderr.decode().strip()}")
        return 77

    tmp = tempfile.mkdtemp(prefix="kvtier-doc-test.")
    try:
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        for entry in os.listdir(source):
            if entry.startswith("build") or entry.startswith(".device"):
                continue
            os.symlink(os.path.join(source, entry), os.path.join(work, entry))
        for name in ("build", "build-quickstart"):
            os.symlink(build, os.path.join(work, name))
        shim = os.path.join(tmp, "shim")
        os.makedirs(shim)
        for name, text in (("sudo", SUDO), ("sudoedit", SUDOEDIT), ("systemctl", SYSTEMCTL),
                           ("journalctl", JOURNALCTL)):
            with open(os.path.join(shim, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(shim, name), 0o755)
        blocks = parse(os.path.join(source, args.doc))
        script, ran = script_for(args.doc, blocks, source, work)
        with open(os.path.join(tmp, "doc.sh"), "w") as f:
            f.write(script)
        with open(os.path.join(tmp, "sandbox.sh"), "w") as f:
            f.write(SANDBOX.replace("{overlaid}", " ".join(OVERLAID)))
        env = dict(os.environ, T=tmp, BUILD=build)
        sys.stdout.flush()
        rc = subprocess.call(["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc",
                              "--propagation", "private", "bash", os.path.join(tmp, "sandbox.sh")],
                             env=env)
        print(f"doc-test: {args.doc}: {'ok' if rc == 0 else f'FAILED (exit {rc})'}")
        return 0 if rc == 0 else 1
    finally:
        if args.keep:
            print(f"doc-test: scratch directory kept: {tmp}")
        else:
            subprocess.call(["rm", "-rf", tmp])


if __name__ == "__main__":
    sys.exit(main())
