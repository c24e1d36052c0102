"""kvtier for Hugging Face transformers' causal language models (transformers 4.4x and 5.x).

PrefixCache lets a generation loop skip the prefill of every prompt page kvtierd already holds:

    cache = kvtier.transformers.PrefixCache.create(client, model.config, model_name="my-model",
                                                   compression=kvtier.parse_compression_config(
                                                       "algorithm: quantization_for_cold_page\\n"
                                                       "quant: nvfp4\\n"))
    prefix = cache.load(prompt)                        # Lookup + Onboard -> a DynamicCache
    out = model(input_ids=prompt[prefix.tokens:][None], past_key_values=prefix.past_key_values)
    ...                                                # decode as usual with the same cache
    cache.store(prompt_and_answer, out.past_key_values, from_page=prefix.pages)  # stage 5

and parks a request's whole context around a tool call (stage 4): `park(request_id, tokens,
past_key_values)` sends every page (the last one partial) to kvtierd and the caller drops its
cache; `resume(request_id)` returns it. Pages move between the model's per-layer tensors and
kvtierd through a PagedKVPool on the model's device (CUDA IPC; shared memory on the CPU), so no
byte passes through Python. One sequence at a time (batch size 1).

The block hashes are BlockHasher's over the token ids from the engine's hash root, so any client
of the same model, layout and codec (the C++ hooks, the example engine, another process) shares
these blocks; the token ids go with each offloaded page for kvtierd's KV events.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from kvtier._client import Client
from kvtier._compression import CompressionConfig
from kvtier._layout import BlockHasher, DType, PageLayout
from kvtier._types import ItemCode, WriteAck
from kvtier.torch import LayerKV, PagedKVPool

__all__ = ["Prefix", "PrefixCache", "attention_shape", "cache_layers", "codec_from_config",
           "make_dynamic_cache"]

_LAYOUT_DTYPES = {torch.bfloat16: DType.bf16, torch.float16: DType.fp16}


def attention_shape(config: Any) -> Tuple[int, int, int]:
    """(layers, KV heads, head dim) of a transformers model config (Llama, Qwen2/3, Mistral and
    their kind: full attention in every layer)."""
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
    layer_types = getattr(config, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        raise ValueError("PrefixCache supports models whose every layer is full attention; this "
                         f"config has layer types {sorted(set(layer_types))}")
    return layers, kv_heads, int(head_dim)


def codec_from_config(config: Optional[CompressionConfig]) -> str:
    """The codec a quantization_for_cold_page block selects (quant, rope_precision); 'raw'
    without a block. ValueError for another algorithm."""
    if config is None:
        return "raw"
    if config.algorithm != "quantization_for_cold_page":
        raise ValueError(f"PrefixCache takes a quantization_for_cold_page block, not "
                         f"{config.algorithm!r}")
    quant = config.quant or "nvfp4"
    if quant == "raw":
        return "raw"
    return quant + ("+rope" if config.rope_precision == "lossless" else "")


def cache_layers(past_key_values: Any) -> List[LayerKV]:
    """Each layer's (K, V), shaped (batch, heads, tokens, head_dim), of a transformers Cache
    (5.x: .layers[i].keys; 4.x: .key_cache[i]) or a legacy tuple of pairs."""
    layers = getattr(past_key_values, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    if hasattr(past_key_values, "key_cache"):
        return list(zip(past_key_values.key_cache, past_key_values.value_cache))
    return [(k, v) for k, v in past_key_values]


def make_dynamic_cache(layers: Sequence[LayerKV], config: Any = None) -> Any:
    """A transformers DynamicCache holding `layers` (each (K, V) shaped (heads, tokens,
    head_dim), batch 1), as the model's own prefill would have left it."""
    from transformers import DynamicCache
    try:
        cache = DynamicCache(config=config) if config is not None else DynamicCache()
    except TypeError:  # transformers before config-aware caches
        cache = DynamicCache()
    for i, (k, v) in enumerate(layers):
        cache.update(k.unsqueeze(0), v.unsqueeze(0), i)
    return cache


def _token_list(tokens: Any) -> List[int]:
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() == 2 and tokens.shape[0] == 1:
            tokens = tokens[0]
        if tokens.dim() != 1:
            raise ValueError(f"token ids must be 1-D (or 1 x n), got shape {tuple(tokens.shape)}")
        return [int(t) for t in tokens.tolist()]
    return [int(t) for t in tokens]


@dataclasses.dataclass
class Prefix:
    """What load() found: `tokens` leading tokens (`pages` pages) in `past_key_values` (None
    when nothing was found), and the seconds the Lookup and the Onboard took."""
    past_key_values: Any
    tokens: int
    pages: int
    lookup_seconds: float = 0.0
    onboard_seconds: float = 0.0


class PrefixCache:
    """A transformers model's KV cache kept by kvtierd across turns and tool calls."""

    def __init__(self, client: Client, config: Any, *, model_name: str, codec: str = "raw",
                 slots: int = 4096, tokens_per_page: int = 16,
                 device: Union[str, torch.device] = "cuda", dtype: Optional[torch.dtype] = None,
                 durable: bool = False, ack: WriteAck = WriteAck.default, tenant: str = "",
                 engine_name: str = "", pool_dir: Optional[str] = None,
                 cache_factory: Callable[[Sequence[LayerKV], Any], Any] = make_dynamic_cache
                 ) -> None:
        """Registers an engine for `config`'s attention shape (dtype: the model's, default its
        config's torch_dtype, else bf16) with a pool of `slots` pages on `device` (on the CPU
        a shared-memory file in `pool_dir`, one of the daemon's pools.allowed_dirs).
        cache_factory(layers, config) makes the past_key_values load() and resume() return
        (default: a transformers DynamicCache)."""
        self.client = client
        self.config = config
        layers, kv_heads, head_dim = attention_shape(config)
        if dtype is None:
            dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
            if isinstance(dtype, str):
                dtype = getattr(torch, dtype, None)
            dtype = dtype if dtype in _LAYOUT_DTYPES else torch.bfloat16
        if dtype not in _LAYOUT_DTYPES:
            raise ValueError(f"PrefixCache: KV dtype {dtype} (K and V pages are bf16 or fp16)")
        self.dtype = dtype
        self.layout = PageLayout.gqa(layers, kv_heads, head_dim, tokens_per_page,
                                     _LAYOUT_DTYPES[dtype])
        self.pool = PagedKVPool(self.layout, slots, device, pool_dir=pool_dir)
        self.engine = client.register_engine(model_name, self.layout, [self.pool.registration],
                                             codec=codec, tenant=tenant,
                                             engine_name=engine_name)
        self.codec = self.engine.codec
        self.hasher = BlockHasher(self.engine.hash_root, tokens_per_page)
        self.tokens_per_page = tokens_per_page
        self.durable = durable
        self.ack = ack
        self._parked: Dict[str, int] = {}
        self._cache_factory = cache_factory

    @staticmethod
    def create(client: Client, config: Any, *, model_name: str,
               compression: Optional[CompressionConfig] = None, **kwargs: Any) -> "PrefixCache":
        """A PrefixCache whose codec and durability come from one configuration block
        (algorithm: quantization_for_cold_page; none: raw)."""
        if compression is not None and compression.durable:
            kwargs.setdefault("durable", True)
        return PrefixCache(client, config, model_name=model_name,
                           codec=codec_from_config(compression), **kwargs)

    # ---- stage 5: prefixes across requests ---------------------------------------------------

    def load(self, token_ids: Any, *, max_pages: Optional[int] = None) -> Prefix:
        """The longest stored prefix of `token_ids`' full pages, leaving at least one token to
        prefill (the model needs one to produce the next token's logits)."""
        tokens = _token_list(token_ids)
        t = self.tokens_per_page
        pages = (len(tokens) - 1) // t if tokens else 0
        if max_pages is not None:
            pages = min(pages, max_pages)
        pages = min(pages, self.pool.slots)
        if pages <= 0:
            return Prefix(None, 0, 0)
        hashes = self.hasher.hash(tokens[:pages * t])
        start = time.perf_counter()
        hit = self.client.lookup(self.engine, hashes).hit_pages
        looked = time.perf_counter()
        if hit == 0:
            return Prefix(None, 0, 0, looked - start)
        slots = self.pool.alloc(hit)
        try:
            result = self.client.onboard(self.engine, hashes[:hit], slots)
            got = result.onboarded_pages
            layers = self.pool.read(slots[:got]) if got else []
        finally:
            self.pool.free(slots)
        done = time.perf_counter()
        if not got:
            return Prefix(None, 0, 0, looked - start, done - looked)
        return Prefix(self._cache_factory(layers, self.config), got * t, got, looked - start,
                      done - looked)

    def store(self, token_ids: Any, past_key_values: Any, *, from_page: int = 0) -> int:
        """Offloads the full pages of `token_ids` from `from_page` on (pages before it are known
        to be stored, e.g. Prefix.pages), reading them from `past_key_values`, which must hold
        at least those tokens. Returns the pages kvtierd stored or already had."""
        tokens = _token_list(token_ids)
        layers = cache_layers(past_key_values)
        t = self.tokens_per_page
        cached = layers[0][0].shape[-2] if layers else 0
        full = min(len(tokens), cached) // t
        if full <= from_page:
            return 0
        hashes = self.hasher.hash(tokens[:full * t])
        stored = 0
        page = from_page
        while page < full:
            count = min(full - page, self.pool.free_slots)
            if count == 0:
                raise RuntimeError("PrefixCache.store: the pool has no free slot")
            slots = self.pool.alloc(count)
            try:
                lo, hi = page * t, (page + count) * t
                self.pool.write(slots, [(k[0, :, lo:hi], v[0, :, lo:hi]) for k, v in layers])
                self.pool.sync()
                result = self.client.offload(
                    self.engine, hashes[page:page + count], slots,
                    token_ids=[tokens[p * t:(p + 1) * t] for p in range(page, page + count)],
                    durable=self.durable, ack=self.ack)
                stored += sum(1 for r in result.results
                              if r.code in (ItemCode.ok, ItemCode.already_stored))
            finally:
                self.pool.free(slots)
            page += count
        return stored

    # ---- stage 4: a request parked around a tool call ----------------------------------------

    def park(self, request_id: str, token_ids: Any, past_key_values: Any) -> int:
        """Parks the request's whole context (every token of `past_key_values`, the last page
        partial) in kvtierd; the caller may drop its cache until resume(). Returns the pages
        parked."""
        layers = cache_layers(past_key_values)
        n = layers[0][0].shape[-2]
        if len(_token_list(token_ids)) < n:
            raise ValueError(f"park: {n} cached tokens but only "
                             f"{len(_token_list(token_ids))} token ids")
        pages = -(-n // self.tokens_per_page)
        slots = self.pool.alloc(pages)
        try:
            self.pool.write(slots, [(k[0], v[0]) for k, v in layers])
            self.pool.sync()
            result = self.client.park(self.engine, request_id, slots, num_tokens=n,
                                      ack=self.ack)
        finally:
            self.pool.free(slots)
        self._parked[request_id] = n
        return result.parked_pages

    def resume(self, request_id: str) -> Any:
        """The cache park() saved for `request_id` (a DynamicCache), released in kvtierd."""
        n = self._parked.get(request_id)
        if n is None:
            raise KeyError(f"resume: request {request_id!r} was not parked by this PrefixCache")
        pages = -(-n // self.tokens_per_page)
        slots = self.pool.alloc(pages)
        try:
            result = self.client.resume(self.engine, request_id, slots)
            if result.resumed_pages != pages or result.num_tokens != n:
                raise RuntimeError(f"resume {request_id!r}: {result.resumed_pages} of {pages} "
                                   f"pages, {result.num_tokens} of {n} tokens came back")
            layers = self.pool.read(slots, tokens=n)
        finally:
            self.pool.free(slots)
        del self._parked[request_id]
        return self._cache_factory(layers, self.config)

    def close(self) -> None:
        """Unregisters the engine (its stored blocks stay in kvtierd)."""
        self.client.unregister(self.engine)

    def __repr__(self) -> str:
        return (f"PrefixCache(codec={self.codec!r}, tokens_per_page={self.tokens_per_page}, "
                f"{self.pool!r})")
