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
  - TriAttention: kvtier_calibrate.py's statistics (after q_proj and q_norm) by hand, its
    torch.save file loads in the Evictor (and one of the wrong shape is refused); the Evictor
    compacts a batch of two rows in place and the rebuilt cache holds the pinned prompt and
    original rows of cached tokens, one token set per row in union mode.
The transformers-specific glue (DynamicCache) runs on the GPU machine's transformers
(tools/torch/kvtier_transformers.py); here the cache factory returns the layers themselves.

Usage: test_torch.py --kvtierd PATH [unittest options] (or KVTIERD_PATH), the package's
directory on PYTHONPATH (ctest sets both). Needs python3-torch; skips without it.
"""

import argparse
import json
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
# TriAttention's: the Evictor takes head_dim 64, 128 or 256.
TRI = types.SimpleNamespace(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                            head_dim=64, hidden_size=128, torch_dtype="bfloat16")


def _calibration_tool():
    """tools/torch/kvtier_calibrate.py of this checkout, as a module."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "tools", "torch"))
    import kvtier_calibrate
    return kvtier_calibrate


if torch is not None:
    class TinyAttention(torch.nn.Module):
        """The parts of a transformers attention module calibration reads: q_proj, q_norm."""

        def __init__(self, qk_norm):
            super().__init__()
            self.q_proj = torch.nn.Linear(TRI.hidden_size, TRI.num_attention_heads * TRI.head_dim,
                                          bias=False)
            self.q_norm = torch.nn.LayerNorm(TRI.head_dim) if qk_norm else None

        def forward(self, hidden_states):
            return hidden_states + 0.01 * self.q_proj(hidden_states)[..., :TRI.hidden_size]

    class TinyLayer(torch.nn.Module):
        def __init__(self, qk_norm):
            super().__init__()
            self.self_attn = TinyAttention(qk_norm)

        def forward(self, h):
            return torch.tanh(self.self_attn(h))

    class TinyModel(torch.nn.Module):
        """model.model.layers[i].self_attn, as transformers' decoder models nest them."""

        def __init__(self, qk_norm):
            super().__init__()
            torch.manual_seed(3)
            self.config = TRI
            self.embed = torch.nn.Embedding(64, TRI.hidden_size)
            self.model = torch.nn.Module()
            self.model.layers = torch.nn.ModuleList(
                [TinyLayer(qk_norm) for _ in range(TRI.num_hidden_layers)])

        def hidden_before(self, input_ids, layer):
            h = self.embed(input_ids)
            for block in self.model.layers[:layer]:
                h = block(h)
            return h

        def forward(self, input_ids, use_cache=False):
            del use_cache
            return self.hidden_before(input_ids, len(self.model.layers))


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

    # ---- TriAttention: calibration and decode-time eviction ----------------------------------

    def test_06_calibration_file_loads_in_the_evictor(self):
        calibrate = _calibration_tool()
        model = TinyModel(qk_norm=True)
        batches = [torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(s))
                   for s in range(2)]
        cal = calibrate.calibrate(model, batches, model_name="tiny")
        m = cal["metadata"]
        layers, heads, head_dim = TRI.num_hidden_layers, TRI.num_attention_heads, TRI.head_dim
        self.assertEqual((m["rope_style"], m["head_dim"], m["num_traces"], m["tokens"]),
                         ("half", head_dim, 4, 160))
        self.assertEqual(m["sampled_heads"], [[l, h] for l in range(layers) for h in range(heads)])
        self.assertTrue(m["q_norm_applied"])
        self.assertEqual(len(cal["stats"]), layers * heads)
        # Layer 1, head 3 by hand: the query after q_proj and q_norm, bands (f, f + 32).
        with torch.no_grad():
            h = torch.cat([model.hidden_before(b, 1) for b in batches]).reshape(-1, 128)
            q = model.model.layers[1].self_attn.q_norm(
                model.model.layers[1].self_attn.q_proj(h).view(-1, heads, head_dim))[:, 3]
        re, im = q[:, :32].double(), q[:, 32:].double()
        entry = cal["stats"]["layer01_head03"]
        self.assertTrue(torch.allclose(entry["q_mean_real"].double(), re.mean(0), atol=1e-5))
        self.assertTrue(torch.allclose(entry["q_mean_imag"].double(), im.mean(0), atol=1e-5))
        self.assertTrue(torch.allclose(entry["q_abs_mean"].double(),
                                       torch.sqrt(re * re + im * im).mean(0), atol=1e-5))
        # The file torch.save wrote is one kvtier's reader takes, checked against config.json.
        path = os.path.join(self.dir, "tiny.calib.pt")
        calibrate.save(cal, path)
        tri = self.triattention(path, budget=16, beta=8, batch=1)
        self.assertEqual(tri.evictor.config.budget, 16)
        # A calibration of another model's shape is refused by name.
        cal["stats"] = {k: v for k, v in cal["stats"].items() if not k.startswith("layer02")}
        cal["metadata"]["sampled_heads"] = [p for p in m["sampled_heads"] if p[0] != 2]
        calibrate.save(cal, path)
        with self.assertRaisesRegex(ValueError, "layers"):
            self.triattention(path, budget=16, beta=8, batch=1)

    def triattention(self, calibration, *, budget, beta, batch, mode="union"):
        from kvtier.transformers import TriAttention
        config_path = os.path.join(self.dir, "config.json")
        with open(config_path, "w") as f:
            json.dump({"model_type": "qwen3", "num_hidden_layers": TRI.num_hidden_layers,
                       "num_attention_heads": TRI.num_attention_heads,
                       "num_key_value_heads": TRI.num_key_value_heads,
                       "head_dim": TRI.head_dim, "hidden_size": TRI.hidden_size,
                       "rope_theta": 10000.0, "max_position_embeddings": 4096}, f)
        block = kvtier.parse_compression_config(
            f"algorithm: triattention\nbudget: {budget}\nbeta: {beta}\neviction_mode: {mode}\n"
            f"calibration_path: {calibration}\nmodel_config_path: {config_path}\n")
        return TriAttention(TRI, block, batch=batch, max_tokens=8 + budget + beta + 4,
                            tokens_per_page=TOKENS, device="cpu", pool_dir=self.dir,
                            cache_factory=lambda layers, config: list(layers))

    def test_07_triattention_compacts_the_model_cache(self):
        calibrate = _calibration_tool()
        path = os.path.join(self.dir, "tiny7.calib.pt")
        ids = torch.randint(0, 64, (1, 64), generator=torch.Generator().manual_seed(5))
        calibrate.save(calibrate.calibrate(TinyModel(qk_norm=False), [ids]), path)
        prompt, budget, beta, batch = 8, 16, 8, 2
        tri = self.triattention(path, budget=budget, beta=beta, batch=batch)
        # Rows of distinct values, so every cached row names the token it came from.
        g = torch.Generator().manual_seed(7)
        total = prompt + 40
        shape = (batch, TRI.num_key_value_heads, total, TRI.head_dim)
        full = [(torch.randn(shape, generator=g).to(torch.bfloat16),
                 torch.randn(shape, generator=g).to(torch.bfloat16))
                for _ in range(TRI.num_hidden_layers)]
        past = [(k[:, :, :prompt], v[:, :, :prompt]) for k, v in full]
        tri.start(past)
        kept = [list(range(prompt)) for _ in range(batch)]  # each row's cached tokens
        for pos in range(prompt, total):
            self.assertTrue(torch.equal(tri.position_ids(), torch.full((batch, 1), pos)))
            past = [(torch.cat([k, fk[:, :, pos:pos + 1]], 2),
                     torch.cat([v, fv[:, :, pos:pos + 1]], 2))
                    for (k, v), (fk, fv) in zip(past, full)]
            for row in kept:
                row.append(pos)
            before = tri.rounds
            past = tri.step(past)
            if tri.rounds == before:
                continue
            # A round: prompt + budget tokens remain, the prompt first and in place, and each
            # cached (layer, head) row is the original row of a token that was cached.
            self.assertEqual(tri.physical, prompt + budget)
            self.assertEqual(past[0][0].shape[-2], prompt + budget)
            for b in range(batch):
                k0 = past[0][0][b, 0]
                ids = [self._token_of(full[0][0][b, 0], row) for row in k0]
                self.assertEqual(ids[:prompt], list(range(prompt)))
                self.assertEqual(len(set(ids)), len(ids))
                self.assertTrue(set(ids) <= set(kept[b]), f"row {b}: {ids}")
                for layer, (k, v) in enumerate(past):
                    for head in range(TRI.num_key_value_heads):
                        want = [self._token_of(full[layer][0][b, head], row)
                                for row in k[b, head]]
                        self.assertEqual(want, ids, "union: one token set per request")
                        self.assertTrue(torch.equal(v[b, head], full[layer][1][b, head, ids]))
                kept[b] = ids  # the next steps append to this set
        self.assertGreaterEqual(tri.rounds, 2)
        self.assertEqual(tri.evicted_tokens, tri.logical - tri.physical)
        self.assertEqual(tri.logical, total)
        with self.assertRaisesRegex(ValueError, "before the step"):
            tri.step(past)  # no new token
        tri.finish()
        with self.assertRaises(RuntimeError):
            tri.step(past)

    @staticmethod
    def _token_of(originals, row):
        """The index of `row` among `originals` (tokens, head_dim) rows."""
        match = (originals == row).all(-1).nonzero()
        assert match.numel() == 1, f"{match.numel()} matches"
        return int(match[0, 0])

    def test_99_sigterm_stops_the_daemon(self):
        self.assert_sigterm_stops_daemon()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvtierd", default=KVTIERD)
    args, rest = parser.parse_known_args()
    KVTIERD = args.kvtierd
    unittest.main(argv=[sys.argv[0]] + rest)
