#!/usr/bin/python3
"""The `kvtier` Python package's client (ctypes over libkvtier's C ABI) against a real kvtierd.

Starts kvtierd on a temporary state directory and Unix socket with small tiers (through
daemon_fixture.py, shared with test_kvtierd_client.py and test_kvtierctl.py), then, through the
module only:
  - connects and reads the server's Hello; the generated kvtier.v1 stubs work in the same
    process (Stats, the same daemon); connecting to a missing socket raises kvtier.Error
    UNAVAILABLE naming the socket;
  - builds layouts and block hashes (lists and numpy arrays hash alike; errors are ValueError /
    KeyError subclasses of kvtier.Error with the status code);
  - registers a raw engine on a SharedMemoryPool, fills pages through its numpy view, offloads,
    looks the BlockHasher hashes up and onboards them into other slots: the numpy rows are equal;
  - offloads with token ids: a ZeroMQ subscriber of the daemon's KV events (kv_events is on;
    python3-zmq and python3-msgpack) sees each page's tokens in its block's BlockStored event, a
    page without in one with none; too many tokens for a page raise InvalidRequestError naming
    the item, and nothing of that call is stored;
  - an nvfp4 engine onboards finite values close to the originals;
  - several *_async futures in flight at once complete with the right results, and an async
    error completes its future with the exception;
  - park / resume carry user_data and the pages; release reports unknown requests per item;
  - errors: an out-of-range page index is an item code, an unknown engine id raises with the
    server's message, a pool outside pools.allowed_dirs is INVALID_ARGUMENT naming it;
  - pin / unpin, the event stream (a snapshot from a callback thread), stats counters, the
    compression configuration, unregister and close; SIGTERM stops the daemon with status 0.

Usage: test_client.py --kvtierd PATH [unittest options] (or KVTIERD_PATH), with the module's
directory on PYTHONPATH (ctest sets both). Needs python3-numpy.
"""

import argparse
import concurrent.futures
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

import daemon_fixture
import kvtier

KVTIERD = os.environ.get("KVTIERD_PATH", "")

TOKENS = 16  # tokens per page
SLOTS = 64
PAGES = 8
RPC_TIMEOUT = 20.0


def tokens_for(seed, pages):
    """A token sequence of `pages` full pages plus 3 trailing tokens (which make no hash)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 150000, size=pages * TOKENS + 3, dtype=np.uint32)


def bf16_page(values):
    """BF16 bytes (truncated float32) of float32 `values`, as uint8."""
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)


def bf16_values(data):
    """float32 values of BF16 bytes."""
    return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


class ClientTest(daemon_fixture.DaemonTestCase):
    """One daemon and one raw engine for the class; tests run in name order, the last stops it."""

    @classmethod
    def setUpClass(cls):
        cls.make_daemon_dir("kvtier-pyclient-")
        cls.client = None
        try:
            cls.start_daemon(KVTIERD, ["--set=host.capacity=64MiB",
                                       "--set=host.chunk=4MiB",
                                       "--set=host.pin=none",
                                       "--set=disk.capacity=64MiB",
                                       "--set=disk.chunk=4MiB",
                                       f"--set=pools.allowed_dirs=[{cls.dir}]",
                                       '--set=metrics.listen=""',
                                       "--set=server.workers=4",
                                       "--set=kv_events.enabled=true",
                                       f'--set=kv_events.endpoint="{cls.kv_endpoint()}"'])
            cls.client = kvtier.Client.connect(socket=cls.socket, client_name="python-test",
                                               timeout=RPC_TIMEOUT)
            cls.layout = kvtier.PageLayout.gqa(num_layers=2, kv_heads=2, head_dim=64,
                                               tokens_per_page=TOKENS)
            cls.page_bytes = cls.layout.hot_page_bytes
            cls.pool = kvtier.SharedMemoryPool(os.path.join(cls.dir, "raw.kv"), "kv", SLOTS,
                                               cls.page_bytes)
            cls.pages = cls.pool.array().reshape(SLOTS, cls.page_bytes)
            cls.engine = cls.client.register_engine("py-raw-model", cls.layout, [cls.pool],
                                                    codec="raw", engine_name="python-raw")
            cls.hasher = kvtier.BlockHasher(cls.engine.hash_root, TOKENS)
        except BaseException:
            cls.cleanup(keep=True)
            raise

    @classmethod
    def kv_endpoint(cls):
        return f"ipc://{cls.dir}/kv-events.ipc"

    @classmethod
    def cleanup(cls, keep):
        if cls.client is not None:
            cls.client.close()
        super().cleanup(keep)

    def fill(self, first, count, seed):
        rng = np.random.default_rng(seed)
        self.pages[first:first + count] = rng.integers(0, 256, size=(count, self.page_bytes),
                                                       dtype=np.uint8)

    # --- the tests ----------------------------------------------------------------------------

    def test_01_connect_and_server_info(self):
        server = self.client.server
        self.assertGreaterEqual(server.api_version, 1)
        self.assertTrue(server.server_version)
        self.assertIn("raw", server.codecs)
        self.assertIn(kvtier.Tier.host, server.tiers)
        self.assertTrue(server.shared_memory_pools)
        self.assertFalse(self.client.hello().draining)
        self.assertEqual(self.client.hello().incarnation_id, server.incarnation_id)
        self.assertEqual(kvtier.__version__, "0.1.0")
        self.assertEqual(kvtier.library_version(), kvtier.__version__)
        # The daemon of the same build reports the same version in Hello.
        self.assertEqual(server.server_version, kvtier.library_version())
        self.assertEqual(len(self.engine.hash_root), kvtier.BLOCK_HASH_BYTES)
        self.assertEqual(self.engine.codec, "raw")
        self.assertEqual(self.engine.hot_page_bytes, self.page_bytes)
        self.assertTrue(self.engine.engine_id)
        # Pool files: owner and group read and write whatever the umask, nothing for others.
        self.assertEqual(os.stat(self.pool.path).st_mode & 0o777, 0o660)

    def test_01b_generated_stubs_beside_the_library(self):
        # A process that has loaded libkvtier.so (kvtier.Client above) also uses the generated
        # kvtier.v1 modules: the files import once, and the stub talks to the same daemon.
        try:
            import grpc
            from google.protobuf import descriptor_pool
            from kvtier.v1 import service_pb2, service_pb2_grpc, stats_pb2
        except ImportError as e:
            self.skipTest(f"kvtier.v1 needs grpcio and protobuf: {e}")
        self.assertEqual(descriptor_pool.Default().FindFileByName(
            "kvtier/v1/service.proto").services_by_name["KvTier"].full_name, "kvtier.v1.KvTier")
        with grpc.insecure_channel(f"unix:{self.socket}") as channel:
            stats = service_pb2_grpc.KvTierStub(channel).Stats(stats_pb2.StatsRequest(),
                                                                 timeout=RPC_TIMEOUT)
        self.assertEqual(stats.incarnation_id, self.client.server.incarnation_id)
        self.assertTrue(service_pb2.DESCRIPTOR.services_by_name["KvTierAdmin"])

    def test_02_connect_to_a_missing_socket_raises(self):
        missing = os.path.join(self.dir, "no-daemon.sock")
        with self.assertRaises(kvtier.Error) as ctx:
            kvtier.Client.connect(socket=missing, timeout=0.5)
        self.assertEqual(ctx.exception.code, "UNAVAILABLE")
        self.assertIn("no-daemon.sock", str(ctx.exception))
        self.assertIsInstance(ctx.exception, RuntimeError)

    def test_03_layouts_and_hashes(self):
        layout = self.layout
        self.assertEqual(layout.tokens_per_page, TOKENS)
        self.assertEqual(layout.hot_page_bytes, 2 * 2 * 2 * TOKENS * 64 * 2)
        self.assertEqual([(p.name, p.slot_bytes) for p in layout.pools], [("kv", self.page_bytes)])
        self.assertEqual([b.name for b in layout.buffers], ["k.0", "v.0", "k.1", "v.1"])
        self.assertEqual(layout.buffers[0].dtype, kvtier.DType.bf16)
        copy = kvtier.PageLayout.from_json(layout.to_json())
        self.assertEqual(copy.fingerprint, layout.fingerprint)
        self.assertEqual(kvtier.PageLayout.gqa(2, 2, 64, TOKENS, dtype=kvtier.DType.fp16)
                         .buffers[0].dtype, kvtier.DType.fp16)
        self.assertIn("qwen3-8b", kvtier.PageLayout.preset_names())
        self.assertTrue(kvtier.PageLayout.preset("deepseek-v3", 64).has_mla)
        with self.assertRaises(KeyError) as ctx:
            kvtier.PageLayout.preset("no-such-model", 16)
        self.assertIsInstance(ctx.exception, kvtier.NotFoundError)
        self.assertEqual(ctx.exception.code, "NOT_FOUND")
        self.assertIn("qwen3-8b", ctx.exception.message)
        with self.assertRaises(ValueError) as ctx:
            kvtier.PageLayout.gqa(2, 0, 64, TOKENS)
        self.assertIsInstance(ctx.exception, kvtier.InvalidRequestError)
        self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT")
        with self.assertRaises(ValueError):
            kvtier.PageLayout.gqa(2, 2, 64, TOKENS, dtype="float128")

        tokens = tokens_for(1, PAGES)
        hashes = self.hasher.hash(tokens)
        self.assertEqual(len(hashes), PAGES)
        self.assertTrue(all(isinstance(h, bytes) and len(h) == 32 for h in hashes))
        self.assertEqual(len(set(hashes)), PAGES)
        self.assertEqual(self.hasher.hash([int(t) for t in tokens]), hashes)
        self.assertEqual(self.hasher.hash_after(hashes[3], tokens[4 * TOKENS:]), hashes[4:])
        self.assertEqual(kvtier.BlockHasher.next(hashes[0], tokens[TOKENS:2 * TOKENS]), hashes[1])
        self.assertEqual(kvtier.hex_hash(hashes[0]), hashes[0].hex())
        other_root = kvtier.BlockHasher(bytes(32), TOKENS)
        self.assertNotEqual(other_root.hash(tokens)[0], hashes[0])
        with self.assertRaises(ValueError):
            kvtier.BlockHasher(b"short", TOKENS)
        with self.assertRaises(ValueError):
            self.hasher.hash(tokens, extra_keys=[b"x"])  # one key for 8 pages

    def test_04_raw_round_trip_is_exact(self):
        self.fill(0, PAGES, seed=4)
        # The numpy views share the mapping.
        slot = self.pool.slot(3)
        self.assertTrue(np.array_equal(slot, self.pages[3]))
        slot[0] ^= 0xFF
        self.assertEqual(self.pages[3][0], slot[0])
        slot[0] ^= 0xFF
        self.assertEqual(self.pool.data_ptr, self.pool.array().ctypes.data)

        hashes = self.hasher.hash(tokens_for(4, PAGES))
        self.assertEqual(self.client.lookup(self.engine, hashes).hit_pages, 0)
        off = self.client.offload(self.engine, hashes, list(range(PAGES)),
                                  ack=kvtier.WriteAck.stored)
        self.assertEqual(off.stored_pages, PAGES)
        self.assertTrue(all(r.ok for r in off.results), off.results)
        self.assertEqual(off.hot_bytes_read, PAGES * self.page_bytes)

        look = self.client.lookup(self.engine.engine_id, hashes + [b"\x01" * 32, b"\x02" * 32])
        self.assertEqual(look.hit_pages, PAGES)
        self.assertEqual(look.tiers[:PAGES], [kvtier.Tier.host] * PAGES)

        self.assertFalse(self.pages[16:16 + PAGES].any())
        on = self.client.onboard(self.engine, hashes, np.arange(16, 16 + PAGES))
        self.assertEqual(on.onboarded_pages, PAGES)
        self.assertTrue(all(r.ok for r in on.results), on.results)
        self.assertEqual(on.results[0].tier, kvtier.Tier.host)
        self.assertTrue(np.array_equal(self.pages[16:16 + PAGES], self.pages[0:PAGES]))

    def test_04b_offload_token_ids_are_published(self):
        try:
            import msgpack
            import zmq
        except ImportError as e:
            self.skipTest(f"the KV-events subscriber needs python3-zmq and python3-msgpack: {e}")
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        self.addCleanup(ctx.term)
        self.addCleanup(sub.close, 0)
        sub.connect(self.kv_endpoint())
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        stored = {}  # reduced block hash -> the token ids its BlockStored events carried

        def drain(timeout_ms):
            got = 0
            while sub.poll(timeout_ms):
                _, _, payload = sub.recv_multipart()
                _, events, _ = msgpack.unpackb(payload)
                for e in events:
                    if e["type"] != "BlockStored":
                        continue
                    self.assertEqual(e["block_size"], TOKENS)
                    hashes, tokens = e["block_hashes"], e["token_ids"]
                    # vLLM's form: the blocks' tokens end to end, a full page each (a partial
                    # page alone), or none at all.
                    if tokens and len(hashes) > 1:
                        self.assertEqual(len(tokens), TOKENS * len(hashes), e)
                    per = len(tokens) // len(hashes)
                    for k, h in enumerate(hashes):
                        stored[h] = tokens[k * per:(k + 1) * per]
                    got += 1
                timeout_ms = 0
            return got

        def reduced(h):
            return int.from_bytes(h[24:32], "big")

        # Only what is published after the subscription reached the daemon arrives: offload
        # probe pages until one does.
        for i in range(500):
            probe = bytes([i % 256, i // 256]) + b"\x5a" * 30
            self.client.offload(self.engine, [probe], [0], token_ids=[[9]],
                                ack=kvtier.WriteAck.stored)
            if drain(20):
                break
        else:
            self.fail("the subscriber received no KV event")

        tokens = tokens_for(41, PAGES)
        hashes = self.hasher.hash(tokens)
        per_page = [tokens[i * TOKENS:(i + 1) * TOKENS] for i in range(PAGES - 1)] + [None]
        off = self.client.offload(self.engine, hashes, range(PAGES), token_ids=per_page,
                                  ack=kvtier.WriteAck.stored)
        self.assertEqual(off.stored_pages, PAGES)
        # And through offload_async, a 2-D array of pages by tokens.
        more = tokens_for(42, 2)
        more_hashes = self.hasher.hash(more)
        fut = self.client.offload_async(self.engine, more_hashes, [0, 1],
                                        token_ids=more[:2 * TOKENS].reshape(2, TOKENS))
        self.assertEqual(fut.result(timeout=RPC_TIMEOUT).stored_pages, 2)
        want = {reduced(h): [int(t) for t in (p if p is not None else [])]
                for h, p in zip(hashes, per_page)}
        want.update({reduced(h): [int(t) for t in more[i * TOKENS:(i + 1) * TOKENS]]
                     for i, h in enumerate(more_hashes)})
        deadline = time.monotonic() + 10
        while not all(h in stored for h in want) and time.monotonic() < deadline:
            drain(100)
        self.assertEqual({h: stored.get(h) for h in want}, want)

        # 17 tokens for a page of 16: the call raises, naming the item, and stores nothing.
        bad = [b"\x6b" * 32, b"\x6c" * 32]
        with self.assertRaises(kvtier.InvalidRequestError) as ctx_err:
            self.client.offload(self.engine, bad, [0, 1],
                                token_ids=[list(range(TOKENS)), list(range(TOKENS + 1))])
        self.assertEqual(ctx_err.exception.code, "INVALID_ARGUMENT")
        self.assertIn("items[1]: 17 token ids", ctx_err.exception.message)
        self.assertIn("tokens_per_page", ctx_err.exception.message)
        self.assertEqual(self.client.lookup(self.engine, bad).hit_pages, 0)
        # One token sequence per page, checked before any call.
        with self.assertRaises(kvtier.InvalidRequestError):
            self.client.offload(self.engine, bad, [0, 1], token_ids=[[1, 2]])
        with self.assertRaises(TypeError):
            self.client.offload(self.engine, bad, [0, 1], token_ids=b"xy")

    def test_05_nvfp4_round_trip_is_close(self):
        pool = kvtier.SharedMemoryPool(os.path.join(self.dir, "nvfp4.kv"), "kv", 32,
                                       self.page_bytes)
        pages = pool.array().reshape(32, self.page_bytes)
        rng = np.random.default_rng(5)
        values = rng.standard_normal((PAGES, self.page_bytes // 2), dtype=np.float32)
        for i in range(PAGES):
            pages[i] = bf16_page(values[i])
        engine = self.client.register_engine("py-nvfp4-model", self.layout, [pool],
                                             codec="nvfp4", engine_name="python-nvfp4")
        self.assertEqual(engine.codec, "nvfp4")
        self.assertLess(engine.cold_block_bytes, self.page_bytes)
        hashes = kvtier.BlockHasher(engine.hash_root, TOKENS).hash(tokens_for(5, PAGES))
        self.assertEqual(self.client.offload(engine, hashes, range(PAGES)).stored_pages, PAGES)
        on = self.client.onboard(engine, hashes, range(16, 16 + PAGES))
        self.assertEqual(on.onboarded_pages, PAGES)
        for i in range(PAGES):
            source = bf16_values(pages[i].copy())
            got = bf16_values(pages[16 + i].copy())
            self.assertTrue(np.isfinite(got).all(), f"page {i}: non-finite values")
            self.assertTrue(got.any(), f"page {i} is still zero")
            rel = np.sqrt(np.sum((got - source) ** 2) / np.sum(source ** 2))
            self.assertLess(rel, 0.2, f"page {i}: relative RMS error {rel}")
        self.client.unregister(engine)

    def test_06_async_futures(self):
        chains = [self.hasher.hash(tokens_for(60 + c, 2)) for c in range(4)]
        self.fill(32, 8, seed=6)
        offloads = [self.client.offload_async(self.engine, h, [32 + 2 * c, 33 + 2 * c])
                    for c, h in enumerate(chains)]
        for f in offloads:
            self.assertIsInstance(f, concurrent.futures.Future)
        for f in concurrent.futures.as_completed(offloads, timeout=RPC_TIMEOUT):
            self.assertEqual(f.result().stored_pages, 2)
        lookups = [self.client.lookup_async(self.engine, h) for h in chains]
        lookups.append(self.client.lookup_async(self.engine, [b"\x03" * 32]))
        self.assertEqual([f.result(timeout=RPC_TIMEOUT).hit_pages for f in lookups],
                         [2, 2, 2, 2, 0])
        onboards = [self.client.onboard_async(self.engine, h, [40 + 2 * c, 41 + 2 * c])
                    for c, h in enumerate(chains)]
        done, pending = concurrent.futures.wait(onboards, timeout=RPC_TIMEOUT)
        self.assertFalse(pending)
        self.assertEqual([f.result().onboarded_pages for f in onboards], [2] * 4)
        self.assertTrue(np.array_equal(self.pages[40:48], self.pages[32:40]))
        # A failure completes the future with the exception (the server's message).
        failed = self.client.lookup_async("e-no-such-engine", chains[0])
        error = failed.exception(timeout=RPC_TIMEOUT)
        self.assertIsInstance(error, kvtier.NotFoundError)
        self.assertIn("e-no-such-engine", str(error))
        # Done-callbacks run too (on the library's thread).
        seen = threading.Event()
        f = self.client.lookup_async(self.engine, chains[1])
        f.add_done_callback(lambda _: seen.set())
        self.assertTrue(seen.wait(RPC_TIMEOUT))

    def test_07_park_resume_release(self):
        self.fill(0, 4, seed=7)
        secret = b"\x00tool call: weather(Paris)\xff"
        parked = self.client.park(self.engine, "req-1", [0, 1, 2, 3], user_data=secret,
                                  num_tokens=4 * TOKENS - 3, ack=kvtier.WriteAck.stored)
        self.assertEqual(parked.parked_pages, 4)
        self.assertGreater(parked.expires_at, time.time())
        self.pages[48:52] = 0
        resumed = self.client.resume(self.engine, "req-1", [48, 49, 50, 51], keep_parked=True)
        self.assertEqual(resumed.resumed_pages, 4)
        self.assertEqual(resumed.user_data, secret)
        self.assertEqual(resumed.num_tokens, 4 * TOKENS - 3)
        self.assertFalse(resumed.released)
        self.assertTrue(np.array_equal(self.pages[48:52], self.pages[0:4]))

        self.fill(4, 2, seed=8)
        park = self.client.park_async(self.engine, "req-2", [4, 5], user_data=b"async")
        self.assertEqual(park.result(timeout=RPC_TIMEOUT).parked_pages, 2)
        resume = self.client.resume_async(self.engine, "req-2", [52, 53])
        result = resume.result(timeout=RPC_TIMEOUT)
        self.assertEqual(result.user_data, b"async")
        self.assertTrue(result.released)
        self.assertTrue(np.array_equal(self.pages[52:54], self.pages[4:6]))

        release = self.client.release(self.engine, ["req-1", "req-2", "no-such-request"])
        self.assertEqual([r.code for r in release.results],
                         [kvtier.ItemCode.ok, kvtier.ItemCode.not_found,
                          kvtier.ItemCode.not_found])
        with self.assertRaises(kvtier.Error):
            self.client.resume(self.engine, "req-1", [48])

    def test_08_errors(self):
        hashes = self.hasher.hash(tokens_for(8, 1))
        # A page index past the pool is the item's code, not an exception.
        off = self.client.offload(self.engine, hashes, [SLOTS])
        self.assertEqual(off.stored_pages, 0)
        self.assertEqual(off.results[0].code, kvtier.ItemCode.invalid_argument)
        self.assertTrue(off.results[0].message)
        self.assertEqual(self.client.offload(self.engine, hashes, [0]).stored_pages, 1)
        on = self.client.onboard(self.engine, hashes, [1000])
        self.assertEqual(on.onboarded_pages, 0)
        self.assertEqual(on.results[0].code, kvtier.ItemCode.invalid_argument)
        # An unknown engine raises with the server's message.
        with self.assertRaises(kvtier.NotFoundError) as ctx:
            self.client.lookup("e-no-such-engine", hashes)
        self.assertIsInstance(ctx.exception, KeyError)
        self.assertEqual(ctx.exception.code, "NOT_FOUND")
        self.assertIn("not registered", ctx.exception.message)
        # Arguments checked before any call.
        with self.assertRaises(ValueError):
            self.client.offload(self.engine, hashes, [0, 1])
        with self.assertRaises(TypeError):
            self.client.lookup(self.engine, ["not bytes"])
        # A pool outside pools.allowed_dirs.
        outside = tempfile.mkdtemp(prefix="kvtier-outside-")
        self.addCleanup(shutil.rmtree, outside, True)
        pool = kvtier.SharedMemoryPool(os.path.join(outside, "x.kv"), "kv", 4, self.page_bytes)
        with self.assertRaises(kvtier.InvalidRequestError) as ctx:
            self.client.register_engine("py-outside", self.layout, [pool], codec="raw")
        self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT")
        self.assertIn("outside the directories", ctx.exception.message)
        self.assertIn(outside, ctx.exception.message)
        # CUDA pools: Unimplemented without CUDA (or no such device / allocation).
        if not kvtier.cuda_available():
            with self.assertRaises(kvtier.Error) as ctx:
                kvtier.PoolRegistration.cuda("kv", 4, 0, 0x1000, 4 * self.page_bytes)
            self.assertIn(ctx.exception.code,
                          ("UNIMPLEMENTED", "UNAVAILABLE", "INVALID_ARGUMENT"))
        reg = kvtier.PoolRegistration.shared_memory("kv", 4, path="/x", size_bytes=5)
        self.assertEqual((reg.kind, reg.path, reg.size_bytes), ("shared_memory", "/x", 5))
        self.assertEqual(self.pool.registration().path, self.pool.path)

    def test_09_pin_unpin_and_events(self):
        hashes = self.hasher.hash(tokens_for(4, PAGES))[:2]  # stored by test_04
        pin = self.client.pin(self.engine, hashes, ttl=5.0)
        self.assertEqual([r.code for r in pin.results], [kvtier.ItemCode.ok] * 2)
        unpin = self.client.unpin(self.engine, hashes)
        self.assertEqual([r.code for r in unpin.results], [kvtier.ItemCode.ok] * 2)

        stored, complete = set(), threading.Event()

        def on_event(event):
            if event.kind == kvtier.EventKind.block_stored:
                stored.update(event.block_hashes)
            elif event.kind == kvtier.EventKind.snapshot_complete:
                complete.set()

        with self.client.watch_events(on_event, snapshot=True) as watch:
            self.assertTrue(complete.wait(RPC_TIMEOUT), "no snapshot_complete event")
            watch.cancel()
        self.assertTrue(set(self.hasher.hash(tokens_for(4, PAGES))) <= stored)

    def test_10_stats(self):
        stats = self.client.stats(include_namespaces=True)
        self.assertGreaterEqual(stats.hot_bytes_offloaded, PAGES * self.page_bytes)
        self.assertGreaterEqual(stats.hot_bytes_onboarded, PAGES * self.page_bytes)
        self.assertGreaterEqual(stats.registered_engines, 1)
        self.assertGreater(stats.uptime, 0)
        host = stats.tier(kvtier.Tier.host)
        self.assertIsNotNone(host)
        self.assertGreaterEqual(host.blocks, PAGES)
        self.assertGreater(host.capacity_bytes, 0)
        self.assertIn("py-raw-model", [n.model for n in stats.namespaces])

    def test_11_compression_config(self):
        config = kvtier.parse_compression_config(
            "algorithm: quantization_for_cold_page\nquant: nvfp4x2\nrope_precision: lossless\n"
            "my_key: 7\n")
        self.assertEqual(config.algorithm, "quantization_for_cold_page")
        self.assertEqual(config.quant, "nvfp4x2")
        self.assertEqual(config.rope_precision, "lossless")
        self.assertEqual(config.options["my_key"], "7")
        config = kvtier.parse_compression_config('{"algorithm": "triattention", "budget": 512}')
        self.assertEqual((config.algorithm, config.budget), ("triattention", 512))
        with self.assertRaises(ValueError) as ctx:
            kvtier.parse_compression_config("algorithm: triattention\nbudget: many\n")
        self.assertIn("budget", str(ctx.exception))
        names = kvtier.compression_method_names()
        self.assertIn("triattention", names)
        self.assertIn("quantization_for_cold_page", names)

    def test_11b_dlpack_pools(self):
        # Host arrays cannot be shared with the daemon; a strided view is refused before that.
        with self.assertRaises(ValueError) as ctx:
            kvtier.PoolRegistration.from_dlpack("kv", 4, np.zeros(4 * 1024, dtype=np.uint8))
        self.assertIn("SharedMemoryPool", str(ctx.exception))
        with self.assertRaises(ValueError) as ctx:
            kvtier.PoolRegistration.from_dlpack("kv", 4, np.zeros((64, 64), np.uint16)[:, ::2])
        self.assertIn("not C-contiguous", str(ctx.exception))
        with self.assertRaises(ValueError):
            kvtier.PoolRegistration.from_dlpack("kv", 4, [1, 2, 3])

    def test_12_unregister_and_close(self):
        client = kvtier.Client.connect(socket=self.socket, client_name="python-test-2")
        pool = kvtier.SharedMemoryPool(os.path.join(self.dir, "short.kv"), "kv", 4,
                                       self.page_bytes)
        engine = client.register_engine("py-short", self.layout, [pool], codec="raw")
        hashes = kvtier.BlockHasher(engine.hash_root, TOKENS).hash(tokens_for(12, 1))
        self.assertEqual(client.lookup(engine, hashes).hit_pages, 0)
        client.unregister(engine)
        with self.assertRaises(kvtier.NotFoundError):
            client.lookup(engine, hashes)
        client.close()
        with self.assertRaises(kvtier.Error) as ctx:
            client.lookup(engine, hashes)
        self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION")

    def test_99_sigterm_stops_with_status_0(self):
        type(self).client.close()
        self.assert_sigterm_stops_daemon()


def main():
    global KVTIERD
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvtierd", default=KVTIERD)
    args, rest = parser.parse_known_args()
    KVTIERD = args.kvtierd
    if not KVTIERD:
        sys.exit("test_client.py: pass --kvtierd PATH (or set KVTIERD_PATH)")
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
