#!/usr/bin/env python3
"""Accuracy of kvtier's cold pages on a trained model (issue 25; docs/ACCURACY.md).

  train  Trains a small Qwen3-architecture model (transformers' own classes: RoPE, GQA) on a
         generated corpus with long-range retrieval, a few minutes on the H200, and saves it to
         --model-dir (carried between runs on the same machine).
  eval   For held-out sequences, the context (everything before the final queries, cut to whole
         pages) is cached and its pages go through kvtierd; the queries and their answers are
         then scored: perplexity of the answer tokens and exact-match retrieval accuracy, for
         dense (the model's own cache), raw, nvfp4 after 1 and 2 round trips, nvfp4+rope,
         nvfp4x2, and the identity-global-scale NVFP4 scheme (emulated here in torch: block
         scale amax/6 rounded to E4M3, no per-buffer scale) as a reference. Several disjoint
         evaluation sets give the spread that "within noise" is judged by.

The corpus: a bigram "language" (every token has a few likely successors, so filler text has a
learnable perplexity) carrying key-value records `K k1 k2 V v1 v2` and one passkey
`P d1 d2 d3 d4 d5` at random places; the sequence ends with queries `Q k1 k2 A -> v1 v2` for
some of its records and `R A -> d1..d5` for the passkey. Answers are only predictable by
attending back to the record, up to the whole context away.

Usage (GPU machine, the kvtier wheel on PYTHONPATH, a CUDA kvtierd):
  kvtier_accuracy.py train --model-dir DIR [--steps N]
  kvtier_accuracy.py eval --model-dir DIR --kvtierd PATH [--sets N] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

import torch

VOCAB = 512
# Special tokens at the top of the vocabulary; keys, values and passkey digits use their own
# ranges so answers are never filler.
K, V, Q, A, P, R = range(VOCAB - 6, VOCAB)
FILLER = range(0, 320)
KEYS = range(320, 416)
VALUES = range(416, 496)
DIGITS = range(496, 506)

SHAPE = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=8,
             num_key_value_heads=2, head_dim=64, vocab_size=VOCAB)


# ---- the corpus -----------------------------------------------------------------------------

class Corpus:
    """Sequences of `length` tokens from generator `seed` (training and each evaluation set use
    disjoint seeds). sample() returns (tokens, answer positions, context length)."""

    def __init__(self, seed: int, length: int, records: int = 24, queries: int = 8) -> None:
        self.rng = random.Random(seed)
        self.length = length
        self.records = records
        self.queries = queries
        # The bigram table is the same for every seed: one "language".
        table = random.Random(1234)
        self.successors = [[table.randrange(FILLER.start, FILLER.stop) for _ in range(4)]
                           for _ in FILLER]

    def _int(self, lo: int, hi: int) -> int:
        return self.rng.randrange(lo, hi)

    def _filler(self, n: int) -> List[int]:
        if n <= 0:
            return []
        out = [self._int(FILLER.start, FILLER.stop)]
        for _ in range(n - 1):
            out.append(self.successors[out[-1] - FILLER.start][self.rng.randrange(4)])
        return out

    def sample(self) -> Tuple[List[int], List[int], int]:
        recs = []
        for code in self.rng.sample(range(len(KEYS) * len(KEYS)), self.records):
            k = [KEYS.start + code // len(KEYS), KEYS.start + code % len(KEYS)]
            v = [self._int(VALUES.start, VALUES.stop), self._int(VALUES.start, VALUES.stop)]
            recs.append((k, v))
        passkey = [self._int(DIGITS.start, DIGITS.stop) for _ in range(5)]
        query_len = self.queries * 7 + 8
        body = self.length - query_len
        inserts = [[K, *k, V, *v] for k, v in recs] + [[P, *passkey]]
        gap = (body - sum(len(x) for x in inserts)) // (len(inserts) + 1)
        order = self.rng.sample(range(len(inserts)), len(inserts))
        tokens: List[int] = []
        for i in order:
            tokens += self._filler(gap) + inserts[i]
        tokens += self._filler(body - len(tokens))
        context = len(tokens)
        answers: List[int] = []
        asked = self.rng.sample(range(len(recs)), self.queries)
        for i in asked:
            k, v = recs[i]
            tokens += [Q, *k, A]
            answers += [len(tokens), len(tokens) + 1]
            tokens += v
        tokens += [R, A]
        answers += list(range(len(tokens), len(tokens) + 5))
        tokens += passkey
        tokens += self._filler(self.length - len(tokens))
        return tokens[:self.length], answers, context

    def batch(self, n: int) -> torch.Tensor:
        return torch.tensor([self.sample()[0] for _ in range(n)])


# ---- the model ------------------------------------------------------------------------------

def new_model(max_positions: int) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(**SHAPE, max_position_embeddings=max_positions,
                         tie_word_embeddings=False)
    return Qwen3ForCausalLM(config)


def train(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    model = new_model(args.length).cuda()
    corpus = Corpus(seed=10_000 + args.seed, length=args.length)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps,
                                                pct_start=0.05)
    start = time.time()
    for step in range(args.steps):
        x = corpus.batch(args.batch).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  {time.time() - start:6.1f} s",
                  flush=True)
        if time.time() - start > args.max_seconds:
            print(f"stopping at step {step}: --max-seconds {args.max_seconds}")
            break
    os.makedirs(args.model_dir, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.model_dir)
    print(f"saved to {args.model_dir}")
    return 0


# ---- NVFP4 with the identity global scale (the reference scheme) ----------------------------

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def identity_scale_nvfp4(x: torch.Tensor) -> torch.Tensor:
    """x quantized and dequantized in groups of 16 along the last dimension with block scale
    amax/6 rounded to E4M3 and no second-level (per-buffer) scale."""
    shape = x.shape
    g = x.float().reshape(-1, 16)
    scale = (g.abs().amax(-1, keepdim=True) / 6.0).to(torch.float8_e4m3fn).float()
    q = torch.where(scale > 0, g / scale, torch.zeros_like(g))
    grid = E2M1.to(x.device)
    idx = (q.abs().unsqueeze(-1) - grid).abs().argmin(-1)
    deq = grid[idx] * q.sign() * scale
    return deq.reshape(shape).to(x.dtype)


# ---- evaluation -----------------------------------------------------------------------------

@torch.no_grad()
def score(model: Any, tokens: List[int], answers: List[int], start: int,
          past: Any) -> Tuple[float, int, int]:
    """(sum of -log p over answer tokens, answers right, answers) for tokens[start:] after
    `past` (tokens[:start])."""
    x = torch.tensor([tokens[start:]], device="cuda")
    logits = model(input_ids=x, past_key_values=past, use_cache=True).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    nll, right = 0.0, 0
    for pos in answers:  # position `pos` is predicted by the logits at pos - 1
        row = pos - 1 - start
        nll -= logp[row, tokens[pos]].item()
        right += int(logits[row].argmax().item() == tokens[pos])
    return nll, right, len(answers)


@torch.no_grad()
def evaluate(args: argparse.Namespace) -> int:
    import kvtier
    from transformers import Qwen3ForCausalLM

    from kvtier.transformers import PrefixCache, cache_layers, make_dynamic_cache
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kvtier_transformers import Daemon  # noqa: E402

    model = Qwen3ForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16).cuda().eval()
    t = args.page_tokens
    daemon = Daemon(args.kvtierd, args.socket, ["--set=host.capacity=4GiB",
                                                "--set=host.chunk=64MiB", "--set=disk.capacity=0"])
    client = kvtier.Client.connect(socket=daemon.socket, client_name="kvtier-accuracy",
                                   timeout=120.0)
    caches: Dict[str, PrefixCache] = {}

    def through(name: str, codec: str, past: Any, tokens: List[int], n: int) -> Any:
        if name not in caches:
            caches[name] = PrefixCache(client, model.config, model_name=f"acc-{name}",
                                       codec=codec, slots=args.length // t + 8,
                                       tokens_per_page=t)
        c = caches[name]
        c.store(tokens[:n], past)
        got = c.load(tokens[:n + 1])
        if got.tokens != n:
            raise SystemExit(f"{name}: {got.tokens} of {n} context tokens came back")
        return got.past_key_values

    variants = ["dense", "raw", "nvfp4", "nvfp4 (2 trips)", "nvfp4+rope", "nvfp4x2",
                "identity-scale nvfp4"]
    per_set: Dict[str, List[Dict[str, float]]] = {v: [] for v in variants}
    for s in range(args.sets):
        corpus = Corpus(seed=1_000_000 + 1000 * s, length=args.length)
        sums = {v: [0.0, 0, 0] for v in variants}
        for _ in range(args.sequences):
            tokens, answers, context = corpus.sample()
            n = (context // t) * t
            own = model(input_ids=torch.tensor([tokens[:n]], device="cuda"),
                        use_cache=True).past_key_values
            for v in variants:
                if v == "dense":
                    past = copy.deepcopy(own)
                elif v == "identity-scale nvfp4":
                    past = make_dynamic_cache([(identity_scale_nvfp4(k[0]),
                                                identity_scale_nvfp4(vv[0]))
                                               for k, vv in cache_layers(own)], model.config)
                elif v == "nvfp4 (2 trips)":
                    once = through("nvfp4", "nvfp4", own, tokens, n)
                    past = through("nvfp4-trip2", "nvfp4", once, tokens, n)
                else:
                    past = through(v, v, own, tokens, n)
                nll, right, count = score(model, tokens, answers, n, past)
                acc = sums[v]
                acc[0] += nll
                acc[1] += right
                acc[2] += count
        for v in variants:
            nll, right, count = sums[v]
            per_set[v].append({"perplexity": math.exp(nll / count), "accuracy": right / count})
    client.close()
    daemon.close()
    summary: Dict[str, Any] = {}
    print(f"{'variant':<22} {'answer perplexity':>22} {'retrieval accuracy':>22}   "
          f"(mean ± spread over {args.sets} sets of {args.sequences})")
    for v in variants:
        ppl = [r["perplexity"] for r in per_set[v]]
        acc = [r["accuracy"] for r in per_set[v]]
        spread = (lambda xs: (max(xs) - min(xs)) / 2 if len(xs) > 1 else 0.0)
        summary[v] = {"perplexity": statistics.mean(ppl), "perplexity_spread": spread(ppl),
                      "accuracy": statistics.mean(acc), "accuracy_spread": spread(acc),
                      "sets": per_set[v]}
        print(f"{v:<22} {statistics.mean(ppl):>14.4f} ± {spread(ppl):<6.4f} "
              f"{statistics.mean(acc):>14.4f} ± {spread(acc):<6.4f}")
    line = json.dumps({"command": "eval", "length": args.length, "sets": args.sets,
                       "sequences": args.sequences, "variants": summary})
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("train", "eval"))
    p.add_argument("--model-dir", default="/tmp/kvtier-accuracy-model")
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--kvtierd", default="")
    p.add_argument("--socket", default="")
    p.add_argument("--page-tokens", type=int, default=16)
    p.add_argument("--sets", type=int, default=3)
    p.add_argument("--sequences", type=int, default=64)
    p.add_argument("--json", default="")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 0
    return train(args) if args.command == "train" else evaluate(args)


if __name__ == "__main__":
    sys.exit(main())
