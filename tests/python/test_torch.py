#!/usr/bin/python3
"""kvtier.torch (PagedKVPool) and kvtier.transformers (PrefixCache) with CPU torch tensors in
shared-memory pools, against a real kvtierd:
  - the pool's typed views put each layer's K and V rows exactly where the layout's buffers
    lie in the slot (checked against the layout's offsets through the raw bytes), write/read
    round-trip full and partial pages, and bad token counts and an exhausted pool are errors;
  - PrefixCache (raw): the KV of a prompt stored after a turn comes back bit for bit for a longer
    prompt with the same prefix, only up to the first page that differs, and always leaving one
    token to prefill; store(from_page=) sends only the new pages; the token ids reach kvtierd
    (a later engine of the same model hits the blocks through BlockHasher alone);
  - park / resume of a context whose last page is partial returns every token; resuming an
    unknown or already resumed request raises KeyError;
  - nvfp4 (codec from a quantization_for_cold_page block): values come back finite and close.
The transformers-specific glue (DynamicCache) runs on the GPU machine's transformers
(tools/torch/kvtier_transformers.py); here the cache factory returns the layers themselves.

Usage: test_torch.py --kvtierd PATH [unittest options] (or KVTIERD_PATH), the package's
directory on PYTHONPATH (ctest sets both). Needs python3-torch; skips without it.
"""

import argparse
import os
import sys
import types
import unittest

import daemon_fixture
import kvtier

try:
    import torch
except ImportError:  # pragma: no cover - a machine without python3-torch
    torch = None

KVTIERD = os.environ.get("KVTIERD_PATH", "")
TOKENS = 16
CONFIG = types.SimpleNamespace(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=32, hidden_size=128, torch_dtype="bfloat16")


def layers_factory(layers, config):
    """PrefixCache's cache factory for these tests: the (K, V) list itself, batch 1 added."""
    del config
    return [(k.unsqueeze(0), v.unsqueeze(0)) for k, v in layers]


def random_kv(tokens, seed, layers=CONFIG.num_hidden_layers, heads=CONFIG.num_key_value_heads,
              head_dim=CONFIG.head_dim):
    """A legacy past_key_values: per layer (K, V) of shape (1, heads, tokens, head_dim), BF16."""
    g = torch.Generator().manual_seed(seed)
    shape = (1, heads, tokens, head_dim)
    return [(torch.randn(shape, generator=g).to(torch.bfloat16),
             torch.randn(shape, generator=g).to(torch.bfloat16)) for _ in range(layers)]


@unittest.skipIf(torch is None, "python3-torch is not installed")
class TorchTest(daemon_fixture.DaemonTestCase):

    @classmethod
    def setUpClass(cls):
        cls.make_daemon_dir("kvtier-pytorch-")
        cls.client = None
        try:
            cls.start_daemon(KVTIERD, ["--set=host.capacity=64MiB", "--set=host.chunk=4MiB",
                                       "--set=host.pin=none", "--set=disk.capacity=0",
                                       f"--set=pools.allowed_dirs=[{cls.dir}]",
                                       '--set=metrics.listen=""'])
            cls.client = kvtier.Client.connect(socket=cls.socket, client_name="torch-test",
                                               timeout=20.0)
        except BaseException:
            cls.cleanup(keep=True)
            raise

    @classmethod
    def cleanup(cls, keep):
        if cls.client is not None:
            cls.client.close()
        super().cleanup(keep)

    def cache(self, model, **kwargs):
        from kvtier.transformers import PrefixCache
        kwargs.setdefault("slots", 32)
        return PrefixCache(self.client, CONFIG, model_name=model, tokens_per_page=TOKENS,
                           device="cpu", pool_dir=self.dir, cache_factory=layers_factory,
                           **kwargs)

    def assert_same(self, got, want, tokens, first=0):
        """Tokens [first, tokens) of `got` equal `want`'s."""
        self.assertEqual(len(got), len(want))
        for (gk, gv), (wk, wv) in zip(got, want):
            self.assertEqual(gk.shape[-1], wk.shape[-1])
            self.assertGreaterEqual(gk.shape[-2], tokens)
            self.assertTrue(torch.equal(gk[0, :, first:tokens], wk[0, :, first:tokens]))
            self.assertTrue(torch.equal(gv[0, :, first:tokens], wv[0, :, first:tokens]))

    # ---- PagedKVPool -------------------------------------------------------------------------

    def test_01_views_follow_the_layout(self):
        from kvtier.torch import PagedKVPool
        layout = kvtier.PageLayout.gqa(num_layers=2, kv_heads=2, head_dim=8, tokens_per_page=4)
        pool = PagedKVPool(layout, 5, "cpu", pool_dir=self.dir)
        kv = random_kv(6, 1, layers=2, heads=2, head_dim=8)
        slots = pool.alloc(2)
        self.assertEqual(slots, [0, 1])
        pool.write([3, 1], [(k[0], v[0]) for k, v in kv])
        raw = pool.storage.numpy()
        for b in layout.buffers:
            src = kv[b.layer][0 if b.role == "k" else 1][0]  # (heads, 6, 8)
            for page, slot in enumerate((3, 1)):
                base = slot * pool.slot_bytes + b.offset_bytes
                data = torch.from_numpy(raw[base:base + b.data_bytes].copy())
                rows = data.view(torch.bfloat16).reshape(b.heads, b.tokens, b.head_dim)
                n = min(4, 6 - page * 4)
                self.assertTrue(torch.equal(rows[:, :n], src[:, page * 4:page * 4 + n]),
                                f"{b.name} page {page}")
        back = pool.read([3, 1], tokens=6)
        for (k, v), (bk, bv) in zip(kv, back):
            self.assertTrue(torch.equal(bk, k[0]) and torch.equal(bv, v[0]))
        with self.assertRaises(ValueError):
            pool.write([0], [(k[0], v[0]) for k, v in kv])  # 6 tokens do not fit one page
        with self.assertRaises(ValueError):
            pool.write([0, 1, 2], [(k[0], v[0]) for k, v in kv])  # nor fill three
        with self.assertRaises(kvtier.torch.PoolExhaustedError):
            pool.alloc(4)
        self.assertEqual(pool.free_slots, 3)
        pool.free(slots)
        self.assertEqual(pool.free_slots, 5)

    # ---- PrefixCache: turns ------------------------------------------------------------------

    def test_02_raw_prefix_round_trip(self):
        cache = self.cache("torch-raw")
        self.assertEqual(cache.codec, "raw")
        prompt = list(range(1000, 1000 + 5 * TOKENS + 7))  # 5 full pages and 7 tokens
        kv = random_kv(len(prompt), 2)
        self.assertEqual(cache.load(prompt).tokens, 0)
        self.assertEqual(cache.store(prompt, kv), 5)
        # The next turn: the same prefix and more tokens.
        longer = prompt + list(range(5000, 5040))
        got = cache.load(longer)
        self.assertEqual((got.tokens, got.pages), (5 * TOKENS, 5))
        self.assertEqual(got.past_key_values[0][0].shape[-2], 5 * TOKENS)
        self.assert_same(got.past_key_values, kv, 5 * TOKENS)
        # A prompt of exactly 5 pages: the last page is left to prefill.
        exact = cache.load(prompt[:5 * TOKENS])
        self.assertEqual(exact.pages, 4)
        self.assertEqual(exact.past_key_values[0][0].shape[-2], 4 * TOKENS)
        self.assert_same(exact.past_key_values, kv, 4 * TOKENS)
        # A different token in page 3 (index 2): only pages 0-1 hit.
        changed = list(longer)
        changed[2 * TOKENS + 5] += 1
        self.assertEqual(cache.load(changed).pages, 2)
        # store(from_page=) sends only the new pages: 5 known, 2 more of the longer turn.
        kv2 = random_kv(len(longer), 2)
        self.assertEqual(cache.store(longer, kv2, from_page=5), 2)
        again = cache.load(longer + [1])
        self.assertEqual(again.pages, 7)
        self.assert_same(again.past_key_values, kv, 5 * TOKENS)  # the first five unchanged
        self.assert_same(again.past_key_values, kv2, 7 * TOKENS, first=5 * TOKENS)
        # Another engine of the same model and layout finds the blocks from the tokens alone.
        other = self.cache("torch-raw")
        self.assertEqual(other.load(longer + [1]).pages, 7)
        self.assertEqual(cache.pool.free_slots, cache.pool.slots)

    def test_03_store_larger_than_the_pool(self):
        cache = self.cache("torch-small-pool", slots=3)
        prompt = list(range(7 * TOKENS + 1))
        kv = random_kv(len(prompt), 3)
        self.assertEqual(cache.store(prompt, kv), 7)  # in runs of 3 slots
        big = self.cache("torch-small-pool", slots=8)
        got = big.load(prompt)
        self.assertEqual(got.pages, 7)
        self.assert_same(got.past_key_values, kv, 7 * TOKENS)

    # ---- PrefixCache: tool calls -------------------------------------------------------------

    def test_04_park_and_resume(self):
        cache = self.cache("torch-park")
        tokens = list(range(3 * TOKENS + 9))
        kv = random_kv(len(tokens), 4)
        self.assertEqual(cache.park("req-1", tokens, kv), 4)
        self.assertEqual(cache.pool.free_slots, cache.pool.slots)
        back = cache.resume("req-1")
        self.assertEqual(back[0][0].shape[-2], len(tokens))
        self.assert_same(back, kv, len(tokens))
        with self.assertRaises(KeyError):
            cache.resume("req-1")
        with self.assertRaises(KeyError):
            cache.resume("never-parked")
        with self.assertRaises(ValueError):
            cache.park("req-2", tokens[:10], kv)

    # ---- PrefixCache: nvfp4 ------------------------------------------------------------------

    def test_05_nvfp4_from_a_config_block(self):
        from kvtier.transformers import PrefixCache, codec_from_config
        block = kvtier.parse_compression_config(
            "algorithm: quantization_for_cold_page\nquant: nvfp4\nrope_precision: quantized\n")
        self.assertEqual(codec_from_config(block), "nvfp4")
        self.assertEqual(codec_from_config(kvtier.parse_compression_config(
            "algorithm: quantization_for_cold_page\nquant: nvfp4x2\nrope_precision: lossless\n")),
            "nvfp4x2+rope")
        with self.assertRaises(ValueError):
            codec_from_config(kvtier.parse_compression_config("algorithm: triattention\n"))
        cache = PrefixCache.create(self.client, CONFIG, model_name="torch-nvfp4",
                                   compression=block, tokens_per_page=TOKENS, device="cpu",
                                   pool_dir=self.dir, slots=16, cache_factory=layers_factory)
        self.assertEqual(cache.codec, "nvfp4")
        prompt = list(range(4 * TOKENS + 1))
        kv = random_kv(len(prompt), 5)
        self.assertEqual(cache.store(prompt, kv), 4)
        got = cache.load(prompt)
        self.assertEqual(got.pages, 4)
        for (gk, gv), (wk, wv) in zip(got.past_key_values, kv):
            for g, w in ((gk, wk), (gv, wv)):
                g, w = g[0].float(), w[0, :, :4 * TOKENS].float()
                self.assertTrue(torch.isfinite(g).all())
                self.assertFalse(torch.equal(g, w))  # it is lossy ...
                rel = (g - w).norm() / w.norm()
                self.assertLess(rel.item(), 0.2)  # ... and close (4-bit: about 0.1)

    def test_99_sigterm_stops_the_daemon(self):
        self.assert_sigterm_stops_daemon()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvtierd", default=KVTIERD)
    args, rest = parser.parse_known_args()
    KVTIERD = args.kvtierd
    unittest.main(argv=[sys.argv[0]] + rest)
