#!/usr/bin/python3
"""The `kvtier` Python module's TriAttention Evictor binding over a numpy host cache.

Builds a paged host KV cache with numpy (2 layers, 2 KV heads of 64 dims, BF16 stored as uint16,
HND pages of 16 tokens, separate K and V pools of 64 pages), a random calibration (4 query heads,
omega = 1e4 ** (-2 f / 64), freq_scale_sq = 1) and an Evictor with budget 32 and beta 16, then
drives one request (prompt 20, a block table of 16 pages) one token per step:
  - no round until the decode region exceeds the budget at a multiple of beta (step 48);
  - that round keeps prompt + budget tokens, reports the evicted count and frees the pages past
    the new length; only the request's pages change, the prompt stays, and the kept rows are rows
    the decode region had;
  - errors map to Python exceptions: ValueError for a bad prompt_len, a duplicate request and a
    bad config, KeyError for an unknown request.

Run with the module's directory on PYTHONPATH (ctest sets it). Needs python3-numpy.
"""

import math
import unittest

import numpy as np

import kvtier

LAYERS = 2
KV_HEADS = 2
QUERY_HEADS = 4
HEAD_DIM = 64
BANDS = HEAD_DIM // 2
PAGE_TOKENS = 16
NUM_PAGES = 64
PROMPT = 20
BUDGET = 32
BETA = 16
TABLE_PAGES = 16


def random_bf16(rng, shape):
    """BF16 bit patterns (as uint16) of normal values with standard deviation 1."""
    values = rng.standard_normal(shape, dtype=np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


class EvictorTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(20261130)
        shape = (NUM_PAGES, KV_HEADS, PAGE_TOKENS, HEAD_DIM)  # HND pages
        # The view borrows these arrays: they stay alive as attributes of the test.
        self.k = [random_bf16(self.rng, shape) for _ in range(LAYERS)]
        self.v = [random_bf16(self.rng, shape) for _ in range(LAYERS)]
        self.view = kvtier.KvCacheView(
            [(k.ctypes.data, v.ctypes.data) for k, v in zip(self.k, self.v)],
            num_pages=NUM_PAGES,
            page_tokens=PAGE_TOKENS,
            num_kv_heads=KV_HEADS,
            head_dim=HEAD_DIM,
            dtype=kvtier.DType.bf16,
            layout=kvtier.KvLayout.hnd,
            pool_kind=kvtier.KvPoolKind.separate,
            memory=kvtier.KvMemory.host,
        )
        values = LAYERS * QUERY_HEADS * BANDS
        self.q_mean_real = self.rng.standard_normal(values, dtype=np.float32)
        self.q_mean_imag = self.rng.standard_normal(values, dtype=np.float32)
        self.q_abs_mean = (np.hypot(self.q_mean_real, self.q_mean_imag) + 0.5).astype(np.float32)
        f = np.arange(BANDS, dtype=np.float64)
        self.omega = (1e4 ** (-2.0 * f / HEAD_DIM)).astype(np.float32)
        self.freq_scale_sq = np.ones(BANDS, dtype=np.float32)
        self.table = self.rng.permutation(NUM_PAGES)[:TABLE_PAGES].astype(np.int32)

    def make_evictor(self, config):
        return kvtier.Evictor.create_from_arrays(
            config, self.q_mean_real, self.q_mean_imag, self.q_abs_mean, self.omega,
            self.freq_scale_sq, LAYERS, QUERY_HEADS, self.view)

    def row(self, pools, layer, head, token):
        page = self.table[token // PAGE_TOKENS]
        return pools[layer][page, head, token % PAGE_TOKENS, :]

    def test_rounds_and_compaction(self):
        config = kvtier.EvictorConfig(budget=BUDGET, beta=BETA)
        self.assertEqual(config.budget, BUDGET)
        self.assertEqual(config.mode, kvtier.EvictionMode.union)
        evictor = self.make_evictor(config)
        self.assertFalse(evictor.on_gpu)
        self.assertEqual(evictor.config.beta, BETA)
        evictor.add_request(7, PROMPT)

        length = PROMPT
        step = 0
        while True:
            step += 1
            length += 1
            decode = length - PROMPT
            self.assertLessEqual(step, 64, "no round ran")
            will_round = decode > BUDGET and step % BETA == 0
            if will_round:
                k_before = [k.copy() for k in self.k]
                v_before = [v.copy() for v in self.v]
            request = kvtier.StepRequest(id=7, new_tokens=1, block_table=self.table,
                                         length=length, prompt_len=PROMPT)
            outcomes = evictor.on_generation_step_end([request])
            self.assertEqual(len(outcomes), 1)
            out = outcomes[0]
            self.assertEqual(out.id, 7)
            if not will_round:
                self.assertFalse(out.evicted, f"step {step}, decode {decode}")
                self.assertEqual(out.new_length, length)
                self.assertEqual(out.evicted_tokens, 0)
                self.assertEqual(out.freed_pages, [])
                continue
            break

        # The first round: step 48, decode 48 > 32 at a multiple of 16.
        self.assertEqual(step, 48)
        self.assertTrue(out.evicted)
        self.assertEqual(out.new_length, PROMPT + BUDGET)
        self.assertEqual(out.evicted_tokens, decode - BUDGET)
        first_freed = math.ceil((PROMPT + BUDGET) / PAGE_TOKENS)
        last = math.ceil(length / PAGE_TOKENS)
        self.assertEqual(out.freed_pages, [int(p) for p in self.table[first_freed:last]])

        # Only the request's pages changed, and they did change.
        own = np.zeros(NUM_PAGES, dtype=bool)
        own[self.table] = True
        changed = False
        for layer in range(LAYERS):
            for before, after in ((k_before[layer], self.k[layer]),
                                  (v_before[layer], self.v[layer])):
                np.testing.assert_array_equal(before[~own], after[~own])
                changed = changed or not np.array_equal(before[own], after[own])
        self.assertTrue(changed, "the round moved no row")

        # The prompt stays; the kept rows are rows of the old decode region, each once, with V
        # moved along with K (union mode: one token set for every layer and head).
        for layer in range(LAYERS):
            for head in range(KV_HEADS):
                for t in range(PROMPT):
                    np.testing.assert_array_equal(self.row(self.k, layer, head, t),
                                                  self.row(k_before, layer, head, t))
                old = {self.row(k_before, layer, head, t).tobytes(): t
                       for t in range(PROMPT, length)}
                sources = []
                for t in range(PROMPT, PROMPT + BUDGET):
                    key = self.row(self.k, layer, head, t).tobytes()
                    self.assertIn(key, old, f"layer {layer} head {head} token {t}")
                    source = old[key]
                    sources.append(source)
                    np.testing.assert_array_equal(self.row(self.v, layer, head, t),
                                                  self.row(v_before, layer, head, source))
                self.assertEqual(len(set(sources)), BUDGET)

        state = evictor.state(7)
        self.assertEqual(state["prompt_len"], PROMPT)
        self.assertEqual(state["confirmed_length"], PROMPT + BUDGET)
        self.assertEqual(state["generation_steps"], 48)
        self.assertEqual(state["evicted_tokens"], decode - BUDGET)

        # The next step continues from the new length (a dict works as well as a StepRequest).
        outcomes = evictor.on_generation_step_end(
            [{"id": 7, "block_table": list(self.table), "length": PROMPT + BUDGET + 1,
              "prompt_len": PROMPT}])
        self.assertFalse(outcomes[0].evicted)
        self.assertEqual(outcomes[0].new_length, PROMPT + BUDGET + 1)

        # A wrong prompt_len is a ValueError naming it, and changes nothing.
        with self.assertRaises(ValueError) as ctx:
            evictor.on_generation_step_end([kvtier.StepRequest(
                id=7, new_tokens=1, block_table=self.table, length=PROMPT + BUDGET + 2,
                prompt_len=PROMPT + 1)])
        self.assertIn("prompt_len", str(ctx.exception))
        self.assertIn("INVALID_ARGUMENT", str(ctx.exception))
        self.assertEqual(evictor.state(7)["generation_steps"], 49)

        # Unknown ids are KeyErrors; a duplicate add a ValueError.
        with self.assertRaises(KeyError) as ctx:
            evictor.on_generation_step_end([kvtier.StepRequest(
                id=8, new_tokens=1, block_table=self.table, length=PROMPT + 1,
                prompt_len=PROMPT)])
        self.assertIn("NOT_FOUND", str(ctx.exception))
        with self.assertRaises(KeyError):
            evictor.state(8)
        with self.assertRaises(ValueError):
            evictor.add_request(7, PROMPT)
        evictor.remove_request(7)
        with self.assertRaises(KeyError):
            evictor.remove_request(7)
        self.assertEqual(evictor.num_requests, 0)

    def test_bad_config(self):
        with self.assertRaises(ValueError) as ctx:
            self.make_evictor(kvtier.EvictorConfig(budget=0, beta=BETA))
        self.assertIn("budget", str(ctx.exception))

    def test_bad_calibration(self):
        with self.assertRaises(ValueError) as ctx:  # 3 layers against a 2-layer view
            kvtier.Evictor.create_from_arrays(
                kvtier.EvictorConfig(budget=BUDGET, beta=BETA),
                np.zeros(3 * QUERY_HEADS * BANDS, np.float32),
                np.zeros(3 * QUERY_HEADS * BANDS, np.float32),
                np.ones(3 * QUERY_HEADS * BANDS, np.float32), self.omega, self.freq_scale_sq,
                3, QUERY_HEADS, self.view)
        self.assertIn("layers", str(ctx.exception))

    def test_missing_calibration_file(self):
        with self.assertRaises(Exception) as ctx:
            kvtier.Evictor.create(kvtier.EvictorConfig(budget=BUDGET, beta=BETA),
                                  "/nonexistent/calibration.pt", "/nonexistent/config.json",
                                  self.view)
        self.assertIn("/nonexistent", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
