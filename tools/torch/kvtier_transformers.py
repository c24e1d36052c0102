#!/usr/bin/env python3
"""A transformers model (Qwen3 architecture from transformers' own config and model classes,
random weights) reading the KV pages kvtierd returns, through kvtier.transformers.PrefixCache.

  correctness  One prompt: the logits of its last tokens computed (a) over the whole prompt,
               twice, (b) after the model's own cache of the prefix (a chunked prefill, no
               kvtier), and (c) after the prefix's pages went to kvtierd and came back, per codec
               (raw, nvfp4, nvfp4+rope, nvfp4x2; nvfp4 also after a second round trip). Reports
               the largest logit difference of each against (a) and (b), next-token top-1
               agreement and KL(a || c); exits 1 if raw is not bit-identical to (b) or differs
               from (a) by more than (b) does.
  sessions     Multi-turn agentic sessions (a system prompt shared by every session, a tool
               result appended each turn, greedy answers): each turn's time to first token
               without kvtier (the whole prompt prefilled, as transformers does by itself) and
               with it (load the stored prefix, prefill the rest, store the new pages after the
               turn; or park/resume the request around each tool call), in one run.

Both start their own kvtierd (--kvtierd, a CUDA build) unless --socket names a running one, and
print a JSON summary line at the end (also written to --json). Runs in the GPU machine's Python
with torch and transformers (docs/ACCURACY.md and docs/PERFORMANCE.md have the commands).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import torch

import kvtier
from kvtier.transformers import PrefixCache

CODECS = ("raw", "nvfp4", "nvfp4+rope", "nvfp4x2")

# Model shapes (Qwen3 architecture). "small" for correctness, "8b" is Qwen3-8B's attention and MLP
# shape (the pages of kvtier's other GPU benchmarks), with random weights.
SHAPES = {
    "small": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=32000),
    "8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936),
}


# ---- set-up -----------------------------------------------------------------------------------

class Daemon:
    """A kvtierd of our own in a temporary directory (or none when a socket is given)."""

    def __init__(self, kvtierd: str, socket: str, settings: List[str]) -> None:
        self.dir: Optional[str] = None
        self.proc: Optional[subprocess.Popen] = None
        self.socket = socket
        if socket:
            return
        if not kvtierd:
            sys.exit("give --kvtierd PATH (a CUDA build) or --socket of a running kvtierd")
        self.dir = tempfile.mkdtemp(prefix="kvtier-transformers-")
        self.socket = os.path.join(self.dir, "kvtier.sock")
        self.log = open(os.path.join(self.dir, "kvtierd.log"), "wb")
        self.proc = subprocess.Popen(
            [kvtierd, f"--state-dir={self.dir}/state", f"--socket={self.socket}",
             '--set=metrics.listen=""', *settings], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.flush()
                sys.stderr.write(open(os.path.join(self.dir, "kvtierd.log")).read())
                sys.exit(f"kvtierd did not start (status {self.proc.poll()})")
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.log.close()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def build_model(shape: str, seed: int, max_positions: int,
                dtype: torch.dtype = torch.bfloat16) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(**SHAPES[shape], max_position_embeddings=max_positions,
                         tie_word_embeddings=False)
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.eval()
    return model


def sync() -> None:
    torch.cuda.synchronize()


@torch.no_grad()
def forward(model: Any, ids: List[int], cache: Any = None, keep: int = 0) -> Any:
    """The model over `ids` after `cache` (None: from scratch); logits of the last `keep`
    positions (0: all)."""
    x = torch.tensor([ids], device="cuda")
    kwargs = {"logits_to_keep": keep} if keep else {}
    return model(input_ids=x, past_key_values=cache, use_cache=True, **kwargs)


# ---- correctness ------------------------------------------------------------------------------

def compare(ref: torch.Tensor, got: torch.Tensor) -> Dict[str, float]:
    """Max |logit difference|, top-1 agreement and KL(ref || got) (nats, mean and max over
    positions) of two (positions, vocab) logit tensors."""
    ref, got = ref.float(), got.float()
    lp_ref, lp_got = torch.log_softmax(ref, -1), torch.log_softmax(got, -1)
    kl = (lp_ref.exp() * (lp_ref - lp_got)).sum(-1)
    return {"max_abs_logit_diff": (ref - got).abs().max().item(),
            "top1_agreement": (ref.argmax(-1) == got.argmax(-1)).float().mean().item(),
            "kl_mean": kl.mean().item(), "kl_max": kl.max().item()}


def run_correctness(args: argparse.Namespace, client: kvtier.Client) -> Dict[str, Any]:
    model = build_model(args.shape, args.seed, args.prefix_tokens + args.suffix_tokens + 64,
                        getattr(torch, args.dtype))
    g = torch.Generator().manual_seed(args.seed + 1)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (args.prefix_tokens + args.suffix_tokens,),
                           generator=g).tolist()
    prefix, suffix = prompt[:args.prefix_tokens], prompt[args.prefix_tokens:]
    n = len(suffix)
    full1 = forward(model, prompt).logits[0, -n:]
    full2 = forward(model, prompt).logits[0, -n:]
    own = forward(model, prefix)
    chunked = forward(model, suffix, own.past_key_values).logits[0]
    rows: Dict[str, Any] = {
        "recompute_twice": compare(full1, full2),
        "model_cache_chunked": compare(full1, chunked),
    }
    prefix_kv = forward(model, prefix).past_key_values
    for codec in args.codecs:
        trips = 2 if codec == "nvfp4" else 1
        kv = prefix_kv
        for trip in range(1, trips + 1):
            cache = PrefixCache(client, model.config, model_name=f"corr-{codec}-trip{trip}",
                                codec=codec, slots=args.prefix_tokens // args.page_tokens + 8,
                                tokens_per_page=args.page_tokens, dtype=getattr(torch, args.dtype))
            stored = cache.store(prefix, kv)
            loaded = cache.load(prompt)
            if loaded.tokens != args.prefix_tokens:
                raise SystemExit(f"{codec}: {loaded.tokens} of {args.prefix_tokens} prefix "
                                 f"tokens came back ({stored} pages stored)")
            kv = loaded.past_key_values
            # forward() extends the cache it is given: keep `kv` for the next trip unextended.
            logits = forward(model, suffix, copy.deepcopy(kv)).logits[0]
            key = codec if trips == 1 else f"{codec} (trip {trip})"
            rows[key] = {"vs_recompute": compare(full1, logits),
                         "vs_model_cache": compare(chunked, logits)}
            cache.close()
    raw = rows.get("raw")
    ok = True
    if raw is not None:
        own_diff = rows["model_cache_chunked"]["max_abs_logit_diff"]
        if raw["vs_model_cache"]["max_abs_logit_diff"] != 0.0:
            print("FAILED: raw through kvtier is not bit-identical to the model's own cache")
            ok = False
        if raw["vs_recompute"]["max_abs_logit_diff"] > max(own_diff,
                                                           rows["recompute_twice"]
                                                           ["max_abs_logit_diff"]):
            print("FAILED: raw through kvtier differs from recompute by more than the model's "
                  "own chunked prefill does")
            ok = False
    print(f"{'case':<22} {'max|dlogit| vs recompute':>25} {'top-1':>7} {'KL mean':>10} "
          f"{'KL max':>10}   {'max|dlogit| vs model cache':>27}")
    for key, row in rows.items():
        r = row.get("vs_recompute", row)
        extra = row.get("vs_model_cache", {}).get("max_abs_logit_diff")
        print(f"{key:<22} {r['max_abs_logit_diff']:>25.6g} {r['top1_agreement']:>7.4f} "
              f"{r['kl_mean']:>10.3g} {r['kl_max']:>10.3g}   "
              f"{'' if extra is None else f'{extra:.6g}':>27}")
    return {"ok": ok, "shape": args.shape, "dtype": args.dtype,
            "prefix_tokens": args.prefix_tokens,
            "suffix_tokens": n, "rows": rows}


# ---- sessions ---------------------------------------------------------------------------------

class GpuPrefixStore:
    """The reference for kvtier's prefix path: the same pages (BlockHasher hashes, the same page
    boundaries) kept as tensors in GPU memory, unbounded, no kvtierd. With `raw` kvtier must give
    the same answers; its time to first token is the floor of any prefix cache."""

    def __init__(self, config: Any, page_tokens: int) -> None:
        self.config = config
        self.t = page_tokens
        self.hasher = kvtier.BlockHasher(bytes(32), page_tokens)
        self.pages: Dict[bytes, List[Any]] = {}

    def load(self, tokens: List[int]) -> Any:
        from kvtier.transformers import Prefix, make_dynamic_cache
        usable = (len(tokens) - 1) // self.t
        hit = []
        for h in self.hasher.hash(tokens[:usable * self.t]):
            if h not in self.pages:
                break
            hit.append(self.pages[h])
        if not hit:
            return Prefix(None, 0, 0)
        layers = [(torch.cat([p[i][0] for p in hit], dim=1), torch.cat([p[i][1] for p in hit],
                                                                       dim=1))
                  for i in range(len(hit[0]))]
        return Prefix(make_dynamic_cache(layers, self.config), len(hit) * self.t, len(hit))

    def store(self, tokens: List[int], past: Any, from_page: int = 0) -> int:
        from kvtier.transformers import cache_layers
        layers = cache_layers(past)
        full = min(len(tokens), layers[0][0].shape[-2]) // self.t
        hashes = self.hasher.hash(tokens[:full * self.t])
        for p in range(from_page, full):
            lo, hi = p * self.t, (p + 1) * self.t
            self.pages.setdefault(hashes[p], [(k[0, :, lo:hi].clone(), v[0, :, lo:hi].clone())
                                              for k, v in layers])
        return max(0, full - from_page)

    def close(self) -> None:
        self.pages.clear()


class GpuKeeper:
    """The reference for kvtier's park/resume: the request's cache simply stays on the GPU
    through the tool call."""

    def __init__(self) -> None:
        self.kept: Dict[str, Any] = {}

    def park(self, request_id: str, tokens: List[int], past: Any) -> int:
        del tokens
        self.kept[request_id] = past
        return 0

    def resume(self, request_id: str) -> Any:
        return self.kept.pop(request_id)


def compare_pages(got: Any, want: Any, t: int, checked: Dict[str, Any]) -> None:
    """Counts the pages of `got` (a cache kvtierd returned) equal bit for bit to `want`'s (the
    model's own KV of the same tokens), over every layer, K and V."""
    from kvtier.transformers import cache_layers
    a, b = cache_layers(got), cache_layers(want)
    n = a[0][0].shape[-2]
    if b[0][0].shape[-2] < n:
        raise SystemExit(f"shadow check: {b[0][0].shape[-2]} reference tokens for {n}")
    same = None
    for (ka, va), (kb, vb) in zip(a, b):
        for x, y in ((ka, kb), (va, vb)):
            y = y[..., :n, :]
            diff = (x.float() - y.float()).abs()
            checked["max_abs_diff"] = max(checked["max_abs_diff"], diff.max().item())
            per_token = (x == y).all(-1).all(1)[0]  # (tokens,)
            same = per_token if same is None else same & per_token
    pages = -(-n // t)
    padded = torch.ones(pages * t, dtype=torch.bool, device=same.device)
    padded[:n] = same
    checked["pages"] += pages
    checked["identical"] += int(padded.view(pages, t).all(-1).sum().item())


def percentile(values: List[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


@torch.no_grad()
def greedy(model: Any, cache: Any, first: int, count: int) -> List[int]:
    """`count` greedy tokens starting with `first` (the prefill's); the cache ends holding every
    token but the last one generated."""
    out = [first]
    for _ in range(count - 1):
        step = model(input_ids=torch.tensor([[out[-1]]], device="cuda"), past_key_values=cache,
                     use_cache=True)
        out.append(int(step.logits[0, -1].argmax(-1)))
    return out


# Each mode: (what keeps prefixes across requests, what keeps a request across its tool calls,
# the mode whose answers it must reproduce exactly with raw pages).
MODE_HELP = ("recompute (every prompt prefilled whole), gpu-prefix (the reference prefix cache in "
             "GPU memory), kvtier:CODEC (prefixes through kvtierd), gpu-keep (the request's cache "
             "stays on the GPU across tool calls), park:CODEC (parked in kvtierd across tool "
             "calls)")


def run_sessions(args: argparse.Namespace, client: kvtier.Client) -> Dict[str, Any]:
    longest = args.system_tokens + args.turns * (args.tool_tokens + args.answer_tokens)
    model = build_model(args.shape, args.seed, longest + 64)
    vocab = model.config.vocab_size
    t = args.page_tokens
    g = torch.Generator().manual_seed(args.seed + 2)
    system = torch.randint(0, vocab, (args.system_tokens,), generator=g).tolist()
    tools = [[torch.randint(0, vocab, (args.tool_tokens,), generator=g).tolist()
              for _ in range(args.turns)] for _ in range(args.sessions)]
    forward(model, system[:256], keep=1)  # kernels and allocator warm, outside the turns
    sync()
    kv_bytes_per_token = 2 * 2 * model.config.num_hidden_layers * \
        model.config.num_key_value_heads * (model.config.head_dim or 128)
    results: Dict[str, Any] = {}
    answers: Dict[str, List[List[int]]] = {}
    for mode in args.modes:
        kind, _, codec = mode.split("#")[0].partition(":")  # "#N": a repeat of a mode
        prefixes: Any = None
        keeper: Any = None
        if kind in ("kvtier", "park"):
            prefixes = PrefixCache(client, model.config, model_name=f"sessions-{mode}",
                                   codec=codec or "raw", slots=longest // t + 16,
                                   tokens_per_page=t)
            # Registration's first transfers (CUDA IPC mappings in kvtierd) before the turns,
            # as an engine does them once at start-up.
            warm = list(range(vocab - 2 * t - 1, vocab))
            prefixes.store(warm, forward(model, warm).past_key_values)
            prefixes.load(warm)
            keeper = prefixes if kind == "park" else None
        elif kind in ("gpu-prefix", "gpu-keep"):
            prefixes = GpuPrefixStore(model.config, t)
            keeper = GpuKeeper() if kind == "gpu-keep" else None
        elif kind != "recompute":
            raise SystemExit(f"unknown mode {mode!r}: {MODE_HELP}")
        # kvtier's modes also keep the same pages in a GpuPrefixStore (and the parked caches, as
        # copies) and compare every page kvtierd returns with it, bit for bit.
        shadow = GpuPrefixStore(model.config, t) if kind in ("kvtier", "park") else None
        shadow_parked: Dict[str, Any] = {}
        checked = {"pages": 0, "identical": 0, "max_abs_diff": 0.0}
        history = [list(system) for _ in range(args.sessions)]
        parked: Dict[int, int] = {}
        stored_pages = [0] * args.sessions  # pages of each session's history known stored
        ttft: List[float] = []
        load_s: List[float] = []
        after_s: List[float] = []
        prefilled = cached = prompt_tokens = 0
        outs: List[List[int]] = []
        for turn in range(args.turns):
            for s in range(args.sessions):  # sessions interleave: turn t of every one, then t+1
                prompt = history[s] + tools[s][turn]
                prompt_tokens += len(prompt)
                sync()
                start = time.perf_counter()
                past, done = None, 0
                if keeper is not None and s in parked:
                    past, done = keeper.resume(f"s{s}"), parked.pop(s)
                elif prefixes is not None:
                    prefix = prefixes.load(prompt)
                    past, done = prefix.past_key_values, prefix.tokens
                    stored_pages[s] = prefix.pages
                sync()
                loaded = time.perf_counter()
                if shadow is not None and past is not None:  # outside the timed span
                    want = (shadow_parked.pop(f"s{s}") if f"s{s}" in shadow_parked
                            else shadow.load(prompt).past_key_values)
                    compare_pages(past, want, t, checked)
                    sync()
                    start += time.perf_counter() - loaded
                    loaded = time.perf_counter()
                if past is None:
                    past = make_empty_cache(model)
                out = forward(model, prompt[done:], past, keep=1)
                first = int(out.logits[0, -1].argmax(-1))
                sync()
                ttft.append(time.perf_counter() - start)
                load_s.append(loaded - start)
                prefilled += len(prompt) - done
                cached += done
                answer = greedy(model, out.past_key_values, first, args.answer_tokens)
                outs.append(answer)
                history[s] = prompt + answer
                sync()
                t0 = time.perf_counter()
                if keeper is not None and turn + 1 < args.turns:
                    if turn == 0:  # the prompt's pages, for the other sessions' system prompt
                        prefixes.store(prompt, out.past_key_values, from_page=stored_pages[s])
                        stored_pages[s] = len(prompt) // t
                    keeper.park(f"s{s}", history[s], out.past_key_values)
                    parked[s] = len(history[s]) - 1
                elif prefixes is not None:
                    prefixes.store(history[s], out.past_key_values, from_page=stored_pages[s])
                    stored_pages[s] = (len(history[s]) - 1) // t
                sync()
                after_s.append(time.perf_counter() - t0)
                if shadow is not None:
                    if keeper is not None and turn + 1 < args.turns:
                        if turn == 0:
                            shadow.store(prompt, out.past_key_values)
                        shadow_parked[f"s{s}"] = copy.deepcopy(out.past_key_values)
                    else:
                        shadow.store(history[s], out.past_key_values)
                del out, past
        answers[mode] = outs
        results[mode] = {
            "turns": len(ttft), "ttft_median_ms": 1e3 * statistics.median(ttft),
            "ttft_p90_ms": 1e3 * percentile(ttft, 0.9), "ttft_mean_ms": 1e3 * statistics.mean(ttft),
            "load_median_ms": 1e3 * statistics.median(load_s),
            "load_p90_ms": 1e3 * percentile(load_s, 0.9),
            "prompt_tokens": prompt_tokens, "prefill_tokens": prefilled, "cached_tokens": cached,
            "cached_gb": cached * kv_bytes_per_token / 1e9,
            "after_turn_ms_median": 1e3 * statistics.median(after_s),
            "ttft_ms": [round(1e3 * x, 3) for x in ttft],
            "answers": outs,
        }
        if shadow is not None:
            results[mode]["pages_checked"] = dict(checked)
            shadow.close()
        if prefixes is not None:
            prefixes.close()
    ok = True
    for mode, r in results.items():
        c = r.get("pages_checked")
        if c is not None:
            print(f"{mode}: {c['identical']} of {c['pages']} pages returned by kvtierd are "
                  f"bit-identical to the model's own (max |difference| {c['max_abs_diff']:.4g})")
            if mode.endswith(":raw") and c["identical"] != c["pages"]:
                print(f"FAILED: {mode} returned pages that differ from the model's")
                ok = False
    print(f"{'mode':<14} {'TTFT median ms':>15} {'p90 ms':>8} {'load median ms':>15} "
          f"{'prefill tokens':>15} {'from cache':>11} {'after-turn ms':>14} {'answers':>16}")
    for mode, r in results.items():
        base_mode = mode.split("#")[0]
        kind, _, codec = base_mode.partition(":")
        ref = {"kvtier": "gpu-prefix", "park": "gpu-keep"}.get(kind)
        if base_mode != mode:
            ref, codec = base_mode, "raw"  # a repeat must give its mode's answers
        same = ""
        if ref in answers:
            agree = sum(1 for a, b in zip(answers[ref], answers[mode]) if a == b)
            r["answers_equal_to"] = {"mode": ref, "turns": agree}
            same = f"{agree}/{len(answers[ref])} = {ref}"
        if "recompute" in results and mode != "recompute":
            base = results["recompute"]
            r["ttft_median_speedup"] = base["ttft_median_ms"] / r["ttft_median_ms"]
            r["ttft_p90_speedup"] = base["ttft_p90_ms"] / r["ttft_p90_ms"]
        print(f"{mode:<14} {r['ttft_median_ms']:>15.2f} {r['ttft_p90_ms']:>8.2f} "
              f"{r['load_median_ms']:>15.2f} {r['prefill_tokens']:>15,} "
              f"{r['cached_tokens']:>11,} {r['after_turn_ms_median']:>14.2f} {same:>16}")
    return {"ok": ok, "shape": args.shape, "sessions": args.sessions, "turns": args.turns,
            "system_tokens": args.system_tokens, "tool_tokens": args.tool_tokens,
            "answer_tokens": args.answer_tokens, "kv_bytes_per_token": kv_bytes_per_token,
            "modes": results}


def make_empty_cache(model: Any) -> Any:
    from transformers import DynamicCache
    try:
        return DynamicCache(config=model.config)
    except TypeError:
        return DynamicCache()


# ---- main -------------------------------------------------------------------------------------

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("correctness", "sessions"))
    p.add_argument("--kvtierd", default="", help="a CUDA kvtierd to start (default: --socket)")
    p.add_argument("--socket", default="", help="a running kvtierd's socket")
    p.add_argument("--host-capacity", default="12GiB")
    p.add_argument("--shape", choices=sorted(SHAPES), default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--page-tokens", type=int, default=16)
    p.add_argument("--json", default="", help="also write the summary here")
    c = p.add_argument_group("correctness")
    c.add_argument("--prefix-tokens", type=int, default=1024)
    c.add_argument("--suffix-tokens", type=int, default=64)
    c.add_argument("--codecs", default=",".join(CODECS))
    c.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16",
                   help="the model's (and its KV pages') dtype")
    s = p.add_argument_group("sessions")
    s.add_argument("--sessions", type=int, default=4)
    s.add_argument("--turns", type=int, default=6)
    s.add_argument("--system-tokens", type=int, default=2048)
    s.add_argument("--tool-tokens", type=int, default=512)
    s.add_argument("--answer-tokens", type=int, default=16)
    s.add_argument("--modes", default="recompute,gpu-prefix,kvtier:raw,kvtier:nvfp4,gpu-keep,"
                   "park:raw,park:nvfp4", help=MODE_HELP)
    args = p.parse_args()
    args.codecs = [c for c in args.codecs.split(",") if c]
    args.modes = [m for m in args.modes.split(",") if m]
    if args.shape is None:
        args.shape = "small" if args.command == "correctness" else "8b"
    if args.prefix_tokens % args.page_tokens:
        p.error("--prefix-tokens must be a multiple of --page-tokens")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 0
    daemon = Daemon(args.kvtierd, args.socket,
                    [f"--set=host.capacity={args.host_capacity}", "--set=host.chunk=64MiB",
                     "--set=disk.capacity=0"])
    try:
        client = kvtier.Client.connect(socket=daemon.socket, client_name="kvtier-transformers",
                                       timeout=120.0)
        import transformers
        print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers "
              f"{transformers.__version__}, {torch.cuda.get_device_name()}, kvtier "
              f"{kvtier.__version__}, model shape {args.shape} {SHAPES[args.shape]}")
        run = run_correctness if args.command == "correctness" else run_sessions
        summary = run(args, client)
        client.close()
    finally:
        daemon.close()
    line = json.dumps({"command": args.command, **summary})
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
