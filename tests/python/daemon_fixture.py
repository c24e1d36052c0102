"""A real kvtierd for the Python tests in this directory (the Python side of
tests/integration/daemon_fixture.h).

DaemonTestCase is a unittest.TestCase base class with one kvtierd for the whole class:
  - make_daemon_dir(prefix) creates the temporary directory: the state directory (state/), the
    Unix socket (kvtier.sock) and the daemon's log (kvtierd.log, stdout and stderr) go in it;
  - start_daemon(kvtierd, settings) starts the binary with --state-dir and --socket followed by the
    test's own arguments, and waits up to 20 s for the socket (failing with the exit status if the
    daemon exits first, or 'made no socket within 20 s', each with the daemon's log);
  - cleanup(keep) kills a daemon still running and removes the directory, or, with keep (setUpClass
    failed, or any test of the class did), prints the daemon's log and keeps the files;
  - assert_sigterm_stops_daemon() checks that SIGTERM stops the daemon with status 0.
Subclasses close their own clients in an override of cleanup before calling it.

The tests import it as `import daemon_fixture`: python3 puts a script's own directory first on
sys.path, so this works from any working directory (ctest runs them from the build directory).
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

START_TIMEOUT = 20  # seconds for the daemon to make its socket
STOP_TIMEOUT = 20  # seconds for the daemon to exit after SIGTERM


class DaemonTestCase(unittest.TestCase):
    """One kvtierd for the class; the class's tests run in name order against it."""

    dir = None
    socket = None
    log_path = None
    proc = None
    log_file = None
    failed = False

    @classmethod
    def make_daemon_dir(cls, prefix):
        """Creates the temporary directory (prefix: tempfile.mkdtemp's) and names its files."""
        cls.dir = tempfile.mkdtemp(prefix=prefix)
        cls.failed = False
        cls.proc = None
        cls.log_file = None
        cls.socket = os.path.join(cls.dir, "kvtier.sock")
        cls.log_path = os.path.join(cls.dir, "kvtierd.log")

    @classmethod
    def start_daemon(cls, kvtierd, settings, wait_for_socket=True):
        """Starts `kvtierd --state-dir=DIR/state --socket=SOCKET *settings`, its output in the log.

        Waits until the socket exists unless wait_for_socket is False (the caller then waits its
        own way, calling check_daemon_running while it does)."""
        args = [kvtierd, f"--state-dir={cls.dir}/state", f"--socket={cls.socket}", *settings]
        cls.log_file = open(cls.log_path, "wb")
        cls.proc = subprocess.Popen(args, stdout=cls.log_file, stderr=subprocess.STDOUT)
        if not wait_for_socket:
            return
        deadline = time.monotonic() + START_TIMEOUT
        while not os.path.exists(cls.socket):
            cls.check_daemon_running()
            if time.monotonic() > deadline:
                raise RuntimeError(f"kvtierd made no socket within {START_TIMEOUT} s:\n"
                                   + cls.daemon_log())
            time.sleep(0.02)

    @classmethod
    def check_daemon_running(cls):
        """Raises RuntimeError with the exit status and the log if the daemon has exited."""
        if cls.proc.poll() is not None:
            raise RuntimeError(f"kvtierd exited with {cls.proc.returncode} at start:\n"
                               + cls.daemon_log())

    @classmethod
    def daemon_log(cls):
        try:
            with open(cls.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return "(no daemon log)"

    @classmethod
    def kill_daemon(cls):
        """Kills the daemon if it is still running and waits for it."""
        if cls.proc is not None and cls.proc.poll() is None:
            cls.proc.kill()
            cls.proc.wait()

    @classmethod
    def cleanup(cls, keep):
        """Kills the daemon; prints its log and keeps the files (keep), or removes them."""
        cls.kill_daemon()
        if cls.log_file is not None:
            cls.log_file.close()
        if keep:
            print(f"\n--- kvtierd log ({cls.log_path}) ---\n"
                  f"{cls.daemon_log()}--- end of kvtierd log; files kept in {cls.dir} ---",
                  file=sys.stderr)
        else:
            shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls.cleanup(keep=cls.failed)

    def run(self, result=None):
        result = super().run(result)
        if result is not None and not result.wasSuccessful():
            type(self).failed = True
        return result

    def assert_sigterm_stops_daemon(self):
        """Sends SIGTERM; the daemon must exit with status 0 within STOP_TIMEOUT seconds."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"kvtierd did not stop within {STOP_TIMEOUT} s of SIGTERM")
        self.assertEqual(code, 0, f"kvtierd exited with {code} after SIGTERM")
