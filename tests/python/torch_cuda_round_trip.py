#!/usr/bin/env python3
"""The `kvtier` package where the engines are: a torch CUDA tensor registered as a GPU pool
(PoolRegistration.from_dlpack, CUDA IPC), PAGES pages offloaded to a real kvtierd (a CUDA build)
and onboarded into other slots of the same tensor, the bytes compared on the GPU. Prints the
pages/s of each direction and the bytes checked, beside the baseline measured in the same run: torch's
own copy of the same bytes from the GPU into pinned host memory and back (docs/PERFORMANCE.md); exits 1 if any byte
differs or a page is missing. Runs in any Python with torch and the installed package (the GPU
machine's Python 3.12 with PyTorch); not a ctest (it needs a GPU and torch).

Usage: torch_cuda_round_trip.py --kvtierd PATH [--pages N] [--rounds N]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # daemon_fixture
import daemon_fixture  # noqa: E402

import kvtier  # noqa: E402
import torch  # noqa: E402

TOKENS = 16


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvtierd", required=True)
    parser.add_argument("--pages", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pages = args.pages
    slots = 2 * pages

    d = daemon_fixture.DaemonTestCase
    d.make_daemon_dir("kvtier-torch-")
    d.start_daemon(args.kvtierd, ["--set=host.capacity=1GiB", "--set=host.chunk=16MiB",
                                  "--set=disk.capacity=256MiB",
                                  "--set=disk.chunk=16MiB", '--set=metrics.listen=""'])
    ok = False
    try:
        client = kvtier.Client.connect(socket=d.socket, client_name="torch-round-trip")
        layout = kvtier.PageLayout.gqa(num_layers=8, kv_heads=8, head_dim=128,
                                       tokens_per_page=TOKENS, dtype=kvtier.DType.bf16)
        page = layout.hot_page_bytes
        kv = torch.empty(slots * page, dtype=torch.uint8, device="cuda")
        kv.zero_()
        kv[:pages * page] = torch.randint(0, 256, (pages * page,), dtype=torch.uint8,
                                          device="cuda")
        torch.cuda.synchronize()
        pool = kvtier.PoolRegistration.from_dlpack("kv", slots, kv)
        engine = client.register_engine("torch-model", layout, [pool], codec="raw")
        print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
              f"{torch.cuda.get_device_name()}, kvtier {kvtier.__version__} "
              f"({kvtier.library_path}); {engine!r}")
        hashes = kvtier.BlockHasher(engine.hash_root, TOKENS).hash(
            list(range(pages * TOKENS)))
        off = client.offload(engine, hashes, range(pages), ack=kvtier.WriteAck.stored)
        print(off)
        if off.stored_pages != pages:
            raise SystemExit(f"stored {off.stored_pages} of {pages} pages")
        best_onboard_s = float("inf")
        for r in range(args.rounds):
            kv[pages * page:].zero_()
            torch.cuda.synchronize()
            start = time.monotonic()
            on = client.onboard(engine, hashes, range(pages, 2 * pages))
            torch.cuda.synchronize()
            onboard_s = time.monotonic() - start
            best_onboard_s = min(best_onboard_s, onboard_s)
            if on.onboarded_pages != pages or not all(x.ok for x in on.results):
                raise SystemExit(f"onboarded {on.onboarded_pages} of {pages}: {on}")
            if not torch.equal(kv[pages * page:], kv[:pages * page]):
                raise SystemExit("onboarded bytes differ from the offloaded ones")
            print(f"round {r + 1}: onboard {pages} pages of {page} bytes in {onboard_s:.4f} s "
                  f"({pages / onboard_s:.0f} pages/s, {pages * page / onboard_s / 1e9:.2f} GB/s); "
                  f"{pages * page} bytes checked")
        # Baseline: torch copies the same bytes GPU -> pinned host -> GPU (best of the rounds).
        host = torch.empty(pages * page, dtype=torch.uint8, pin_memory=True)
        d2h_s = h2d_s = float("inf")
        for _ in range(args.rounds):
            torch.cuda.synchronize()
            start = time.monotonic()
            host.copy_(kv[:pages * page])
            torch.cuda.synchronize()
            d2h_s = min(d2h_s, time.monotonic() - start)
            start = time.monotonic()
            kv[pages * page:].copy_(host)
            torch.cuda.synchronize()
            h2d_s = min(h2d_s, time.monotonic() - start)
        print(f"baseline torch copy: to host {pages / d2h_s:.0f} pages/s "
              f"({pages * page / d2h_s / 1e9:.2f} GB/s), to GPU {pages / h2d_s:.0f} pages/s "
              f"({pages * page / h2d_s / 1e9:.2f} GB/s)")
        print(f"onboard (best round) / torch copy to GPU: {h2d_s / best_onboard_s:.2f}x")
        # Offload again under new hashes, timed (the first offload warmed the path).
        hashes2 = kvtier.BlockHasher(engine.hash_root, TOKENS).hash(
            list(range(10**6, 10**6 + pages * TOKENS)))
        start = time.monotonic()
        off2 = client.offload(engine, hashes2, range(pages), ack=kvtier.WriteAck.stored)
        offload_s = time.monotonic() - start
        print(f"offload {off2.stored_pages} pages in {offload_s:.4f} s "
              f"({pages / offload_s:.0f} pages/s, {pages * page / offload_s / 1e9:.2f} GB/s); "
              f"offload / torch copy to host: {d2h_s / offload_s:.2f}x")
        client.unregister(engine)
        client.close()
        ok = True
        print("torch CUDA round trip passed")
    finally:
        if d.proc.poll() is None:
            d.proc.terminate()
            d.proc.wait(timeout=daemon_fixture.STOP_TIMEOUT)
        d.cleanup(keep=not ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
