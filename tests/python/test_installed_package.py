#!/usr/bin/env python3
"""The `kvtier` package as pip installed it into a virtual environment (pip_install_test.sh runs
this with the venv's interpreter, no PYTHONPATH and no $KVTIER_LIBRARY), using the standard
library only (no NumPy):
  - the package, its libkvtier and its typing files (py.typed, the kvtier.v1 .pyi stubs) come
    from the venv's site-packages; the metadata's version is the library's;
  - the public functions and methods carry type annotations;
  - connecting to a missing socket fails at once naming the path and the reason;
  - against a real kvtierd on a temporary socket: a SharedMemoryPool written through its
    memoryview, a raw engine, offload of 8 pages under BlockHasher hashes, lookup, onboard into
    other slots and the bytes compared; the results' reprs name their figures.

Usage: test_installed_package.py --kvtierd PATH --venv DIR [unittest options]
"""

import argparse
import importlib
import importlib.metadata
import inspect
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # daemon_fixture
import daemon_fixture  # noqa: E402

import kvtier  # noqa: E402

KVTIERD = ""
VENV = ""
TOKENS = 16
SLOTS = 32
PAGES = 8


class InstalledPackageTest(daemon_fixture.DaemonTestCase):

    @classmethod
    def setUpClass(cls):
        cls.make_daemon_dir("kvtier-pip-")
        try:
            cls.start_daemon(KVTIERD, ["--set=host.capacity=16MiB", "--set=host.chunk=4MiB",
                                       "--set=host.pin=none", "--set=disk.capacity=16MiB",
                                       "--set=disk.chunk=4MiB",
                                       f"--set=pools.allowed_dirs=[{cls.dir}]",
                                       '--set=metrics.listen=""', "--set=server.workers=2"])
        except BaseException:
            cls.cleanup(keep=True)
            raise

    def test_1_installed_in_the_venv(self):
        venv = os.path.realpath(VENV)
        package = os.path.dirname(os.path.realpath(kvtier.__file__))
        self.assertTrue(package.startswith(venv + os.sep), f"kvtier imported from {package}")
        self.assertTrue(os.path.realpath(kvtier.library_path).startswith(package + os.sep),
                        f"libkvtier loaded from {kvtier.library_path}, not the package")
        self.assertEqual(importlib.metadata.version("kvtier"), kvtier.__version__)
        self.assertTrue(os.path.isfile(os.path.join(package, "py.typed")))
        for stub in ("common_pb2.py", "common_pb2.pyi", "service_pb2.py", "service_pb2_grpc.py"):
            self.assertTrue(os.path.isfile(os.path.join(package, "v1", stub)), stub)
        # The stubs need protobuf (and grpcio), which a fresh venv does not have: the import
        # names it. A venv with Debian's site packages has them: the stubs import.
        try:
            import google.protobuf  # noqa: F401
            import grpc  # noqa: F401
        except ImportError:
            with self.assertRaises(ImportError) as ctx:
                importlib.import_module("kvtier.v1.common_pb2")
            self.assertTrue("google" in str(ctx.exception) or "grpc" in str(ctx.exception),
                            ctx.exception)
        else:
            service = importlib.import_module("kvtier.v1.service_pb2_grpc")
            self.assertTrue(hasattr(service, "KvTierStub"))
            common = importlib.import_module("kvtier.v1.common_pb2")
            self.assertTrue(os.path.realpath(common.__file__).startswith(package + os.sep))

    def test_2_public_api_is_annotated(self):
        missing = []
        for name in kvtier.__all__:
            obj = getattr(kvtier, name)
            members = [(name, obj)]
            if inspect.isclass(obj):
                members = [(f"{name}.{m}", f) for m, f in vars(obj).items()
                           if not m.startswith("_") and (inspect.isfunction(f) or
                                                         isinstance(f, (staticmethod, property)))]
            for qual, f in members:
                f = f.fget if isinstance(f, property) else getattr(f, "__func__", f)
                if not inspect.isfunction(f):
                    continue
                sig = inspect.signature(f)
                if sig.return_annotation is inspect.Signature.empty:
                    missing.append(f"{qual} -> ?")
                for p in sig.parameters.values():
                    if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                        missing.append(f"{qual}({p.name})")
        self.assertEqual(missing, [], "public functions without type annotations")

    def test_3_connect_to_a_missing_socket_fails_at_once(self):
        missing = os.path.join(self.dir, "no-daemon.sock")
        start = time.monotonic()
        with self.assertRaises(kvtier.Error) as ctx:
            kvtier.Client.connect(socket=missing)  # the default timeout: 10 s
        self.assertLess(time.monotonic() - start, 3.0)
        self.assertEqual(ctx.exception.code, "UNAVAILABLE")
        self.assertIn(missing, ctx.exception.message)
        self.assertIn("No such file or directory", ctx.exception.message)

    def test_4_shared_memory_round_trip(self):
        client = kvtier.Client.connect(socket=self.socket, client_name="pip-test")
        self.addCleanup(client.close)
        layout = kvtier.PageLayout.gqa(num_layers=2, kv_heads=2, head_dim=64,
                                       tokens_per_page=TOKENS)
        page = layout.hot_page_bytes
        pool = kvtier.SharedMemoryPool(os.path.join(self.dir, "pip.kv"), "kv", SLOTS, page)
        view = pool.view()
        self.assertEqual(len(view), SLOTS * page)
        source = os.urandom(PAGES * page)
        view[:PAGES * page] = source
        engine = client.register_engine("pip-model", layout, [pool], codec="raw")
        hashes = kvtier.BlockHasher(engine.hash_root, TOKENS).hash(
            list(range(1000, 1000 + PAGES * TOKENS)))
        self.assertEqual(len(hashes), PAGES)
        off = client.offload(engine, hashes, range(PAGES), ack=kvtier.WriteAck.stored)
        self.assertEqual(off.stored_pages, PAGES, off)
        self.assertEqual(off.hot_bytes_read, PAGES * page)
        self.assertIn("stored_pages=8", repr(off))
        self.assertEqual(client.lookup(engine, hashes).hit_pages, PAGES)
        self.assertEqual(bytes(view[16 * page:(16 + PAGES) * page]), bytes(PAGES * page))
        on = client.onboard(engine, hashes, range(16, 16 + PAGES))
        self.assertEqual(on.onboarded_pages, PAGES, on)
        self.assertTrue(all(r.ok for r in on.results), on.results)
        self.assertEqual(bytes(view[16 * page:(16 + PAGES) * page]), source,
                         "onboarded bytes differ from the offloaded ones")
        print(f"\nround trip through {kvtier.library_path}: {PAGES} pages, "
              f"{len(source)} bytes checked", file=sys.stderr)
        client.unregister(engine)

    def test_9_sigterm_stops_with_status_0(self):
        self.assert_sigterm_stops_daemon()


def main():
    global KVTIERD, VENV
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvtierd", required=True)
    parser.add_argument("--venv", required=True)
    args, rest = parser.parse_known_args()
    KVTIERD, VENV = args.kvtierd, args.venv
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
