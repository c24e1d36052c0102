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

TriAttention (stage 3) evicts decode tokens between steps on the model's GPU, no daemon involved:

    tri = kvtier.transformers.TriAttention(model.config, kvtier.parse_compression_config(
        "algorithm: triattention\nbudget: 512\nbeta: 64\ncalibration_path: model.calib.pt\n"
        "model_config_path: model/config.json\n"), batch=8, max_tokens=4096)
    out = model(input_ids=prompts, use_cache=True)       # the prefill (8 prompts of one length)
    tri.start(out.past_key_values)
    past = out.past_key_values
    while generating:
        out = model(input_ids=next_tokens, past_key_values=past,
                    position_ids=tri.position_ids(), use_cache=True)
        past = tri.step(out.past_key_values)            # the same cache, or one rebuilt smaller

The sequences' KV is kept in a PagedKVPool as well, where the Evictor scores and compacts it
in place; after a round the model's cache is rebuilt from the compacted pages. Kept keys keep
their RoPE rotation and the next query its true position (position_ids), while the cache, and
with it the attention, covers only the kept tokens.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from kvtier._client import Client
from kvtier._compression import CompressionConfig
from kvtier._evictor import EvictionMode, Evictor, EvictorConfig, StepRequest
from kvtier._layout import BlockHasher, DType, PageLayout
from kvtier._types import ItemCode, WriteAck
from kvtier.torch import LayerKV, PagedKVPool

__all__ = ["Prefix", "PrefixCache", "TriAttention", "attention_shape", "cache_layers",
           "codec_from_config", "make_dynamic_cache"]

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
    head_dim) for batch 1, or (batch, heads, tokens, head_dim)), as the model's own prefill
    would have left it."""
    from transformers import DynamicCache
    try:
        cache = DynamicCache(config=config) if config is not None else DynamicCache()
    except TypeError:  # transformers before config-aware caches
        cache = DynamicCache()
    for i, (k, v) in enumerate(layers):
        if k.dim() == 3:
            k, v = k.unsqueeze(0), v.unsqueeze(0)
        cache.update(k, v, i)
    return cache


def _kv_dtype(config: Any, dtype: Optional[torch.dtype], who: str) -> torch.dtype:
    """The KV dtype: `dtype`, else the config's (torch_dtype / dtype), else bf16."""
    if dtype is None:
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None)
        dtype = dtype if dtype in _LAYOUT_DTYPES else torch.bfloat16
    if dtype not in _LAYOUT_DTYPES:
        raise ValueError(f"{who}: KV dtype {dtype} (K and V pages are bf16 or fp16)")
    return dtype


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
        self.dtype = dtype = _kv_dtype(config, dtype, "PrefixCache")
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


class TriAttention:
    """TriAttention (stage 3) for a transformers generation loop over `batch` sequences that
    start from prompts of one length: kvtier's Evictor (the GPU round for a CUDA device, the CPU
    reference otherwise) on a PagedKVPool that mirrors the model's cache. Each row owns
    ceil(max_tokens / tokens_per_page) pages for its whole life (pages a round frees stay the
    row's, for the tokens it generates next), so `max_tokens` bounds the physical length:
    prompt + budget + beta + the tokens of one step suffice.

    The configuration block is an `algorithm: triattention` one (budget, beta, eviction_mode,
    calibration_path, model_config_path; model_config_path defaults to the model's directory).
    The Evictor gets the calibration checked against the model's config.json."""

    def __init__(self, config: Any, compression: CompressionConfig, *, batch: int,
                 max_tokens: int, tokens_per_page: int = 16,
                 device: Union[str, torch.device] = "cuda", dtype: Optional[torch.dtype] = None,
                 pool_dir: Optional[str] = None,
                 cache_factory: Callable[[Sequence[LayerKV], Any], Any] = make_dynamic_cache
                 ) -> None:
        """cache_factory(layers, config) makes the cache step() returns after a round, from
        (batch, heads, tokens, head_dim) layers (default: a transformers DynamicCache). On the
        CPU the pool is a shared-memory file in `pool_dir` (PagedKVPool's default otherwise)."""
        if compression.algorithm != "triattention":
            raise ValueError(f"TriAttention takes an algorithm: triattention block, not "
                             f"{compression.algorithm!r}")
        if not compression.calibration_path:
            raise ValueError("TriAttention: the block names no calibration_path")
        model_config_path = (compression.model_config_path or
                             getattr(config, "_name_or_path", "") or "")
        if not model_config_path:
            raise ValueError("TriAttention: the block names no model_config_path and the model "
                             "config has no directory (_name_or_path)")
        if batch < 1 or max_tokens < 1:
            raise ValueError(f"TriAttention: batch {batch} and max_tokens {max_tokens} must be "
                             "positive")
        self.config = config
        layers, kv_heads, head_dim = attention_shape(config)
        self.dtype = _kv_dtype(config, dtype, "TriAttention")
        self.layout = PageLayout.gqa(layers, kv_heads, head_dim, tokens_per_page,
                                     _LAYOUT_DTYPES[self.dtype])
        self.tokens_per_page = tokens_per_page
        self.max_tokens = max_tokens
        self.pages_per_row = -(-max_tokens // tokens_per_page)
        self.batch = batch
        self.pool = PagedKVPool(self.layout, batch * self.pages_per_row, device,
                                pool_dir=pool_dir, name="triattention")
        self.tables = [self.pool.alloc(self.pages_per_row) for _ in range(batch)]
        self._pages = torch.tensor(self.tables, dtype=torch.long, device=self.pool.device)
        self.view = self.pool.kv_cache_view()
        cuda = self.pool.device.type == "cuda"
        mode = compression.eviction_mode or "union"
        if mode not in EvictionMode.__members__:
            raise ValueError(f"TriAttention: eviction_mode {mode!r} (one of "
                             f"{', '.join(EvictionMode.__members__)})")
        self.evictor_config = EvictorConfig(
            budget=compression.budget, beta=compression.beta, mode=EvictionMode[mode],
            device=(self.pool.device.index or 0) if cuda else 0, max_batch=batch)
        self.evictor = Evictor.create(self.evictor_config, compression.calibration_path,
                                      model_config_path, self.view)
        self._cache_factory = cache_factory
        self._next_id = 1
        self._ids: List[int] = []
        self.prompt_len = 0
        self.physical = 0       # tokens in the cache (and the pool) per row
        self.logical = 0        # tokens the rows have seen: the next token's position
        self.rounds = 0         # eviction rounds since start()
        self.evicted_tokens = 0

    def _write(self, layers: Sequence[LayerKV], lo: int, hi: int) -> None:
        """Tokens [lo, hi) of every row's cache into the rows' pages."""
        positions = torch.arange(lo, hi, device=self.pool.device)
        pages = self._pages[:, positions // self.tokens_per_page]  # (batch, tokens)
        offsets = positions % self.tokens_per_page
        for layer, (k, v) in enumerate(layers):
            for dst, src in ((self.pool.keys[layer], k), (self.pool.values[layer], v)):
                assert dst is not None
                # dst[pages, :, offsets] is (batch, tokens, heads, head_dim)
                dst[pages, :, offsets] = src[:, :, lo:hi].transpose(1, 2).to(dst.dtype)

    def _check(self, layers: Sequence[LayerKV]) -> int:
        if len(layers) != len(self.pool.keys):
            raise ValueError(f"TriAttention: a cache of {len(layers)} layers for a model of "
                             f"{len(self.pool.keys)}")
        k = layers[0][0]
        if k.dim() != 4 or k.shape[0] != self.batch:
            raise ValueError(f"TriAttention: cache layers shaped {tuple(k.shape)}; expected "
                             f"({self.batch}, heads, tokens, head_dim)")
        n = int(k.shape[-2])
        if n > self.max_tokens:
            raise ValueError(f"TriAttention: {n} cached tokens exceed max_tokens "
                             f"{self.max_tokens}")
        return n

    def start(self, past_key_values: Any) -> None:
        """Takes over the rows' prefilled prompts (the cache after the prefill forward); the
        prompt is pinned, the budget counts decode tokens only. Ends any earlier rows."""
        self.finish()
        layers = cache_layers(past_key_values)
        n = self._check(layers)
        self._write(layers, 0, n)
        self._ids = list(range(self._next_id, self._next_id + self.batch))
        self._next_id += self.batch
        for i in self._ids:
            self.evictor.add_request(i, n)
        self.prompt_len = self.physical = self.logical = n
        self.rounds = self.evicted_tokens = 0

    def position_ids(self) -> torch.Tensor:
        """(batch, 1): the true position of each row's next token, for the model's forward."""
        return torch.full((self.batch, 1), self.logical, dtype=torch.long,
                          device=self.pool.device)

    def step(self, past_key_values: Any) -> Any:
        """Ends a generation step (the cache after the forward of the step's tokens, one or
        more per row): mirrors the new tokens into the pool, runs a round when one is due, and
        returns the cache to go on with, `past_key_values` itself when nothing was evicted."""
        if not self._ids:
            raise RuntimeError("TriAttention.step before start()")
        layers = cache_layers(past_key_values)
        n = self._check(layers)
        added = n - self.physical
        if added < 1:
            raise ValueError(f"TriAttention.step: the cache holds {n} tokens, {self.physical} "
                             "before the step (feed the step's tokens with this cache)")
        self._write(layers, self.physical, n)
        stream = torch.cuda.current_stream(self.pool.device).cuda_stream \
            if self.pool.device.type == "cuda" else 0
        outcomes = self.evictor.on_generation_step_end(
            [StepRequest(i, added, table, n, self.prompt_len)
             for i, table in zip(self._ids, self.tables)], stream=stream)
        self.physical = n
        self.logical += added
        if not any(o.evicted for o in outcomes):
            return past_key_values
        lengths = {o.new_length for o in outcomes}
        if len(lengths) != 1 or not all(o.evicted for o in outcomes):
            raise RuntimeError(f"TriAttention.step: rows evicted to lengths {sorted(lengths)}; "
                               "one cache needs one length")
        self.physical = lengths.pop()
        self.rounds += 1
        self.evicted_tokens = outcomes[0].evicted_tokens
        return self._cache_factory(self.pool.read_rows(self.tables, self.physical), self.config)

    def finish(self) -> None:
        """Ends the rows (their pages stay with this object for the next start())."""
        for i in self._ids:
            self.evictor.remove_request(i)
        self._ids = []

    def __repr__(self) -> str:
        return (f"TriAttention(budget={self.evictor_config.budget}, "
                f"beta={self.evictor_config.beta}, mode={self.evictor_config.mode.name}, "
                f"batch={self.batch}, physical={self.physical}, logical={self.logical})")
