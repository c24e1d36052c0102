#!/usr/bin/python3
"""kvtierd under the systemd protocols, against a real kvtierd process.

1. sd_notify: with NOTIFY_SOCKET (a path) and WATCHDOG_USEC=200000, kvtierd sends READY=1 (with
   MAINPID and STATUS) only once its gRPC Unix socket and metrics listener answer, WATCHDOG=1 every
   100 ms, RELOADING=1 then READY=1 around SIGHUP, STOPPING=1 on SIGTERM, and exits 0.
2. Socket activation: a listening Unix socket passed as fd 3 (LISTEN_FDS=1, LISTEN_PID) is served
   (kvtierctl status through it, including a client that connected before kvtierd started), the
   abstract NOTIFY_SOCKET form ("@name") works, WATCHDOG_PID naming another process turns the pings
   off, and after SIGTERM the socket file is left to its owner (systemd) and still queues clients.

usage: sd_notify_test.py KVTIERD KVTIERCTL
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

KVTIERD, KVTIERCTL = sys.argv[1], sys.argv[2]
FAILURES = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


def daemon_args(tmp, sock):
    return [KVTIERD, "--state-dir=" + os.path.join(tmp, "state"), "--socket=" + sock,
            "--set=host.capacity=16MiB", "--set=host.chunk=4MiB", "--set=host.pin=none",
            "--set=disk.capacity=0", "--set=metrics.listen=127.0.0.1:0",
            "--set=pools.allowed_dirs=[" + tmp + "]", "--set=server.workers=2"]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                        "LISTEN_PID", "LISTEN_FDNAMES")}
    env.update(extra)
    return env


class Notifications:
    """Datagrams received on the notify socket, each parsed into a dict, with arrival times."""

    def __init__(self, sock, proc, log):
        self.sock, self.proc, self.log = sock, proc, log
        self.messages = []  # (time, dict)

    def wait_for(self, key, value, timeout):
        """Receives until a message with key=value arrives; returns it, or None at the timeout or
        when the daemon exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                if self.proc.poll() is not None:
                    return None
                continue
            msg = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
            self.messages.append((time.monotonic(), msg))
            if msg.get(key) == value:
                return msg
        return None

    def drain(self, seconds):
        """Everything received within `seconds`."""
        start = len(self.messages)
        self.wait_for("\0never", "", seconds)
        return [m for _, m in self.messages[start:]]


def connects(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def kvtierctl(sock, *command, timeout=10):
    """Exit status and the first line of the output of `kvtierctl --socket=SOCK COMMAND`."""
    r = subprocess.run([KVTIERCTL, "--socket=" + sock, "--timeout=%d" % timeout] + list(command),
                       capture_output=True, text=True, timeout=timeout + 30)
    return r.returncode, ((r.stdout + r.stderr).strip().splitlines() or [""])[0]


def stop(proc, notes, what):
    proc.send_signal(signal.SIGTERM)
    check(notes.wait_for("STOPPING", "1", 30) is not None, what + ": SIGTERM gives STOPPING=1")
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    check(rc == 0, what + ": exit status 0 after SIGTERM (got %s)" % rc)


def test_notify(tmp):
    print("== sd_notify and watchdog", flush=True)
    notify_path = os.path.join(tmp, "notify.sock")
    nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    nsock.bind(notify_path)
    sock = os.path.join(tmp, "kvtier.sock")
    log_path = os.path.join(tmp, "kvtierd-notify.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(daemon_args(tmp, sock), stderr=log,
                                env=clean_env(NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="200000"))
    notes = Notifications(nsock, proc, log_path)
    try:
        ready = notes.wait_for("READY", "1", 60)
        # At once, before anything else: the listeners must already answer.
        socket_up = ready is not None and connects(sock)
        metrics = re.search(r"metrics on http://([0-9.]+:[0-9]+)", (ready or {}).get("STATUS", ""))
        healthz = None
        if metrics:
            with urllib.request.urlopen("http://%s/healthz" % metrics.group(1), timeout=5) as r:
                healthz = r.status
        if not check(ready is not None, "READY=1 arrives"):
            print(open(log_path).read())
            return
        check(socket_up, "the gRPC Unix socket accepts connections when READY=1 arrives")
        check(healthz == 200, "the metrics listener (in STATUS=) answers /healthz when READY=1 "
              "arrives (STATUS=%r)" % ready.get("STATUS"))
        check(ready.get("MAINPID") == str(proc.pid), "READY=1 carries MAINPID=%d (got %r)"
              % (proc.pid, ready.get("MAINPID")))
        before = [m for _, m in notes.messages[:-1]]
        check(not any("READY" in m or "WATCHDOG" in m for m in before),
              "no READY=1 or WATCHDOG=1 before the listeners are up (%r)" % before)
        rc, out = kvtierctl(sock, "status")
        check(rc == 0, "kvtierctl status answers after READY=1 (%s)" % out)

        got = notes.drain(1.5)
        pings = [m for m in got if m.get("WATCHDOG") == "1"]
        check(len(pings) >= 5, "WATCHDOG=1 keeps arriving (%d in 1.5 s, every 100 ms expected)"
              % len(pings))

        proc.send_signal(signal.SIGHUP)
        reloading = notes.wait_for("RELOADING", "1", 10)
        check(reloading is not None and "MONOTONIC_USEC" in reloading,
              "SIGHUP gives RELOADING=1 with MONOTONIC_USEC")
        check(notes.wait_for("READY", "1", 10) is not None, "READY=1 again after the reload")
        got = notes.drain(0.5)
        check(any(m.get("WATCHDOG") == "1" for m in got), "WATCHDOG=1 continues after the reload")

        stop(proc, notes, "notify")
        check(not os.path.exists(sock), "kvtierd removes the socket it bound itself")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        nsock.close()
        if FAILURES:
            print("--- kvtierd log ---\n" + open(log_path).read())


def test_socket_activation(tmp):
    print("== socket activation", flush=True)
    name = "kvtier-sd-notify-test-%d-%d" % (os.getpid(), time.monotonic_ns())
    nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    nsock.bind("\0" + name)
    sock = os.path.join(tmp, "activated.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock)
    listener.listen(64)
    # A client that connects before kvtierd runs waits in the backlog, as during a restart.
    early = subprocess.Popen([KVTIERCTL, "--socket=" + sock, "--timeout=60", "status"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.3)
    log_path = os.path.join(tmp, "kvtierd-activated.log")
    lfd = listener.fileno()
    # LISTEN_PID must be the daemon's pid: the shell sets it to its own and execs kvtierd.
    argv = ["/bin/sh", "-c", 'LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"'] + \
        daemon_args(tmp, sock)
    env = clean_env(NOTIFY_SOCKET="@" + name, WATCHDOG_USEC="200000", WATCHDOG_PID="1",
                    LISTEN_FDS="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stderr=log, env=env, close_fds=False,
                                preexec_fn=lambda: os.dup2(lfd, 3))
    notes = Notifications(nsock, proc, log_path)
    try:
        ready = notes.wait_for("READY", "1", 60)
        if not check(ready is not None, "READY=1 arrives on the abstract notify socket"):
            return
        check("socket-activated" in ready.get("STATUS", ""),
              "STATUS says the socket is socket-activated (%r)" % ready.get("STATUS"))
        for command in (["status"], ["stats", "--json", "--namespaces", "--engines"], ["drain"],
                        ["drain", "--cancel"], ["verify"]):
            rc, out = kvtierctl(sock, *command)
            check(rc == 0, "kvtierctl %s through the inherited socket (%s)"
                  % (" ".join(command), out))
        try:
            early_out, _ = early.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            early.kill()
            early_out, _ = early.communicate()
        check(early.returncode == 0, "a client queued before kvtierd started is served (%s)"
              % (early_out.strip().splitlines() or [""])[0])
        got = notes.drain(1.0)
        check(not any("WATCHDOG" in m for m in got),
              "no WATCHDOG=1 when WATCHDOG_PID names another process (%r)" % got)
        # Connections the accept loop handed to gRPC must not hold up the stop: one idle after
        # the HTTP/2 preface, one that never said anything.
        idle = []
        for preface in (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]), b""):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(sock)
            c.sendall(preface)
            idle.append(c)
        time.sleep(0.3)
        started = time.monotonic()
        stop(proc, notes, "activated")
        check(time.monotonic() - started < 20, "idle connections do not delay the stop (%.1f s)"
              % (time.monotonic() - started))
        for c in idle:
            c.settimeout(5)
            try:
                while c.recv(4096):
                    pass
                closed = True
            except OSError:
                closed = False
            check(closed, "kvtierd closed a connection it had accepted when it stopped")
            c.close()
        check(os.path.exists(sock), "kvtierd leaves the activated socket file to its owner")
        check(connects(sock), "the activated socket still queues clients after kvtierd stops")
        log = open(log_path).read()
        check("socket-activated" in log and "Address already in use" not in log,
              "kvtierd serves the inherited socket without binding one itself")
    finally:
        for p in (proc, early):
            if p.poll() is None:
                p.kill()
                p.wait()
        nsock.close()
        listener.close()
        if FAILURES:
            print("--- kvtierd log ---\n" + open(log_path).read())


def main():
    tmp = tempfile.mkdtemp(prefix="kvtier-sd-")
    try:
        test_notify(tmp)
        test_socket_activation(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
