#!/usr/bin/python3
"""Every kvtierctl subcommand against a real kvtierd, human and --json outputs, and bad arguments.

Starts kvtierd on a temporary state directory and Unix socket with a host and a disk tier (through
daemon_fixture.py, shared with test_client.py and test_kvtierd_client.py), puts blocks in it
through the `kvtier` module (a raw engine on a SharedMemoryPool, pages of known tokens hashed with
BlockHasher), then runs the kvtierctl binary:
  - help, --help of every command, and usage errors (exit status 2 with a usage line on stderr);
    a daemon that is not there is exit status 1 naming the socket;
  - status, stats (per-tier and per-namespace figures that follow the engine's offloads, onboards
    and misses), namespaces, lookup (hashes, a hash file, a token file hashed like the engine),
    watch (a live event and a snapshot), evict (by blocks, bytes and hashes), verify (clean, then
    a corrupted disk file: exit status 3, the bad blocks listed, kept with --report-only and
    removed without it), drain and drain --cancel (offloads refused in between), clear,
    config default and config validate (valid, invalid with every error listed, --set, a
    directory or FIFO refused); input files that are FIFOs or directories refused at once; drain
    --flush-to-disk copies the host tier to disk, keeping it and counting no eviction;
  - SIGTERM stops the daemon with status 0.

Usage: test_kvtierctl.py --kvtierd PATH --kvtierctl PATH [unittest options], with the module's
directory on PYTHONPATH (ctest sets them). Needs python3-numpy.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import unittest

import numpy as np

import daemon_fixture
import kvtier

KVTIERD = ""
KVTIERCTL = ""

TOKENS = 16  # tokens per page
SLOTS = 64
PAGES = 8
RPC_TIMEOUT = 20.0
COMMANDS = ["status", "stats", "namespaces", "lookup", "evict", "clear", "verify", "drain",
            "watch", "config validate", "config default"]


class KvtierctlTest(daemon_fixture.DaemonTestCase):
    """One daemon and one raw engine for the class; tests run in name order."""

    @classmethod
    def setUpClass(cls):
        cls.make_daemon_dir("kvtier-ctl-")
        cls.client = None
        try:
            cls.start_daemon(KVTIERD, ["--set=host.capacity=16MiB",
                                       "--set=host.chunk=4MiB",
                                       "--set=host.pin=none",
                                       "--set=disk.capacity=16MiB",
                                       "--set=disk.chunk=4MiB",
                                       f"--set=pools.allowed_dirs=[{cls.dir}]",
                                       '--set=metrics.listen=""',
                                       "--set=server.workers=4"])
            cls.client = kvtier.Client.connect(socket=cls.socket, client_name="kvtierctl-test",
                                               timeout=RPC_TIMEOUT)
            cls.layout = kvtier.PageLayout.gqa(num_layers=2, kv_heads=2, head_dim=64,
                                               tokens_per_page=TOKENS)
            cls.page_bytes = cls.layout.hot_page_bytes
            cls.pool = kvtier.SharedMemoryPool(os.path.join(cls.dir, "raw.kv"), "kv", SLOTS,
                                               cls.page_bytes)
            cls.pages = cls.pool.array().reshape(SLOTS, cls.page_bytes)
            rng = np.random.default_rng(7)
            cls.pages[:] = rng.integers(0, 256, size=(SLOTS, cls.page_bytes), dtype=np.uint8)
            cls.engine = cls.client.register_engine("ctl-model", cls.layout, [cls.pool],
                                                    codec="raw", engine_name="ctl-engine")
            cls.ns = "%016x" % cls.engine.namespace_id
            cls.hasher = kvtier.BlockHasher(cls.engine.hash_root, TOKENS)
            # A prompt of 10 full pages and 5 more tokens; its first PAGES pages are offloaded.
            cls.tokens = rng.integers(0, 150000, size=10 * TOKENS + 5, dtype=np.uint32)
            cls.hashes = cls.hasher.hash(cls.tokens)
            stored = cls.client.offload(cls.engine, cls.hashes[:PAGES], list(range(PAGES)))
            assert stored.stored_pages == PAGES, stored.stored_pages
            cls.token_file = os.path.join(cls.dir, "tokens.txt")
            with open(cls.token_file, "w") as f:
                f.write(", ".join(str(int(t)) for t in cls.tokens[:80]) + "\n")
                f.write(" ".join(str(int(t)) for t in cls.tokens[80:]) + "\n")
        except BaseException:
            cls.cleanup(keep=True)
            raise

    @classmethod
    def cleanup(cls, keep):
        if cls.client is not None:
            cls.client.close()
            cls.client = None
        super().cleanup(keep)

    # --- helpers ------------------------------------------------------------------------------

    def ctl(self, *args, rc=0, socket=None):
        """Runs kvtierctl against the daemon; checks its exit status; returns (stdout, stderr)."""
        cmd = [KVTIERCTL, f"--socket={socket or self.socket}", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, rc,
                         f"{' '.join(cmd)} exited {done.returncode}, expected {rc}\n"
                         f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")
        return done.stdout, done.stderr

    def ctl_json(self, *args, rc=0):
        out, _ = self.ctl(*args, "--json", rc=rc)
        return json.loads(out)

    def namespace_stats(self):
        stats = self.ctl_json("stats", f"--namespace={self.ns}")
        self.assertEqual(len(stats["namespaces"]), 1)
        return stats["namespaces"][0]

    @staticmethod
    def tier(entries, name):
        for entry in entries:
            if entry["tier"] == name:
                return entry
        raise AssertionError(f"no {name} in {entries}")

    # --- the tests ----------------------------------------------------------------------------

    def test_01_help_and_usage_errors(self):
        out, _ = self.ctl("help")
        for command in COMMANDS:
            self.assertIn(command, out)
        for command in COMMANDS:
            out, _ = self.ctl(*command.split(), "--help")
            self.assertIn(f"usage: kvtierctl [connection flags] {command}", out)
            self.assertIn("exit status:", out)
            out2, _ = self.ctl("help", *command.split())
            self.assertEqual(out, out2)
        bad = [
            (["frobnicate"], "unknown command 'frobnicate'"),
            ([], "no command"),
            (["config"], "config needs a subcommand"),
            (["stats", "--bogus"], "unknown flag --bogus for stats"),
            (["stats", "--namespace"], "--namespace needs a value"),
            (["stats", "--namespace=xyz"], "--namespace takes a hexadecimal id"),
            (["stats", "--json=1"], "--json takes no value"),
            (["status", "extra"], "unexpected argument 'extra'"),
            (["status", "--timeout=-1"], "--timeout needs a positive number"),
            (["evict", "--tier=host", "--blocks=1"], "evict needs --namespace=HEX"),
            (["evict", "--all", "--tier=host"], "evict needs one of --bytes, --blocks or --hashes"),
            (["evict", "--all", "--tier=cold", "--blocks=1"], "--tier is one of gpu, host, disk"),
            (["evict", "--all", "--blocks=0"], "--blocks needs a positive integer"),
            (["evict", "--all", "--bytes=12XB"], "--bytes"),
            (["evict", "--all", "--hashes=abcd"], "--hashes evicts blocks of one namespace"),
            (["clear"], "clear needs --namespace=HEX"),
            (["clear", "--all", "--namespace=1"], "give one of"),
            (["verify", "--tier=gpu"], "--tier is one of host, disk"),
            (["verify", "--max-blocks=x"], "--max-blocks needs a positive integer"),
            (["drain", "--cancel", "--flush-to-disk"], "exclude each other"),
            (["watch", "--from=yesterday"], "--from is now, snapshot or an event sequence"),
            (["watch", "--duration=0"], "--duration needs a positive number"),
            (["lookup", "00ff"], "lookup needs --namespace=HEX"),
            ([f"lookup", f"--namespace={self.ns}"], "lookup needs one of"),
            (["lookup", f"--namespace={self.ns}", "--tokens=x"], "--tokens and --page-tokens"),
            (["lookup", f"--namespace={self.ns}", "zz"], "a block hash is 1 to 32 bytes in hex"),
            (["config", "validate"], "config validate needs one FILE"),
        ]
        for args, message in bad:
            _, err = self.ctl(*args, rc=2)
            self.assertIn(message, err, args)
            self.assertTrue("usage: kvtierctl" in err or "kvtierctl help" in err, (args, err))
        # No daemon on the socket: exit status 1, naming it.
        missing = os.path.join(self.dir, "nobody.sock")
        _, err = self.ctl("status", "--timeout=2", rc=1, socket=missing)
        self.assertIn("is kvtierd running and listening on unix:" + missing, err)

    def test_01b_values_after_a_space(self):
        # Every flag takes its value as --flag VALUE as well as --flag=VALUE, before or after the
        # command.
        runs = [
            [KVTIERCTL, "--socket", self.socket, "status"],
            [KVTIERCTL, "status", "--socket", self.socket, "--timeout", "30"],
            [KVTIERCTL, "--socket", self.socket, "stats", "--namespace", self.ns, "--json"],
        ]
        for cmd in runs:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 0, f"{cmd}: {done.stderr}")
            if "--json" in cmd:
                self.assertEqual(len(json.loads(done.stdout)["namespaces"]), 1)
            else:
                self.assertIn("kvtierd 0.1.0 on ", done.stdout)
        _, err = self.ctl("status", "--timeout", rc=2)
        self.assertIn("--timeout needs a value", err)
        _, err = self.ctl("status", "--socket", self.socket, rc=2)  # ctl() passes one already
        self.assertIn("--socket given more than once", err)

    def test_02_status(self):
        out, _ = self.ctl("status")
        self.assertIn("kvtierd 0.1.0 on ", out)
        self.assertIn("serving", out)
        self.assertIn("1 engines, 1 namespaces", out)
        self.assertIn("(ctl-engine) namespace " + self.ns, out)
        self.assertRegex(out, r"\nhost +16\.0 MiB")
        status = self.ctl_json("status")
        self.assertEqual(status["hello"]["server_version"], "0.1.0")
        self.assertEqual(status["hello"]["incarnation_id"], status["stats"]["incarnation_id"])
        self.assertEqual(status["stats"]["registered_engines"], 1)
        self.assertEqual(status["stats"]["engines"][0]["engine_name"], "ctl-engine")
        self.assertEqual([t["tier"] for t in status["stats"]["tiers"]], ["TIER_HOST", "TIER_DISK"])

    def test_03_stats_follow_the_engine(self):
        before = self.namespace_stats()
        self.assertEqual(self.tier(before["tiers"], "TIER_HOST")["blocks"], PAGES)
        self.assertEqual(before["ns"]["model"], "ctl-model")
        self.assertEqual(before["ns"]["codec"]["codec"], "CODEC_RAW")
        self.assertEqual(before["engines"], 1)
        self.assertEqual(len(before["hash_root"]), 64)
        self.assertEqual(bytes.fromhex(before["hash_root"]), self.engine.hash_root)
        # 3 pages onboarded, then 2 onboards of a hash the cache does not hold (an onboard stops
        # at its first miss).
        on = self.client.onboard(self.engine, self.hashes[:3], [20, 21, 22])
        self.assertEqual(on.onboarded_pages, 3)
        for missing in self.hashes[PAGES:PAGES + 2]:
            self.assertEqual(self.client.onboard(self.engine, [missing], [23]).onboarded_pages, 0)
        after = self.namespace_stats()
        self.assertEqual(after["hits"] - before["hits"], 3)
        self.assertEqual(after["misses"] - before["misses"], 2)
        self.assertAlmostEqual(after["hit_rate"], after["hits"] / (after["hits"] + after["misses"]))
        self.assertIn("last_access", after)
        stats = self.ctl_json("stats")
        host = self.tier(stats["tiers"], "TIER_HOST")
        self.assertGreaterEqual(host["hits"], 3)
        self.assertGreaterEqual(host["used_bytes"], PAGES * self.page_bytes)
        self.assertEqual(stats["hot_bytes_offloaded"], PAGES * self.page_bytes)
        self.assertGreater(stats["cold_bytes_offloaded"], 0)
        self.assertAlmostEqual(stats["offload_compression_ratio"],
                               stats["hot_bytes_offloaded"] / stats["cold_bytes_offloaded"])
        self.assertNotIn("namespaces", [k for k, v in stats.items() if v])  # none unless asked
        out, _ = self.ctl("stats", f"--namespace={self.ns}")
        self.assertRegex(out, r"tier +capacity +used +used% +blocks +pinned +hits +hit rate")
        self.assertIn(f"namespace {self.ns}: tenant default, model ctl-model, codec raw", out)
        self.assertIn(f"reads {after['hits']} hits, {after['misses']} misses", out)
        self.assertRegex(out, rf"\n  host +{PAGES} ")
        self.assertIn("offloaded  ", out)
        out, _ = self.ctl("stats", "--model=ctl-model", "--engines")
        self.assertIn(f"namespace {self.ns}", out)
        self.assertIn("engine ", out)
        _, err = self.ctl("stats", "--model=no-such-model", rc=1)
        self.assertIn("no namespace matches", err)
        _, err = self.ctl("stats", "--namespace=1234", rc=1)
        self.assertIn("namespace 0000000000001234 is unknown", err)

    def test_04_namespaces(self):
        out, _ = self.ctl("namespaces")
        self.assertRegex(out.splitlines()[0], r"namespace +tenant +model +partition +codec")
        self.assertRegex(out, rf"{self.ns} +default +ctl-model +- +raw +{PAGES} ")
        listed = self.ctl_json("namespaces")["namespaces"]
        self.assertEqual([n["namespace_id"] for n in listed], [self.ns])
        self.assertEqual(self.tier(listed[0]["tiers"], "TIER_HOST")["blocks"], PAGES)
        self.assertEqual(self.ctl_json("namespaces", "--tenant=nobody")["namespaces"], [])

    def test_05_lookup(self):
        # The token file: 10 full pages hashed as the engine hashes them; 8 are cached.
        out, _ = self.ctl("lookup", f"--namespace={self.ns}", f"--tokens={self.token_file}",
                          f"--page-tokens={TOKENS}")
        self.assertIn(f"8 of 10 pages cached (a prefix of {8 * TOKENS} of {len(self.tokens)} "
                      "tokens): gpu 0, host 8, disk 0", out)
        self.assertIn(self.hashes[8].hex() + "  miss", out)
        found = self.ctl_json("lookup", f"--namespace={self.ns}", f"--tokens={self.token_file}",
                              f"--page-tokens={TOKENS}")
        self.assertEqual((found["pages"], found["hit_pages"], found["hit_tokens"]),
                         (10, 8, 8 * TOKENS))
        self.assertEqual([b["hash"] for b in found["blocks"]], [h.hex() for h in self.hashes])
        self.assertEqual([b["tier"] for b in found["blocks"]], ["TIER_HOST"] * 8 + ["MISS"] * 2)
        # Hashes as arguments, and a hash file: the prefix stops at the first miss.
        found = self.ctl_json("lookup", f"--namespace={self.ns}", self.hashes[0].hex(),
                              self.hashes[1].hex(), "ab" * 32, self.hashes[2].hex())
        self.assertEqual(found["hit_pages"], 2)
        hash_file = os.path.join(self.dir, "hashes.txt")
        with open(hash_file, "w") as f:
            f.write("\n".join(h.hex() for h in self.hashes[:5]) + "\n")
        out, _ = self.ctl("lookup", f"--namespace={self.ns}", f"--hash-file={hash_file}")
        self.assertIn("5 of 5 pages cached: gpu 0, host 5, disk 0", out)
        # Another page size hashes other blocks: nothing found.
        found = self.ctl_json("lookup", f"--namespace={self.ns}", f"--tokens={self.token_file}",
                              "--page-tokens=8")
        self.assertEqual(found["hit_pages"], 0)
        bad_tokens = os.path.join(self.dir, "bad-tokens.txt")
        with open(bad_tokens, "w") as f:
            f.write("1 2 three\n")
        _, err = self.ctl("lookup", f"--namespace={self.ns}", f"--tokens={bad_tokens}",
                          "--page-tokens=1", rc=1)
        self.assertIn("'three' is not a token id", err)
        # Input files that are not regular files are refused at once (a FIFO used to hang
        # kvtierctl until something wrote to it; ctl's 60 s timeout turns a hang into a failure).
        fifo = os.path.join(self.dir, "hashes.fifo")
        os.mkfifo(fifo)
        _, err = self.ctl("lookup", f"--namespace={self.ns}", f"--hash-file={fifo}", rc=1)
        self.assertIn(f"--hash-file file {fifo} is a FIFO (named pipe), not a regular file", err)
        _, err = self.ctl("lookup", f"--namespace={self.ns}", f"--tokens={fifo}",
                          f"--page-tokens={TOKENS}", rc=1)
        self.assertIn(f"--tokens file {fifo} is a FIFO (named pipe)", err)
        _, err = self.ctl("lookup", f"--namespace={self.ns}", f"--hash-file={self.dir}", rc=1)
        self.assertIn(f"{self.dir} is a directory, not a regular file", err)
        _, err = self.ctl("status", f"--token-file={fifo}", rc=1)
        self.assertIn(f"--token-file file {fifo} is a FIFO (named pipe)", err)
        os.unlink(fifo)

    def test_06_watch(self):
        cmd = [KVTIERCTL, f"--socket={self.socket}", "watch", "--json", "--count=1",
               f"--namespace={self.ns}", "--duration=30"]
        watcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # let the stream start before the offload it should report
        new = self.hasher.hash_after(self.hashes[9], self.tokens[:TOKENS])
        self.assertEqual(self.client.offload(self.engine, new, [30]).stored_pages, 1)
        out, err = watcher.communicate(timeout=30)
        self.assertEqual(watcher.returncode, 0, err)
        event = json.loads(out.splitlines()[0])
        self.assertEqual(event["namespace_id"], self.ns)
        self.assertEqual(event["block_stored"]["block_hashes"], [new[0].hex()])
        self.assertEqual(event["block_stored"]["cause"], "STORE_CAUSE_OFFLOAD")
        self.assertEqual(event["block_stored"]["engine_id"], self.engine.engine_id)
        out, _ = self.ctl("watch", "--from=snapshot", "--count=2")
        lines = out.splitlines()
        self.assertEqual(len(lines), 2)
        self.assertRegex(lines[0], rf"seq 0 ns {self.ns} stored \d+ blocks in host "
                                   r"\(STORE_CAUSE_SNAPSHOT\)")
        self.assertIn("snapshot complete", lines[1])
        # Ctrl-C ends a watch with status 0.
        watcher = subprocess.Popen([KVTIERCTL, f"--socket={self.socket}", "watch"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        watcher.send_signal(signal.SIGINT)
        watcher.communicate(timeout=10)
        self.assertEqual(watcher.returncode, 0)

    def test_07_evict(self):
        before = self.namespace_stats()
        out, _ = self.ctl("evict", f"--namespace={self.ns}", "--tier=host", "--blocks=2")
        self.assertIn("evicted 2 blocks", out)
        self.assertIn("from host: 2 demoted to a slower tier, 0 dropped", out)
        evicted = self.ctl_json("evict", "--all", "--tier=host", f"--bytes={self.page_bytes}")
        self.assertGreaterEqual(evicted["evicted_blocks"], 1)
        self.assertGreaterEqual(evicted["evicted_bytes"], self.page_bytes)
        self.assertEqual(evicted["demoted_blocks"], evicted["evicted_blocks"])
        # Wait until the demoted blocks have their disk copies and their host copies are freed
        # (two steps of the background thread: the disk count can rise before the host count
        # falls, so wait for both).
        moved = 2 + evicted["evicted_blocks"]
        host_wanted = self.tier(before["tiers"], "TIER_HOST")["blocks"] - moved
        deadline = time.monotonic() + 20
        while True:
            after = self.namespace_stats()
            host = self.tier(after["tiers"], "TIER_HOST")["blocks"]
            disk = self.tier(after["tiers"], "TIER_DISK")["blocks"]
            if (disk >= moved and host == host_wanted) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(host, host_wanted)
        self.assertGreaterEqual(disk, moved)
        # Exact hashes: one is dropped from the cache, an unknown one is reported.
        result = self.ctl_json("evict", f"--namespace={self.ns}", "--drop",
                               f"--hashes={self.hashes[7].hex()},{'cd' * 32}")
        self.assertEqual(result["evicted_blocks"], 1)
        self.assertEqual([r["code"] for r in result["results"]],
                         ["ITEM_CODE_OK", "ITEM_CODE_NOT_FOUND"])
        self.assertEqual(self.client.lookup(self.engine, self.hashes[7:8]).hit_pages, 0)

    def test_08_verify(self):
        out, err = self.ctl("verify")
        self.assertRegex(out, r"verified \d+ blocks \(.*\) in .*: 0 corrupt, 0 unreadable, "
                              r"0 removed")
        self.assertIn("verify: done", err)
        clean = self.ctl_json("verify", "--quiet")
        self.assertTrue(clean["complete"])
        self.assertEqual(clean["corrupt_blocks"] + clean["missing_blocks"], 0)
        disk_blocks = self.tier(self.namespace_stats()["tiers"], "TIER_DISK")["blocks"]
        self.assertGreater(disk_blocks, 0)
        host_only = self.ctl_json("verify", "--tier=host", "--quiet")
        self.assertEqual(host_only["checked_blocks"] + disk_blocks, clean["checked_blocks"])
        # Flip one byte in every 4 KiB of the disk file that holds data: every disk copy is bad.
        path = os.path.join(self.dir, "state", "disk", "kvtier-blocks.dat")
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            for off in range(0, len(data), 4096):
                if any(data[off:off + 4096]):
                    data[off + 100] ^= 0xFF
            f.seek(0)
            f.write(data)
        report = self.ctl_json("verify", "--tier=disk", "--report-only", "--quiet", rc=3)
        self.assertEqual(report["corrupt_blocks"], disk_blocks)
        self.assertEqual(report["removed_blocks"], 0)
        self.assertEqual({c["tier"] for c in report["corrupt"]}, {"TIER_DISK"})
        self.assertEqual(len(report["corrupt"]), disk_blocks)
        out, _ = self.ctl("verify", "--tier=disk", "--quiet", rc=3)
        self.assertIn(f"{disk_blocks} corrupt, 0 unreadable, {disk_blocks} removed", out)
        self.assertIn(f"  namespace {self.ns} block ", out)
        self.assertEqual(self.tier(self.namespace_stats()["tiers"], "TIER_DISK")["blocks"], 0)
        self.ctl("verify", "--quiet")  # clean again
        partial = self.ctl_json("verify", "--quiet", "--max-blocks=1")
        self.assertEqual(partial["checked_blocks"], 1)
        self.assertEqual(partial["stopped_by"], "max_blocks")

    def test_09_drain_and_cancel(self):
        out, _ = self.ctl("drain")
        self.assertRegex(out, r"drained in .*: \d+ in-flight operations completed, \d+ blocks "
                              r"written to disk, 1 engines still registered")
        self.assertIn("DRAINING", self.ctl("status")[0])
        with self.assertRaises(kvtier.Error) as refused:
            self.client.offload(self.engine, self.hasher.hash(self.tokens[:TOKENS] + 1), [31])
        self.assertEqual(refused.exception.code, "UNAVAILABLE")
        before = self.ctl_json("stats")["tiers"]
        flushed = self.ctl_json("drain", "--flush-to-disk")
        self.assertTrue(flushed["drained"])
        self.assertEqual(flushed["registered_engines"], 1)
        # The host tier is copied to disk, not moved: its blocks stay (an aborted upgrade still
        # reads from host memory), and no tier counts an eviction for the copies.
        after = self.ctl_json("stats")["tiers"]
        host_blocks = self.tier(before, "TIER_HOST")["blocks"]
        self.assertGreater(host_blocks, 0)
        self.assertEqual(self.tier(after, "TIER_HOST")["blocks"], host_blocks)
        self.assertGreaterEqual(self.tier(after, "TIER_DISK")["blocks"], host_blocks)
        for name in ("TIER_HOST", "TIER_DISK"):
            self.assertEqual(self.tier(after, name)["evicted_blocks"],
                             self.tier(before, name)["evicted_blocks"], name)
        self.assertEqual(flushed["flushed_blocks"],
                         self.tier(after, "TIER_DISK")["blocks"] -
                         self.tier(before, "TIER_DISK")["blocks"])
        found = self.ctl_json("lookup", f"--namespace={self.ns}", self.hashes[0].hex())
        self.assertEqual([b["tier"] for b in found["blocks"]], ["TIER_HOST"])
        out, _ = self.ctl("drain", "--cancel")
        self.assertIn("drain cancelled: accepting work again (1 engines registered)", out)
        self.assertTrue(self.ctl_json("stats")["draining"] is False)
        self.assertEqual(
            self.client.offload(self.engine, self.hasher.hash(self.tokens[:TOKENS] + 1),
                                [31]).stored_pages, 1)

    def test_10_clear(self):
        # A parked request (2 pages) and a pin: stats --engines reports them.
        self.assertEqual(self.client.park(self.engine, "tool-call-1", [40, 41]).parked_pages, 2)
        engines = self.ctl_json("stats", "--engines")["engines"]
        self.assertEqual(len(engines), 1)
        self.assertEqual(engines[0]["parked_requests"], 1)
        # kvtierd accepts Unix connections itself: gRPC names the peer by its fd, and the
        # daemon knows the connecting process (this one: the client library runs in it).
        self.assertTrue(engines[0]["peer"].startswith("fd:"), engines[0])
        self.assertEqual(engines[0]["pid"], os.getpid(), engines[0])
        self.assertEqual(self.namespace_stats()["parked_requests"], 1)
        held = self.namespace_stats()
        parked_pages = 2
        host_blocks = self.tier(held["tiers"], "TIER_HOST")["blocks"] - parked_pages
        self.assertGreater(host_blocks, 0)
        cleared = self.ctl_json("clear", f"--namespace={self.ns}", "--tier=host")
        self.assertEqual(cleared["cleared_namespaces"], 1)
        self.assertEqual(cleared["removed_blocks"], host_blocks)
        self.assertGreaterEqual(cleared["removed_bytes"], host_blocks * self.page_bytes)
        self.assertEqual(cleared["released_parked_requests"], 0)
        out, _ = self.ctl("clear", "--model=ctl-model")
        self.assertRegex(out, r"cleared 1 namespaces: [1-9]\d* blocks removed \([1-9].*\), 0 "
                              r"parked requests released")
        after = self.namespace_stats()
        self.assertEqual(sum(t["blocks"] for t in after["tiers"]), parked_pages,
                         "parked pages survive a clear without --include-parked")
        self.assertEqual(self.client.lookup(self.engine, self.hashes).hit_pages, 0)
        resumed = self.client.resume(self.engine, "tool-call-1", [42, 43], keep_parked=True)
        self.assertEqual(resumed.resumed_pages, 2)
        self.assertTrue(np.array_equal(self.pages[42:44], self.pages[40:42]))
        cleared = self.ctl_json("clear", f"--namespace={self.ns}", "--include-parked")
        self.assertEqual(cleared["released_parked_requests"], 1)
        self.assertEqual(sum(t["blocks"] for t in self.namespace_stats()["tiers"]), 0)
        with self.assertRaises(kvtier.Error) as gone:
            self.client.resume(self.engine, "tool-call-1", [42, 43])
        self.assertEqual(gone.exception.code, "NOT_FOUND")

    def test_11_config(self):
        out, _ = self.ctl("config", "default")
        self.assertIn("server:", out)
        self.assertIn("socket:", out)
        default = self.ctl_json("config", "default")
        self.assertIn("host", default)
        self.assertIn("capacity", default["host"])
        good = os.path.join(self.dir, "good.yaml")
        with open(good, "w") as f:
            f.write(out)  # the default is valid as it stands
        out, _ = self.ctl("config", "validate", good, "--set=host.capacity=2GiB")
        self.assertIn(f"{good} is valid", out)
        self.assertIn("host 2.0 GiB", out)
        self.assertNotIn("warning", out)
        checked = self.ctl_json("config", "validate", good)
        self.assertTrue(checked["valid"])
        self.assertIsNone(checked["host_capacity_bytes"], "auto")
        self.assertEqual(checked["warnings"], [])
        # Valid, but a disk tier of one chunk: a warning.
        out, _ = self.ctl("config", "validate", good, "--set=disk.capacity=256MiB")
        self.assertIn("warning: the disk tier holds 1 chunk(s)", out)
        checked = self.ctl_json("config", "validate", good, "--set=disk.capacity=256MiB")
        self.assertEqual(checked["disk_capacity_bytes"], 256 << 20)
        self.assertEqual(len(checked["warnings"]), 1)
        bad = os.path.join(self.dir, "bad.yaml")
        with open(bad, "w") as f:
            f.write("host:\n  capacity: lots\n")
        _, err = self.ctl("config", "validate", bad, rc=1)
        self.assertIn(f"{bad} is not valid", err)
        self.assertIn("host.capacity", err)
        checked = self.ctl_json("config", "validate", bad, rc=1)
        self.assertFalse(checked["valid"])
        self.assertIn("host.capacity", checked["error"])
        _, err = self.ctl("config", "validate", os.path.join(self.dir, "missing.yaml"), rc=1)
        self.assertIn("missing.yaml", err)
        _, err = self.ctl("config", "validate", good, "--set=no.such.field=1", rc=1)
        self.assertIn("no.such.field", err)
        # Every error of a run is reported, each on its own line, not only the first.
        worse = os.path.join(self.dir, "worse.yaml")
        with open(worse, "w") as f:
            f.write("host:\n  capacity: lots\n  colour: blue\nindex:\n  sync: sometimes\n")
        _, err = self.ctl("config", "validate", worse, "--set=host.pin=bogus", rc=1)
        self.assertIn(f"{worse} is not valid (4 errors):", err)
        for part in (f"config file {worse}: unknown field 'host.colour' (line 3)",
                     "field 'host.capacity': 'lots'",
                     "field 'index.sync': 'sometimes'", "field 'host.pin': 'bogus'"):
            self.assertIn("\n  " + part, err)
        checked = self.ctl_json("config", "validate", worse, "--set=host.pin=bogus", rc=1)
        self.assertEqual(len(checked["errors"]), 4, checked)
        # A directory (or a FIFO) is not a configuration file: exit status 1, at once.
        _, err = self.ctl("config", "validate", self.dir, rc=1)
        self.assertIn(f"config file {self.dir} is a directory, not a regular file", err)
        fifo = os.path.join(self.dir, "config.fifo")
        os.mkfifo(fifo)
        _, err = self.ctl("config", "validate", fifo, rc=1)
        self.assertIn(f"config file {fifo} is a FIFO (named pipe), not a regular file", err)
        os.unlink(fifo)

    def test_12_sigterm_stops_the_daemon(self):
        self.client.close()
        type(self).client = None
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=30), 0, self.daemon_log())


def main():
    global KVTIERD, KVTIERCTL
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvtierd", default=os.environ.get("KVTIERD_PATH", ""))
    parser.add_argument("--kvtierctl", default=os.environ.get("KVTIERCTL_PATH", ""))
    args, rest = parser.parse_known_args()
    if not args.kvtierd or not args.kvtierctl:
        parser.error("--kvtierd and --kvtierctl are required")
    KVTIERD, KVTIERCTL = args.kvtierd, args.kvtierctl
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
