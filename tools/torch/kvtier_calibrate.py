#!/usr/bin/env python3
"""A TriAttention calibration file for a transformers model, in the official `{metadata, stats}`
layout that kvtier's Evictor (triattention/calibration.h) and TensorRT-LLM read.

For every attention layer and query head, over every token of the calibration text: the mean
of the pre-RoPE query in each rotary band f as a complex number (q[f] + i q[f + head_dim/2],
the "half" rotary style of Llama and Qwen) and the mean of its magnitude. The query is taken as
the model's attention rotates it: after q_proj and, where the model has one (Qwen3), the
per-head q_norm; the cached keys are post-k_norm, so pre-q_norm statistics would describe a
different vector.

  kvtier_calibrate.py --model-dir DIR --text FILE --out calib.pt     (the model's tokenizer)
  kvtier_calibrate.py --model-dir DIR --token-ids FILE --out calib.pt (JSON: lists of ids)

As a module: calibrate(model, batches) returns the dict, save(stats, path) writes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, Iterable, List

import torch


def _head_dim(config: Any) -> int:
    return int(getattr(config, "head_dim", None) or
               config.hidden_size // config.num_attention_heads)


@torch.no_grad()
def calibrate(model: Any, batches: Iterable[torch.Tensor], model_name: str = "") -> Dict[str, Any]:
    """Runs `model` over each batch of token ids ((batch, tokens) tensors on the model's
    device) and returns {metadata, stats} with one entry per (layer, query head)."""
    config = model.config
    layers = model.model.layers
    heads = int(config.num_attention_heads)
    head_dim = _head_dim(config)
    bands = head_dim // 2
    device = next(model.parameters()).device
    sums = [torch.zeros(3, heads, bands, dtype=torch.float64, device=device) for _ in layers]
    counts = [0] * len(layers)

    def hook(index: int) -> Any:
        def pre(module: Any, args: Any, kwargs: Dict[str, Any]) -> None:
            h = kwargs.get("hidden_states", args[0] if args else None)
            q = module.q_proj(h).view(*h.shape[:-1], -1, head_dim)  # (batch, tokens, heads, d)
            if getattr(module, "q_norm", None) is not None:
                q = module.q_norm(q)
            q = q.float()
            re, im = q[..., :bands], q[..., bands:]
            acc = sums[index]
            acc[0] += re.sum(dim=(0, 1)).double()
            acc[1] += im.sum(dim=(0, 1)).double()
            acc[2] += torch.sqrt(re * re + im * im).sum(dim=(0, 1)).double()
            counts[index] += q.shape[0] * q.shape[1]
        return pre

    def register(module: Any, pre: Any) -> Any:
        try:  # transformers passes hidden_states by keyword (torch 2.0 and later)
            return module.register_forward_pre_hook(pre, with_kwargs=True)
        except TypeError:  # older torch: positional arguments only
            return module.register_forward_pre_hook(lambda m, args: pre(m, args, {}))

    handles = [register(layer.self_attn, hook(i)) for i, layer in enumerate(layers)]
    traces = 0
    try:
        for batch in batches:
            model(input_ids=batch.to(device), use_cache=False)
            traces += int(batch.shape[0])
    finally:
        for h in handles:
            h.remove()
    if not counts or counts[0] == 0:
        raise ValueError("calibrate: no tokens were seen")
    stats: Dict[str, Dict[str, torch.Tensor]] = {}
    sampled: List[List[int]] = []
    for layer, acc in enumerate(sums):
        mean = (acc / counts[layer]).float().cpu()
        for head in range(heads):
            stats[f"layer{layer:02d}_head{head:02d}"] = {
                "q_mean_real": mean[0, head].clone(), "q_mean_imag": mean[1, head].clone(),
                "q_abs_mean": mean[2, head].clone()}
            sampled.append([layer, head])
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    metadata: Dict[str, Any] = {
        "rope_style": "half", "head_dim": head_dim, "sampled_heads": sampled,
        "model_name": model_name or str(getattr(config, "_name_or_path", "")),
        "num_traces": traces, "tokens": counts[0],
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "num_attention_heads": heads,
        "num_kv_heads": int(getattr(config, "num_key_value_heads", None) or heads),
        "num_layers": len(layers), "rope_type": str(rope.get("rope_type", "default")),
        "q_norm_applied": any(getattr(l.self_attn, "q_norm", None) is not None for l in layers)}
    theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is not None:
        metadata["rope_theta"] = float(theta)
    return {"metadata": metadata, "stats": stats}


def save(calibration: Dict[str, Any], path: str) -> None:
    # The zip form torch.save writes by default; kvtier reads it without running pickle code.
    torch.save(calibration, path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="a plain-text file, tokenized by the model's tokenizer")
    source.add_argument("--token-ids", help="a JSON file: a list of token-id lists")
    p.add_argument("--max-length", type=int, default=32768)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from transformers import AutoModelForCausalLM
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16)
    model = model.to(device).eval()
    if args.text:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
        with open(args.text, encoding="utf-8") as f:
            ids = tokenizer(f.read(), truncation=True, max_length=args.max_length).input_ids
        batches = [torch.tensor([ids])]
    else:
        with open(args.token_ids) as f:
            batches = [torch.tensor([seq[:args.max_length]]) for seq in json.load(f)]
    calibration = calibrate(model, batches, model_name=args.model_dir)
    save(calibration, args.out)
    m = calibration["metadata"]
    print(f"{args.out}: {len(calibration['stats'])} (layer, head) entries, {m['tokens']} tokens "
          f"per head, head_dim {m['head_dim']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
