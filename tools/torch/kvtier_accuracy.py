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

  calibrate     The trained model's TriAttention calibration in the official {metadata, stats}
                layout (kvtier_calibrate.py) from sequences of a seed no evaluation set uses.
  triattention  The context is generated instead: after a short prompt every token is fed as
                one decode step (teacher forcing) and TriAttention (kvtier.transformers.
                TriAttention, the Evictor's GPU round) evicts decode tokens at several budgets;
                answer perplexity and retrieval accuracy against dense decoding and, with
                --window, a cache that keeps the prompt and the most recent tokens.

Usage (GPU machine, the kvtier wheel on PYTHONPATH, a CUDA kvtierd):
  kvtier_accuracy.py train --model-dir DIR [--steps N]
  kvtier_accuracy.py eval --model-dir DIR --kvtierd PATH [--sets N] [--json FILE]
  kvtier_accuracy.py calibrate --model-dir DIR
  kvtier_accuracy.py triattention --model-dir DIR [--budgets 128,256] [--window] [--json FILE]
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

    def __init__(self, seed: int, length: int, records: int = 24, queries: int = 16) -> None:
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

    def batch_with_answers(self, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """n sequences and a mask of their answer positions."""
        tokens, mask = [], torch.zeros(n, self.length, dtype=torch.bool)
        for i in range(n):
            t, answers, _ = self.sample()
            tokens.append(t)
            mask[i, answers] = True
        return torch.tensor(tokens), mask


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
        x, mask = corpus.batch_with_answers(args.batch)
        x, mask = x.cuda(), mask.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        # Every token's loss, plus the answers' on their own: answers are 2% of the tokens, and
        # retrieval is what the evaluation measures.
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, VOCAB),
                                               x[:, 1:].reshape(-1), reduction="none")
        ce = ce.view(x.shape[0], -1)
        answer = (ce * mask[:, 1:]).sum() / mask[:, 1:].sum()
        loss = ce.mean() + args.answer_weight * answer
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {ce.mean().item():.4f}  answer loss "
                  f"{answer.item():.4f}  {time.time() - start:6.1f} s", flush=True)
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


# ---- TriAttention: calibration and decode-time eviction ------------------------------------

def calibration_path(args: argparse.Namespace) -> str:
    return args.calibration or os.path.join(args.model_dir, "kvtier.calib.pt")


def calibrate_model(args: argparse.Namespace) -> int:
    """Writes the model's calibration ({metadata, stats}) from generated sequences of a seed no
    evaluation set uses."""
    from transformers import Qwen3ForCausalLM
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kvtier_calibrate import calibrate, save  # noqa: E402

    model = Qwen3ForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16).cuda().eval()
    corpus = Corpus(seed=3_000_000, length=args.length)
    batches = [corpus.batch(4) for _ in range(args.calibration_sequences // 4)]
    calibration = calibrate(model, batches, model_name="kvtier-accuracy")
    path = calibration_path(args)
    save(calibration, path)
    m = calibration["metadata"]
    print(f"{path}: {len(calibration['stats'])} (layer, query head) entries, {m['tokens']} "
          f"tokens, head_dim {m['head_dim']}, q_norm applied: {m['q_norm_applied']}")
    return 0


def crop_to_window(past: Any, config: Any, prompt: int, keep: int) -> Any:
    """The recent-window baseline: the prompt and the last `keep` decode tokens."""
    from kvtier.transformers import cache_layers, make_dynamic_cache
    layers = [(torch.cat([k[:, :, :prompt], k[:, :, -keep:]], 2),
               torch.cat([v[:, :, :prompt], v[:, :, -keep:]], 2)) for k, v in cache_layers(past)]
    return make_dynamic_cache(layers, config)


@torch.no_grad()
def decode_scores(model: Any, x: torch.Tensor, prompt: int, method: Any) -> Tuple[torch.Tensor,
                                                                                   torch.Tensor,
                                                                                   int]:
    """Teacher-forced decoding of x (batch, length): the first `prompt` tokens are prefilled,
    every later token is fed as one generation step, with `method` between steps (None: dense;
    ("tri", TriAttention); ("window", budget, beta)). Returns -log p and hit (argmax == token)
    for every position 1..length-1 (index = position) and the largest cache length seen."""
    from kvtier.transformers import cache_layers
    b, n = x.shape
    nll = torch.zeros(b, n, device=x.device)
    hit = torch.zeros(b, n, dtype=torch.bool, device=x.device)

    def record(logits: torch.Tensor, pos: int) -> None:  # logits predicting token `pos`
        logp = torch.log_softmax(logits.float(), -1)
        nll[:, pos] = -logp.gather(1, x[:, pos:pos + 1]).squeeze(1)
        hit[:, pos] = logits.argmax(-1) == x[:, pos]

    out = model(input_ids=x[:, :prompt], use_cache=True)
    past = out.past_key_values
    record(out.logits[:, -1], prompt)
    tri = method[1] if method and method[0] == "tri" else None
    if tri is not None:
        tri.start(past)
    longest = prompt
    for pos in range(prompt, n - 1):
        if tri is not None:
            positions = tri.position_ids()
        else:
            positions = torch.full((b, 1), pos, dtype=torch.long, device=x.device)
        out = model(input_ids=x[:, pos:pos + 1], past_key_values=past, position_ids=positions,
                    use_cache=True)
        record(out.logits[:, -1], pos + 1)
        past = out.past_key_values
        cached = int(cache_layers(past)[0][0].shape[-2])
        longest = max(longest, cached)
        if tri is not None:
            past = tri.step(past)
        elif method and method[0] == "window":
            budget, beta = method[1], method[2]
            if cached >= prompt + budget + beta:
                past = crop_to_window(past, model.config, prompt, budget)
    if tri is not None:
        tri.finish()
    return nll, hit, longest


@torch.no_grad()
def evaluate_triattention(args: argparse.Namespace) -> int:
    """Answer perplexity and retrieval accuracy when the context is generated (teacher-forced
    decoding after a short prompt) with TriAttention evicting decode tokens at several budgets,
    against dense decoding and a recent-window cache of the same budget."""
    import kvtier
    from transformers import Qwen3ForCausalLM

    from kvtier.transformers import TriAttention

    model = Qwen3ForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16).cuda().eval()
    budgets = [int(b) for b in args.budgets.split(",") if b]
    modes = [m for m in args.modes.split(",") if m]
    variants: List[Tuple[str, Any]] = [("dense", None)]
    for budget in budgets:
        for mode in modes:
            block = kvtier.parse_compression_config(
                f"algorithm: triattention\nbudget: {budget}\nbeta: {args.beta}\n"
                f"eviction_mode: {mode}\ncalibration_path: {calibration_path(args)}\n"
                f"model_config_path: {os.path.join(args.model_dir, 'config.json')}\n")
            tri = TriAttention(model.config, block, batch=args.batch,
                               max_tokens=args.prompt + budget + args.beta + 16,
                               tokens_per_page=args.page_tokens)
            variants.append((f"triattention {mode} {budget}", ("tri", tri)))
        if args.window:
            variants.append((f"recent window {budget}", ("window", budget, args.beta)))
    per_set: Dict[str, List[Dict[str, float]]] = {v: [] for v, _ in variants}
    longest: Dict[str, int] = {}
    start = time.time()
    for s in range(args.sets):
        corpus = Corpus(seed=1_000_000 + 1000 * s, length=args.length)
        sums = {v: [0.0, 0, 0] for v, _ in variants}
        for _ in range(args.sequences // args.batch):
            samples = [corpus.sample() for _ in range(args.batch)]
            x = torch.tensor([t for t, _, _ in samples], device="cuda")
            for name, method in variants:
                nll, hit, top = decode_scores(model, x, args.prompt, method)
                longest[name] = max(longest.get(name, 0), top)
                acc = sums[name]
                for row, (_, answers, _) in enumerate(samples):
                    idx = torch.tensor(answers, device="cuda")
                    acc[0] += nll[row, idx].sum().item()
                    acc[1] += int(hit[row, idx].sum().item())
                    acc[2] += len(answers)
        for name, _ in variants:
            total, right, count = sums[name]
            per_set[name].append({"perplexity": math.exp(total / count),
                                  "accuracy": right / count})
        print(f"set {s}: {time.time() - start:.1f} s", flush=True)
    summary: Dict[str, Any] = {}
    print(f"{'variant':<28} {'cache':>6} {'answer perplexity':>20} {'retrieval accuracy':>20}   "
          f"(mean ± spread over {args.sets} sets of {args.sequences}; prompt {args.prompt}, "
          f"{args.length - args.prompt} decode tokens)")
    spread = (lambda xs: (max(xs) - min(xs)) / 2 if len(xs) > 1 else 0.0)  # noqa: E731
    for name, _ in variants:
        ppl = [r["perplexity"] for r in per_set[name]]
        acc = [r["accuracy"] for r in per_set[name]]
        summary[name] = {"perplexity": statistics.mean(ppl), "perplexity_spread": spread(ppl),
                         "accuracy": statistics.mean(acc), "accuracy_spread": spread(acc),
                         "longest_cache": longest[name], "sets": per_set[name]}
        print(f"{name:<28} {longest[name]:>6} {statistics.mean(ppl):>12.4f} ± "
              f"{spread(ppl):<6.4f} {statistics.mean(acc):>12.4f} ± {spread(acc):<6.4f}")
    line = json.dumps({"command": "triattention", "length": args.length, "prompt": args.prompt,
                       "beta": args.beta, "sets": args.sets, "sequences": args.sequences,
                       "variants": summary})
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("train", "eval", "calibrate", "triattention"))
    p.add_argument("--model-dir", default="/tmp/kvtier-accuracy-model")
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=32,
                   help="training batch; sequences decoded together (triattention)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--answer-weight", type=float, default=1.0,
                   help="weight of the answer tokens' mean loss, added to every token's")
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--kvtierd", default="")
    p.add_argument("--socket", default="")
    p.add_argument("--page-tokens", type=int, default=16)
    p.add_argument("--sets", type=int, default=3)
    p.add_argument("--sequences", type=int, default=64)
    p.add_argument("--json", default="")
    p.add_argument("--calibration", default="", help="default: MODEL_DIR/kvtier.calib.pt")
    p.add_argument("--calibration-sequences", type=int, default=16)
    p.add_argument("--budgets", default="128,256,384,512", help="TriAttention decode budgets")
    p.add_argument("--modes", default="union", help="eviction modes, comma-separated")
    p.add_argument("--beta", type=int, default=64)
    p.add_argument("--prompt", type=int, default=64, help="prefilled (pinned) tokens")
    p.add_argument("--window", action="store_true", help="also a recent-window cache per budget")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 0
    commands = {"train": train, "eval": evaluate, "calibrate": calibrate_model,
                "triattention": evaluate_triattention}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
