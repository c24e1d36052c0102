#!/usr/bin/python3
"""Checks deploy/container/Containerfile, then builds its runtime stage and runs kvtierd in it.

Without a container tool this checks the file only: its stages, that the build stage installs only
packages of scripts/install-deps.sh, that the runtime stage installs exactly the packages holding
the libraries the built kvtierd and kvtierctl are linked with (readelf's NEEDED entries, dpkg -S),
that its user and port are the DaemonSet's, and that the image's configuration passes
`kvtierctl config validate`. With buildah, runc and mmdebstrap (scripts/install-deps.sh installs
them) it then builds the image for real, without any registry:

- the base image is a Debian 12 minbase root file system made by mmdebstrap from Debian's
  archive, imported under the names the Containerfile's FROM lines use (cached in --cache);
- the runtime stage is built from the Containerfile as it is, with the build stage's output
  ("build", /stage) supplied from this build tree by deploy/container/stage.sh (buildah's
  --build-context), so that the test does not compile kvtier a second time; --full builds the
  build stage too (many minutes: it compiles kvtierd and kvtierctl in the image);
- the image is checked: its user (10001:10001), its exposed port, its entrypoint, no package of
  the build stage in it, every library found (ldd), `kvtierd --check-config` of the image's
  configuration in a container, then kvtierd started from the image's entrypoint and command in
  a container (runc, host network, the DaemonSet's host directories as volumes): /healthz and
  /readyz answer 200 on the metrics port, `kvtierctl status` in a second container reaches it
  through the shared socket, the process runs as UID 10001, and SIGTERM stops it with exit
  status 0.

Every failed check is printed; exit status 1 when any failed, 77 (skipped) when the file checks
passed and buildah, runc or mmdebstrap is missing, or the test does not run as root.

usage: test_container_image.py --source DIR --kvtierd PATH --kvtierctl PATH --version V
                               --cache DIR [--full] [--cuda TOOLKIT_DIR]
"""

import argparse
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

SKIP = 77
BASE_NAMES = ("docker.io/library/debian:bookworm", "docker.io/library/debian:bookworm-slim")


class Checker:
    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, ok, message):
        if ok:
            self.passed += 1
        else:
            self.failures.append(message)
            print("FAIL:", message, flush=True)
        return ok


def parse_containerfile(path):
    """[(stage name or None, [(INSTRUCTION, arguments)])], continuation lines joined."""
    lines, current = [], ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if current and line.lstrip().startswith("#"):
                continue
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            lines.append(current + line)
            current = ""
    stages = []
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.IGNORECASE)
            stages.append([m.group(2), [("FROM", m.group(1))]])
        elif stages:
            stages[-1][1].append((word, rest.strip()))
        else:
            stages.append([None, [(word, rest.strip())]])
    return [(name, instructions) for name, instructions in stages]


def apt_packages(instructions):
    """The package names of every `apt-get install` in a stage's RUN instructions."""
    packages = []
    for word, rest in instructions:
        if word != "RUN":
            continue
        for part in rest.split("&&"):
            tokens = part.split()
            if "apt-get" in tokens and "install" in tokens:
                after = tokens[tokens.index("install") + 1:]
                packages += [t for t in after if not t.startswith("-")]
    return packages


def install_deps_packages(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^packages=\((.*?)^\)", text, re.MULTILINE | re.DOTALL)
    return set(m.group(1).split()) if m else set()


def dpkg_owner(path):
    """The Debian package that installed a file, trying the /usr-merged spellings too."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/lib/"):
            candidates.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            candidates.append("/usr" + p)
    for p in candidates:
        run = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if run.returncode == 0:
            return run.stdout.split(":", 1)[0].strip()
    return None


def needed_packages(c, binaries):
    """{package: [library (binary)]} for every NEEDED entry of the binaries."""
    owners = {}
    for binary in binaries:
        elf = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True)
        names = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", elf.stdout)
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.MULTILINE))
        # The dynamic loader is listed by its path alone.
        for path in re.findall(r"^\s*(/\S+) \(0x", ldd, re.MULTILINE):
            paths.setdefault(os.path.basename(path), path)
        for name in names:
            path = paths.get(name)
            if not c.check(path and path != "not", f"{binary}: ldd does not resolve {name}"):
                continue
            owner = dpkg_owner(path)
            if c.check(owner is not None, f"{binary}: no Debian package holds {path} ({name})"):
                owners.setdefault(owner, []).append(f"{name} ({os.path.basename(binary)})")
    return owners


def daemonset_container(source):
    with open(os.path.join(source, "deploy/kubernetes/daemonset.yaml"), encoding="utf-8") as f:
        ds = yaml.safe_load(f)
    pod = ds["spec"]["template"]["spec"]
    ctr = next(x for x in pod["containers"] if x["name"] == "kvtierd")
    return pod, ctr


def check_file(c, args):
    """The checks that need no container tool; returns what the image checks need."""
    containerfile = os.path.join(args.source, "deploy/container/Containerfile")
    stages = parse_containerfile(containerfile)
    names = [name for name, _ in stages]
    c.check(names[-1] == "runtime", f"Containerfile: the last stage is {names[-1]}, not runtime")
    c.check("build" in names, f"Containerfile: no stage named build ({names})")
    by_name = dict(stages)
    build, runtime = by_name.get("build", []), by_name.get("runtime", [])
    global_args = dict(a.split("=", 1) for n, ins in stages if n is None
                       for w, a in ins if w == "ARG" and "=" in a)
    base = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), m.group(0)),
                  runtime[0][1] if runtime else "")
    c.check(base in ("docker.io/library/debian:bookworm-slim", "docker.io/library/debian:12-slim"),
            f"Containerfile: the runtime stage is FROM {base}, not Debian 12 slim")

    # Build stage: Debian packages the project already installs (names that exist, one list).
    deps = install_deps_packages(os.path.join(args.source, "scripts/install-deps.sh"))
    build_pkgs = apt_packages(build)
    c.check(build_pkgs, "Containerfile: the build stage installs no packages")
    for p in build_pkgs:
        c.check(p in deps, f"Containerfile: the build stage installs {p}, which "
                           f"scripts/install-deps.sh does not")

    # Runtime stage: exactly the packages of the libraries the binaries are linked with.
    runtime_pkgs = apt_packages(runtime)
    owners = needed_packages(c, [args.kvtierd, args.kvtierctl])
    for p, libs in sorted(owners.items()):
        c.check(p in runtime_pkgs, f"Containerfile: the runtime stage lacks {p}, which holds "
                                   f"{', '.join(libs)}")
    for p in runtime_pkgs:
        c.check(p in owners, f"Containerfile: the runtime stage installs {p}, which holds no "
                             f"library kvtierd or kvtierctl is linked with")
    c.check(len(set(runtime_pkgs)) == len(runtime_pkgs), "Containerfile: a runtime package twice")

    # User, port, version: the DaemonSet's.
    pod, ctr = daemonset_container(args.source)
    sc = {**(pod.get("securityContext") or {}), **(ctr.get("securityContext") or {})}
    users = [a for w, a in runtime if w == "USER"]
    want_user = f"{sc.get('runAsUser')}:{sc.get('runAsGroup')}"
    c.check(users and users[-1] == want_user,
            f"Containerfile: USER {users[-1] if users else None} is not the DaemonSet's "
            f"runAsUser:runAsGroup {want_user} (numeric, so runAsNonRoot can verify it)")
    exposed = [a for w, a in runtime if w == "EXPOSE"]
    port = next(p["containerPort"] for p in ctr["ports"] if p["name"] == "metrics")
    c.check(exposed == [f"{port}/tcp"],
            f"Containerfile: EXPOSE {exposed} is not the DaemonSet's metrics port {port}/tcp")
    with open(os.path.join(args.source, "deploy/container/kvtierd.yaml"), encoding="utf-8") as f:
        image_config = yaml.safe_load(f)
    listen = str((image_config.get("metrics") or {}).get("listen", ""))
    c.check(listen == f"0.0.0.0:{port}",
            f"deploy/container/kvtierd.yaml: metrics.listen {listen} is not 0.0.0.0:{port}")
    # As a configuration here; the image check below runs kvtierd --check-config in the image,
    # where its directories, port and memory are the ones it will meet.
    run = subprocess.run([args.kvtierctl, "config", "validate",
                          os.path.join(args.source, "deploy/container/kvtierd.yaml")],
                         capture_output=True, text=True, timeout=30)
    c.check(run.returncode == 0, f"kvtierctl config validate refuses "
                                 f"deploy/container/kvtierd.yaml: "
                                 f"{(run.stderr or run.stdout).strip()}")
    image = ctr["image"]
    c.check(image.endswith(":" + args.version),
            f"DaemonSet image {image} is not tagged with the project version {args.version}")
    versions = [a for w, a in runtime if w == "ARG" and a.startswith("VERSION=")]
    c.check(versions == [f"VERSION={args.version}"],
            f"Containerfile: runtime ARG {versions} is not VERSION={args.version}")
    return image, ctr, sc, build_pkgs, port


def sh(argv, check=True, **kw):
    run = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and run.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {run.returncode}: "
                           f"{(run.stderr or run.stdout).strip()[-2000:]}")
    return run


class Buildah:
    def __init__(self, cache):
        self.base = ["buildah", "--root", os.path.join(cache, "storage"),
                     "--runroot", os.path.join(cache, "run"), "--storage-driver", "overlay"]

    def __call__(self, *argv, **kw):
        return sh(self.base + list(argv), **kw)


def ensure_base(b, cache):
    """The Debian 12 base image under the FROM lines' names, from mmdebstrap (cached)."""
    have = b("images", "--format", "{{.Name}}:{{.Tag}}").stdout.split()
    if all(n in have for n in BASE_NAMES):
        return
    tar = os.path.join(cache, "debian-bookworm-minbase.tar")
    # mmdebstrap picks the output format by the name's extension: .tar, also while unfinished.
    part = os.path.join(cache, "debian-bookworm-minbase.part.tar")
    if not os.path.isfile(tar):
        if os.path.isdir(tar):
            shutil.rmtree(tar)
        print("== mmdebstrap: a Debian 12 minbase root file system (once per cache)", flush=True)
        t0 = time.time()
        # As the slim images: no manual pages, documentation or translations.
        sh(["mmdebstrap", "--variant=minbase", "--quiet",
            "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--dpkgopt=path-exclude=/usr/share/locale/*", "bookworm", part])
        os.rename(part, tar)
        print(f"   {time.time() - t0:.0f} s", flush=True)
    ctr = b("from", "scratch").stdout.strip()
    b("add", ctr, tar, "/")
    b("config", "--cmd", "/bin/bash", ctr)
    b("commit", "-q", ctr, BASE_NAMES[0])
    b("rm", ctr)
    for name in BASE_NAMES[1:]:
        b("tag", BASE_NAMES[0], name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def find_process(token):
    """(pid, uid) of the host process whose command line starts with /usr/bin/kvtierd and holds
    token (the container's kvtierd, seen from the host's PID namespace)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            with open(f"/proc/{entry}/status", encoding="utf-8") as f:
                uid = int(re.search(r"^Uid:\s+(\d+)", f.read(), re.MULTILINE).group(1))
        except (OSError, AttributeError):
            continue
        if argv and argv[0].endswith("kvtierd") and any(token in a for a in argv):
            return int(entry), uid
    return None, None


def build_and_run(c, args, image, ctr_spec, sc, build_pkgs, port):
    os.makedirs(args.cache, exist_ok=True)
    lock = open(os.path.join(args.cache, "lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    b = Buildah(args.cache)
    b("rm", "--all", check=False)
    ensure_base(b, args.cache)
    tmp = tempfile.mkdtemp(prefix="kvtier-image-test.")
    try:
        bud = ["bud", "--layers", "--pull=never", "--network=host", "--isolation=chroot",
               "-f", os.path.join(args.source, "deploy/container/Containerfile"), "-t", image]
        if args.full:
            print("== buildah bud: both stages (compiles kvtierd and kvtierctl)", flush=True)
            if args.cuda:
                bud += ["--build-context", f"cuda={args.cuda}"]
        else:
            print("== buildah bud --target runtime, the build stage from this build tree",
                  flush=True)
            # stage.sh reads BUILD_DIR/bin/kvtierd and kvtierctl: a tree of links to this build's.
            tree, context = os.path.join(tmp, "tree"), os.path.join(tmp, "build-stage")
            os.makedirs(os.path.join(tree, "bin"))
            for name in ("kvtierd", "kvtierctl"):
                os.symlink(os.path.abspath(getattr(args, name)), os.path.join(tree, "bin", name))
            sh([os.path.join(args.source, "deploy/container/stage.sh"), tree, args.source,
                os.path.join(context, "stage")])
            bud += ["--target", "runtime", "--build-context", f"build={context}"]
        t0 = time.time()
        run = b(*bud, args.source, check=False, timeout=3600)
        if not c.check(run.returncode == 0,
                       f"buildah bud exited {run.returncode}:\n{run.stdout[-3000:]}"
                       f"{run.stderr[-3000:]}"):
            return
        print(f"   built {image} in {time.time() - t0:.0f} s", flush=True)
        b("rmi", "--prune", check=False)
        check_image(c, b, image, ctr_spec, sc, build_pkgs, port, tmp)
    finally:
        b("rm", "--all", check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def check_image(c, b, image, ctr_spec, sc, build_pkgs, port, tmp):
    info = json.loads(b("inspect", "--type", "image", image).stdout)
    config = info["OCIv1"]["config"]
    want_user = f"{sc['runAsUser']}:{sc['runAsGroup']}"
    c.check(config.get("User") == want_user, f"image: User {config.get('User')}, not {want_user}")
    c.check(f"{port}/tcp" in (config.get("ExposedPorts") or {}),
            f"image: ExposedPorts {config.get('ExposedPorts')} lack {port}/tcp")
    entry = (config.get("Entrypoint") or []) + (config.get("Cmd") or [])
    c.check(entry[:1] == ["/usr/bin/kvtierd"], f"image: entrypoint {entry} is not kvtierd")
    size = b("images", "--format", "{{.Size}}", image, check=False).stdout.strip()
    print(f"   image {image}: {entry}, user {config.get('User')}, {size}", flush=True)

    ctr = b("from", "--pull=never", image).stdout.strip()
    runtime = ["--isolation=oci", "--runtime=" + (shutil.which("runc") or "runc")]

    def run_in(*argv, volumes=(), network=False, **kw):
        flags = list(runtime)
        if network:
            flags.append("--network=host")
        for v in volumes:
            flags += ["-v", v]
        return b("run", *flags, ctr, "--", *argv, check=False, **kw)

    r = run_in("sh", "-c", "id -u; id -g; ldd /usr/bin/kvtierd /usr/bin/kvtierctl")
    lines = r.stdout.splitlines()
    if c.check(r.returncode == 0, f"image: ldd exited {r.returncode}: {r.stderr.strip()}"):
        c.check(lines[:2] == want_user.split(":"),
                f"image: a container runs as {lines[:2]}, not {want_user}")
        missing = [x.strip() for x in lines if "not found" in x]
        c.check(not missing, f"image: libraries not found: {missing}")
    r = run_in("dpkg-query", "-W", "-f", "${Package}\\n")
    installed = set(r.stdout.split())
    leaked = sorted(set(build_pkgs) & installed)
    c.check(r.returncode == 0 and not leaked, f"image: holds build-stage packages {leaked}")
    r = run_in(*entry, "--check-config")
    c.check(r.returncode == 0, f"image: {entry} --check-config exited {r.returncode}: "
                               f"{(r.stderr or r.stdout).strip()}")

    # The DaemonSet's host directories, owned as its initContainer leaves them.
    dirs = {}
    for path, mode in (("/var/lib/kvtier", 0o700), ("/run/kvtier", 0o770),
                       ("/dev/shm/kvtier", 0o2770)):
        d = os.path.join(tmp, path.strip("/").replace("/", "-"))
        os.makedirs(d)
        os.chown(d, sc["runAsUser"], sc["runAsGroup"])
        os.chmod(d, mode)
        dirs[path] = d
    volumes = [f"{d}:{p}" for p, d in dirs.items()]
    mport = free_port()
    token = f"--set=metrics.listen=127.0.0.1:{mport}"
    log_path = os.path.join(tmp, "kvtierd.log")
    argv = b.base + ["run", *runtime, "--network=host"]
    for v in volumes:
        argv += ["-v", v]
    argv += [ctr, "--", *entry, "--set=host.capacity=64MiB", "--set=host.pin=none",
             "--set=disk.capacity=64MiB", "--set=disk.chunk=4MiB", token]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        status = None
        while time.time() < deadline and proc.poll() is None:
            status, _ = http_status(f"http://127.0.0.1:{mport}/readyz")
            if status == 200:
                break
            time.sleep(0.2)
        if not c.check(status == 200, f"image: kvtierd not ready on 127.0.0.1:{mport} within "
                                      f"60 s (exit {proc.poll()}):\n{open(log_path).read()}"):
            return
        c.check(http_status(f"http://127.0.0.1:{mport}/healthz")[0] == 200,
                "image: /healthz is not 200")
        pid, uid = find_process(token)
        c.check(pid is not None and uid == sc["runAsUser"],
                f"image: kvtierd runs as UID {uid}, not {sc['runAsUser']}")
        r = run_in("kvtierctl", "status", volumes=[volumes[1]], timeout=60)
        c.check(r.returncode == 0 and "serving" in r.stdout,
                f"image: kvtierctl status through /run/kvtier/kvtier.sock exited {r.returncode}: "
                f"{(r.stdout + r.stderr).strip()}")
        print(f"   kvtierd in the image: ready, UID {uid}; kvtierctl status: "
              f"{r.stdout.splitlines()[1] if r.returncode == 0 else '-'}", flush=True)
        if pid is not None:
            os.kill(pid, 15)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
        log_text = open(log_path).read()
        c.check(code == 0 and "stopped cleanly" in log_text,
                f"image: kvtierd after SIGTERM: exit {code}:\n{log_text[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--kvtierd", required=True)
    parser.add_argument("--kvtierctl", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--cuda")
    args = parser.parse_args()
    c = Checker()
    image, ctr, sc, build_pkgs, port = check_file(c, args)
    missing = [t for t in ("buildah", "runc", "mmdebstrap") if shutil.which(t) is None]
    if os.geteuid() != 0:
        missing.append("root (buildah with its own storage, mmdebstrap)")
    skipped = bool(missing) and not c.failures
    if missing:
        print(f"SKIP: the image build needs {', '.join(missing)} (scripts/install-deps.sh)")
    elif not c.failures:
        try:
            build_and_run(c, args, image, ctr, sc, build_pkgs, port)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            c.check(False, f"image: {e}")
    print(f"{c.passed} checks passed, {len(c.failures)} failed")
    if c.failures:
        return 1
    return SKIP if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
