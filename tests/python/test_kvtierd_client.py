#!/usr/bin/python3
"""An independent Python client of a real kvtierd process.

Generates the kvtier.v1 stubs from the .proto files at test time (grpc_tools.protoc into a
temporary directory), starts kvtierd on a temporary state directory and Unix socket with small
tiers (through daemon_fixture.py, shared with test_client.py and test_kvtierctl.py), registers
an engine whose host pool is a shared-memory file written by this script, and drives Offload /
Lookup / Onboard with a layout written out by hand (no kvtier code is shared with the daemon):
  - CODEC_RAW: the onboarded pages must equal the offloaded pages byte for byte;
  - CODEC_NVFP4: the onboard succeeds and fills the page (lossy: values are only roughly equal);
  - an out-of-range page index is ITEM_CODE_INVALID_ARGUMENT;
  - GET /metrics passes `promtool check metrics` (kvtier_build_info and the process_* metrics
    included);
  - SIGTERM stops the daemon with exit status 0.

Usage: test_kvtierd_client.py --kvtierd PATH --proto-root DIR [unittest options]
  (or the environment variables KVTIERD_PATH and KVTIER_PROTO_ROOT).
Needs Debian's python3-grpcio, python3-grpc-tools and prometheus (for /usr/bin/promtool).
"""

import argparse
import glob
import importlib
import mmap
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import time
import unittest
import urllib.request

import daemon_fixture

KVTIERD = os.environ.get("KVTIERD_PATH", "")
PROTO_ROOT = os.environ.get("KVTIER_PROTO_ROOT", "")

# The test layout: 2 layers of GQA attention, 2 KV heads of 64 dims, 16 tokens per page, BF16.
# Buffers k.0, v.0, k.1, v.1 lie end to end in one pool "kv": 4 x 4 KiB = 16 KiB per page.
TOKENS = 16
HEADS = 2
HEAD_DIM = 64
LAYERS = 2
BF16_BYTES = 2
BUFFER_BYTES = HEADS * TOKENS * HEAD_DIM * BF16_BYTES
PAGE_BYTES = 2 * LAYERS * BUFFER_BYTES
SLOTS = 32
PAGES = 8  # pages offloaded per round

RPC_TIMEOUT = 20.0


def free_port():
    """A free TCP port on 127.0.0.1 (bound and released; good enough for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def block_hash(chain, i):
    """A 32-byte test block hash (the same shape as tests/integration/daemon_fixture.h's Hash)."""
    return struct.pack("<QQ", chain, i) + bytes(15) + b"\x5a"


def bf16(value):
    """The BF16 bytes (little-endian) of a float: the upper 2 bytes of its float32, truncated."""
    return struct.pack("<f", value)[2:4]


def bf16_values(data):
    """The floats of little-endian BF16 bytes."""
    return [struct.unpack("<f", b"\x00\x00" + data[i:i + 2])[0] for i in range(0, len(data), 2)]


def generate_stubs(proto_root, out_dir):
    """Runs grpc_tools.protoc over proto_root/kvtier/v1/*.proto into out_dir; returns the modules."""
    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    if not os.path.exists(os.path.join(include, "google", "protobuf", "duration.proto")):
        raise RuntimeError(f"grpc_tools has no bundled google/protobuf/*.proto under {include}")
    protos = sorted(glob.glob(os.path.join(proto_root, "kvtier", "v1", "*.proto")))
    if not protos:
        raise RuntimeError(f"no .proto files under {proto_root}/kvtier/v1")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_root}", f"-I{include}",
           f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"] + protos
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"protoc failed ({run.returncode}): {' '.join(cmd)}\n{run.stderr}")
    # Regular packages, first on the path: a namespace package would lose to an installed `kvtier`
    # module (the libkvtier Python module) anywhere on sys.path.
    for package in ("kvtier", os.path.join("kvtier", "v1")):
        open(os.path.join(out_dir, package, "__init__.py"), "a").close()
    sys.path.insert(0, out_dir)
    common = importlib.import_module("kvtier.v1.common_pb2")
    layout = importlib.import_module("kvtier.v1.layout_pb2")
    service = importlib.import_module("kvtier.v1.service_pb2_grpc")
    return common, layout, service


class HostPool:
    """An engine's host pool: a shared-memory file of SLOTS pages, mmapped MAP_SHARED."""

    def __init__(self, path, slots=SLOTS):
        self.path = path
        self.slots = slots
        self.size = slots * PAGE_BYTES
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, self.size)
            self.map = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED,
                                 prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def write(self, page, data):
        assert len(data) == PAGE_BYTES
        self.map[page * PAGE_BYTES:(page + 1) * PAGE_BYTES] = data

    def read(self, page):
        return bytes(self.map[page * PAGE_BYTES:(page + 1) * PAGE_BYTES])

    def close(self):
        self.map.close()


class KvtierdClientTest(daemon_fixture.DaemonTestCase):
    """One daemon for the class; the tests run in name order and the last one stops it."""

    @classmethod
    def setUpClass(cls):
        cls.make_daemon_dir("kvtier-py-")
        cls.channel = None
        try:
            cls.common, cls.layout_pb2, cls.service_grpc = generate_stubs(
                PROTO_ROOT, os.path.join(cls.dir, "stubs"))
            # The messages of every file are reachable from the generated *_pb2 modules.
            cls.pb = {name: importlib.import_module(f"kvtier.v1.{name}_pb2")
                      for name in ("common", "layout", "pool", "session", "cache", "events")}
            cls.start_and_connect()
        except BaseException:
            cls.cleanup(keep=True)
            raise

    @classmethod
    def start_and_connect(cls):
        """Starts the daemon, metrics on a free port, and waits until it answers Hello."""
        import grpc

        cls.metrics_port = free_port()
        cls.start_daemon(KVTIERD, ["--set=host.capacity=64MiB",
                                   "--set=host.chunk=4MiB",
                                   "--set=host.pin=none",
                                   "--set=disk.capacity=64MiB",
                                   "--set=disk.chunk=4MiB",
                                   f"--set=pools.allowed_dirs=[{cls.dir}]",
                                   f"--set=metrics.listen=127.0.0.1:{cls.metrics_port}",
                                   "--set=server.workers=4"],
                         wait_for_socket=False)
        cls.channel = grpc.insecure_channel("unix:" + cls.socket)
        cls.stub = cls.service_grpc.KvTierStub(cls.channel)
        session = cls.pb["session"]
        deadline = time.monotonic() + 20
        last = None
        while time.monotonic() < deadline:
            cls.check_daemon_running()
            try:
                cls.hello = cls.stub.Hello(session.HelloRequest(client_name="python-test"),
                                           timeout=0.5, wait_for_ready=True)
                return
            except grpc.RpcError as e:
                last = e
                time.sleep(0.05)
        raise RuntimeError(f"kvtierd did not answer Hello within 20 s ({last}):\n"
                           + cls.daemon_log())

    @classmethod
    def cleanup(cls, keep):
        cls.kill_daemon()
        if cls.channel is not None:
            cls.channel.close()
        super().cleanup(keep)

    # --- requests written by hand -------------------------------------------------------------

    def layout_proto(self):
        lp = self.layout_pb2
        layout = lp.PageLayout(tokens_per_page=TOKENS)
        layout.pools.add(name="kv", slot_bytes=PAGE_BYTES)
        offset = 0
        for layer in range(LAYERS):
            for prefix, role in (("k", lp.BUFFER_ROLE_ATTENTION_K),
                                 ("v", lp.BUFFER_ROLE_ATTENTION_V)):
                layout.buffers.add(name=f"{prefix}.{layer}", layer=layer, role=role,
                                   dtype=lp.DTYPE_BF16, heads=HEADS, head_dim=HEAD_DIM, pool=0,
                                   offset_bytes=offset)
                offset += BUFFER_BYTES
        assert offset == PAGE_BYTES
        return layout  # fingerprint left 0: the server computes it

    def register(self, pool, codec, name):
        session = self.pb["session"]
        req = session.RegisterEngineRequest(engine_name=name, model="test-model",
                                            layout=self.layout_proto())
        req.codec.codec = codec
        reg = req.pools.add(name="kv", slots=pool.slots)
        reg.shared_memory.path = pool.path
        reg.shared_memory.size_bytes = pool.size
        resp = self.stub.RegisterEngine(req, timeout=RPC_TIMEOUT)
        self.assertTrue(resp.engine_id)
        self.assertEqual(len(resp.hash_root), 32)
        self.assertEqual(resp.hot_page_bytes, PAGE_BYTES)
        self.assertGreater(resp.cold_block_bytes, 0)
        self.assertNotEqual(resp.ns.layout_fingerprint, 0, "the server computes the fingerprint")
        self.assertEqual(resp.ns.codec.codec, codec)
        return resp

    def offload(self, engine, chain, first_page, pages):
        cache = self.pb["cache"]
        req = cache.OffloadRequest(engine_id=engine)
        for i in range(pages):
            req.items.add(block_hash=block_hash(chain, i), page_index=first_page + i)
        return self.stub.Offload(req, timeout=RPC_TIMEOUT)

    def lookup(self, engine, chain, blocks):
        cache = self.pb["cache"]
        req = cache.LookupRequest(engine_id=engine,
                                  block_hashes=[block_hash(chain, i) for i in range(blocks)])
        return self.stub.Lookup(req, timeout=RPC_TIMEOUT)

    def onboard(self, engine, chain, blocks, first_page):
        cache = self.pb["cache"]
        req = cache.OnboardRequest(engine_id=engine)
        for i in range(blocks):
            req.items.add(block_hash=block_hash(chain, i), page_index=first_page + i)
        return self.stub.Onboard(req, timeout=RPC_TIMEOUT)

    def offload_lookup_onboard(self, pool, engine, chain):
        """Offloads pages 0..PAGES-1, looks the chain up, onboards it into pages 16..; checks codes."""
        c = self.common
        off = self.offload(engine, chain, 0, PAGES)
        self.assertEqual(len(off.results), PAGES)
        for i, r in enumerate(off.results):
            self.assertEqual(r.code, c.ITEM_CODE_OK, f"offload page {i}: {r.message}")
            self.assertEqual(r.tier, c.TIER_HOST, f"offload page {i}")
        self.assertEqual(off.stored_pages, PAGES)
        self.assertEqual(off.hot_bytes_read, PAGES * PAGE_BYTES)

        look = self.lookup(engine, chain, PAGES + 2)  # two more hashes that miss
        self.assertEqual(look.hit_pages, PAGES)
        self.assertEqual(list(look.tiers), [c.TIER_HOST] * PAGES)

        for i in range(PAGES):
            self.assertEqual(pool.read(16 + i), bytes(PAGE_BYTES), "destination not zero")
        on = self.onboard(engine, chain, PAGES, 16)
        self.assertEqual(len(on.results), PAGES)
        for i, r in enumerate(on.results):
            self.assertEqual(r.code, c.ITEM_CODE_OK, f"onboard page {i}: {r.message}")
            self.assertEqual(r.tier, c.TIER_HOST, f"onboard page {i}")
        self.assertEqual(on.onboarded_pages, PAGES)
        self.assertEqual(on.hot_bytes_written, PAGES * PAGE_BYTES)

    # --- the tests ----------------------------------------------------------------------------

    def test_1_hello(self):
        self.assertGreaterEqual(self.hello.api_version, 1)
        self.assertTrue(self.hello.server_version)
        self.assertFalse(self.hello.draining)
        self.assertIn(self.common.TIER_HOST, list(self.hello.capabilities.tiers))

    def test_2_raw_codec_round_trip_is_exact(self):
        lp = self.layout_pb2
        pool = HostPool(os.path.join(self.dir, "pool-raw"))
        self.addCleanup(pool.close)
        rng = random.Random(1)
        pages = [rng.randbytes(PAGE_BYTES) for _ in range(PAGES)]
        for i, data in enumerate(pages):
            pool.write(i, data)
        reg = self.register(pool, lp.CODEC_RAW, "python-raw")
        self.offload_lookup_onboard(pool, reg.engine_id, chain=1)
        for i, data in enumerate(pages):
            self.assertTrue(pool.read(16 + i) == data, f"raw page {i}: onboarded bytes differ")
        # The source pages are untouched.
        for i, data in enumerate(pages):
            self.assertTrue(pool.read(i) == data, f"raw page {i}: source page changed")

    def test_3_nvfp4_codec_round_trip_fills_the_page(self):
        lp = self.layout_pb2
        pool = HostPool(os.path.join(self.dir, "pool-nvfp4"))
        self.addCleanup(pool.close)
        rng = random.Random(2)
        values = []
        for i in range(PAGES):
            page = [rng.gauss(0.0, 1.0) for _ in range(PAGE_BYTES // BF16_BYTES)]
            values.append(bf16_values(b"".join(bf16(v) for v in page)))
            pool.write(i, b"".join(bf16(v) for v in page))
        reg = self.register(pool, lp.CODEC_NVFP4, "python-nvfp4")
        self.offload_lookup_onboard(pool, reg.engine_id, chain=2)
        for i in range(PAGES):
            got = pool.read(16 + i)
            self.assertEqual(len(got), PAGE_BYTES)
            self.assertNotEqual(got, bytes(PAGE_BYTES), f"nvfp4 page {i} is still zero")
            # Lossy, but close: the relative RMS error of 4-bit values with per-16 scales is ~0.1.
            decoded = bf16_values(got)
            err = sum((a - b) ** 2 for a, b in zip(values[i], decoded))
            ref = sum(a * a for a in values[i])
            self.assertLess((err / ref) ** 0.5, 0.2, f"nvfp4 page {i}: too far from the source")

    def test_4_out_of_range_page_index_is_invalid_argument(self):
        lp = self.layout_pb2
        c = self.common
        cache = self.pb["cache"]
        pool = HostPool(os.path.join(self.dir, "pool-range"), slots=4)
        self.addCleanup(pool.close)
        pool.write(0, os.urandom(PAGE_BYTES))
        reg = self.register(pool, lp.CODEC_RAW, "python-range")
        off = self.offload(reg.engine_id, 3, pool.slots, 1)  # page index == slots
        self.assertEqual(off.results[0].code, c.ITEM_CODE_INVALID_ARGUMENT, off.results[0].message)
        self.assertEqual(off.stored_pages, 0)
        self.assertEqual(self.lookup(reg.engine_id, 3, 1).hit_pages, 0)
        # Store one block, then onboard it into a page beyond the pool.
        self.assertEqual(self.offload(reg.engine_id, 3, 0, 1).stored_pages, 1)
        for page in (pool.slots, 1000):
            req = cache.OnboardRequest(engine_id=reg.engine_id)
            req.items.add(block_hash=block_hash(3, 0), page_index=page)
            on = self.stub.Onboard(req, timeout=RPC_TIMEOUT)
            self.assertEqual(on.results[0].code, c.ITEM_CODE_INVALID_ARGUMENT,
                             f"onboard into page {page}: {on.results[0].message}")
            self.assertEqual(on.onboarded_pages, 0)

    def test_4b_snapshot_stream_lists_the_offloaded_blocks(self):
        """WatchEvents from a snapshot: every block tests 2 and 3 stored, then SnapshotComplete."""
        ev = self.pb["events"]
        req = ev.WatchEventsRequest(start=ev.WATCH_START_SNAPSHOT, max_batch_events=4)
        stream = self.stub.WatchEvents(req, timeout=RPC_TIMEOUT)
        hashes, complete = set(), None
        for resp in stream:
            for e in resp.events:
                self.assertEqual(e.incarnation_id, self.hello.incarnation_id)
                if e.HasField("block_stored"):
                    self.assertEqual(e.block_stored.cause, ev.STORE_CAUSE_SNAPSHOT)
                    hashes.update(e.block_stored.block_hashes)
                if e.HasField("snapshot_complete"):
                    complete = e
            if complete is not None:
                break
        stream.cancel()
        self.assertIsNotNone(complete, "the stream ended without SnapshotComplete")
        self.assertEqual(complete.snapshot_complete.blocks, len(hashes))
        self.assertGreater(complete.sequence, 0)
        for chain in (1, 2):
            for i in range(PAGES):
                self.assertIn(block_hash(chain, i), hashes, f"block {i} of chain {chain}")

    def test_5_metrics_pass_promtool(self):
        promtool = shutil.which("promtool") or ("/usr/bin/promtool"
                                                if os.path.exists("/usr/bin/promtool") else None)
        if promtool is None:
            self.fail("promtool is not installed: install the Debian package `prometheus` "
                      "(apt-get install -y prometheus, or scripts/install-deps.sh)")
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            self.assertEqual(resp.status, 200)
            body = resp.read()
        path = os.path.join(self.dir, "metrics.txt")
        with open(path, "wb") as f:
            f.write(body)
        text = body.decode("utf-8")
        self.assertIn("kvtier_engines ", text)
        self.assertIn("kvtier_puts_total ", text)
        # The build and process families promtool checks with the rest (docs/METRICS.md).
        self.assertRegex(text, r'\nkvtier_build_info\{version="[^"]+",revision="[^"]+",'
                               r'cuda_archs="[^"]+",io_uring="[^"]+"\} 1\n')
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                     "process_start_time_seconds"):
            self.assertIn(f"\n# TYPE {name} ", text)
            self.assertRegex(text, f"\\n{name} [0-9.e+]+\\n")
        with open(path, "rb") as f:
            check = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True,
                                   text=True, timeout=30)
        problems = (check.stdout + check.stderr).strip()
        self.assertTrue(check.returncode == 0 and not problems,
                        f"promtool check metrics < {path} exited {check.returncode}:\n{problems}")

    def test_6_sigterm_stops_with_status_0(self):
        self.assert_sigterm_stops_daemon()


def main():
    global KVTIERD, PROTO_ROOT
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kvtierd", default=KVTIERD, help="the kvtierd binary (KVTIERD_PATH)")
    parser.add_argument("--proto-root", default=PROTO_ROOT,
                        help="the directory holding kvtier/v1/*.proto (KVTIER_PROTO_ROOT)")
    args, rest = parser.parse_known_args()
    if not args.kvtierd or not os.access(args.kvtierd, os.X_OK):
        parser.error(f"--kvtierd: not an executable: {args.kvtierd!r}")
    if not os.path.isfile(os.path.join(args.proto_root, "kvtier", "v1", "service.proto")):
        parser.error(f"--proto-root: no kvtier/v1/service.proto under {args.proto_root!r}")
    KVTIERD, PROTO_ROOT = os.path.abspath(args.kvtierd), os.path.abspath(args.proto_root)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
