"""The TriAttention Evictor (kvtier/kvtier_evictor.h; docs/TRIATTENTION.md): the configuration, a
paged KV cache view built from raw integer addresses (NumPy `arr.ctypes.data`, torch
`t.data_ptr()`), and the per-step eviction loop. Views only borrow memory: the caller keeps the
arrays (or tensors) alive and unmoved while a view, or an Evictor made from it, is used."""

from __future__ import annotations

from ctypes import byref, c_float, c_int, c_int32, c_int64, c_void_p
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

from kvtier import _args, _capi
from kvtier._capi import lib
from kvtier._errors import check
from kvtier._layout import DType, dtype_value
from kvtier._types import KvEnum


class EvictionMode(KvEnum):
    union = 1
    per_head = 2
    per_layer_perhead = 3


class CompactionOrder(KvEnum):
    fill_holes = 1
    preserve_order = 2


class KvLayout(KvEnum):
    hnd = 1
    nhd = 2


class KvPoolKind(KvEnum):
    separate = 1
    combined = 2


class KvMemory(KvEnum):
    host = 1
    device = 2


def _defaults() -> _capi.EvictorConfig:
    c = _capi.EvictorConfig()
    lib.kvtier_evictor_config_defaults(byref(c))
    return c


_DEFAULTS = _defaults()


class EvictorConfig:
    """Evictor settings (triattention/evictor.h); the defaults are the library's."""

    def __init__(self, *, budget: int = _DEFAULTS.budget, beta: int = _DEFAULTS.beta,
                 mode: EvictionMode = EvictionMode(_DEFAULTS.mode),
                 normalize: bool = bool(_DEFAULTS.normalize),
                 order: CompactionOrder = CompactionOrder(_DEFAULTS.order),
                 num_offsets: int = _DEFAULTS.num_offsets, device: int = _DEFAULTS.device,
                 max_batch: int = _DEFAULTS.max_batch,
                 max_decode_tokens: int = _DEFAULTS.max_decode_tokens) -> None:
        self.budget = budget
        self.beta = beta
        self.mode = EvictionMode(mode)
        self.normalize = bool(normalize)
        self.order = CompactionOrder(order)
        self.num_offsets = num_offsets
        self.device = device
        self.max_batch = max_batch
        self.max_decode_tokens = max_decode_tokens

    def to_c(self) -> _capi.EvictorConfig:
        i32 = lambda v, n: _args.integer(v, n, -2**31, 2**31 - 1)  # noqa: E731
        return _capi.EvictorConfig(_args.i64(self.budget, "budget"), _args.i64(self.beta, "beta"),
                                   int(EvictionMode(self.mode)), int(bool(self.normalize)),
                                   int(CompactionOrder(self.order)),
                                   i32(self.num_offsets, "num_offsets"), i32(self.device, "device"),
                                   i32(self.max_batch, "max_batch"),
                                   _args.i64(self.max_decode_tokens, "max_decode_tokens"))

    @staticmethod
    def from_c(c: _capi.EvictorConfig) -> "EvictorConfig":
        return EvictorConfig(budget=c.budget, beta=c.beta, mode=EvictionMode(c.mode),
                             normalize=bool(c.normalize), order=CompactionOrder(c.order),
                             num_offsets=c.num_offsets, device=c.device, max_batch=c.max_batch,
                             max_decode_tokens=c.max_decode_tokens)

    def __repr__(self) -> str:
        return (f"EvictorConfig(budget={self.budget}, beta={self.beta}, mode={self.mode.name}, "
                f"normalize={self.normalize}, order={self.order.name}, "
                f"num_offsets={self.num_offsets}, device={self.device}, "
                f"max_batch={self.max_batch}, max_decode_tokens={self.max_decode_tokens})")


class KvCacheView:
    """An engine's paged KV cache, by raw addresses: `layers` is a list of (k_ptr, v_ptr) integer
    addresses, one pair per attention layer (v_ptr 0 for a combined pool). Pass NumPy arrays'
    `arr.ctypes.data` or torch tensors' `t.data_ptr()`. page_stride_bytes is the distance from
    one page of a layer's pool to the next (0: the page itself; a kvtier layout's slot, which
    holds every layer, is larger).

    The view only BORROWS that memory: the caller must keep the arrays / tensors alive and
    unmoved while this view, or an Evictor made from it, is used."""

    def __init__(self, layers: Sequence[Tuple[int, int]], num_pages: int, page_tokens: int,
                 num_kv_heads: int, head_dim: int, dtype: Union[DType, str] = DType.bf16,
                 layout: KvLayout = KvLayout.hnd, pool_kind: KvPoolKind = KvPoolKind.separate,
                 memory: KvMemory = KvMemory.host, page_stride_bytes: int = 0) -> None:
        self._layers = [(_args.u64(k, "layers[].k"), _args.u64(v, "layers[].v"))
                        for k, v in layers]
        self.num_pages = _args.i64(num_pages, "num_pages")
        self.page_tokens = _args.integer(page_tokens, "page_tokens", -2**31, 2**31 - 1)
        self.num_kv_heads = _args.integer(num_kv_heads, "num_kv_heads", -2**31, 2**31 - 1)
        self.head_dim = _args.integer(head_dim, "head_dim", -2**31, 2**31 - 1)
        self.dtype = DType(dtype_value(dtype))
        self.layout = KvLayout(layout)
        self.pool_kind = KvPoolKind(pool_kind)
        self.memory = KvMemory(memory)
        self.page_stride_bytes = _args.u64(page_stride_bytes, "page_stride_bytes")
        n = max(len(self._layers), 1)
        self._k = (c_void_p * n)(*[k or None for k, _ in self._layers])
        self._v = (c_void_p * n)(*[v or None for _, v in self._layers])
        self._c = _capi.KvCacheView(self._k, self._v, len(self._layers), self.num_pages,
                                    self.page_tokens, self.num_kv_heads, self.head_dim,
                                    int(self.dtype), int(self.layout), int(self.pool_kind),
                                    int(self.memory), self.page_stride_bytes)

    @property
    def layers(self) -> List[Tuple[int, int]]:
        return list(self._layers)

    def to_c(self) -> _capi.KvCacheView:
        return self._c

    def validate(self) -> None:
        """Checks the geometry (InvalidRequestError, a ValueError, naming the field)."""
        err = _capi.Error()
        check(lib.kvtier_kv_cache_view_validate(byref(self._c), byref(err)), err)

    def __repr__(self) -> str:
        return (f"KvCacheView(layers={len(self._layers)}, num_pages={self.num_pages}, "
                f"page_tokens={self.page_tokens}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, dtype={self.dtype.name}, memory={self.memory.name})")


class StepRequest:
    """One request at the end of a generation step. The block table is copied (a list of int or
    a NumPy int32 array)."""

    def __init__(self, id: int, new_tokens: int, block_table: Any, length: int, prompt_len: int,
                 protected_tail: int = 0) -> None:
        self.id = id
        self.new_tokens = new_tokens
        self.block_table = _args.int_list(block_table, "block_table")
        self.length = length
        self.prompt_len = prompt_len
        self.protected_tail = protected_tail

    def __repr__(self) -> str:
        return (f"StepRequest(id={self.id}, new_tokens={self.new_tokens}, "
                f"block_table={len(self.block_table)} pages, length={self.length}, "
                f"prompt_len={self.prompt_len}, protected_tail={self.protected_tail})")


class StepOutcome:
    """One request's outcome of a step: whether a round ran, the physical length now, the decode
    tokens evicted so far, and the block-table entries to free."""

    __slots__ = ("id", "evicted", "new_length", "evicted_tokens", "freed_pages")

    def __init__(self, id: int, evicted: bool, new_length: int, evicted_tokens: int,
                 freed_pages: List[int]) -> None:
        self.id = id
        self.evicted = evicted
        self.new_length = new_length
        self.evicted_tokens = evicted_tokens
        self.freed_pages = freed_pages

    def __repr__(self) -> str:
        return (f"StepOutcome(id={self.id}, evicted={self.evicted}, new_length={self.new_length}, "
                f"evicted_tokens={self.evicted_tokens}, freed_pages={len(self.freed_pages)} pages)")


_REQUIRED = ("id", "block_table", "length", "prompt_len")


def _step_request(item: Any) -> StepRequest:
    if isinstance(item, StepRequest):
        return item
    if not isinstance(item, Mapping):
        raise TypeError("a step request must be a StepRequest or a dict")
    for key in _REQUIRED:
        if key not in item:
            raise KeyError(f"step request dict has no '{key}'")
    return StepRequest(item["id"], item.get("new_tokens", 1), item["block_table"], item["length"],
                       item["prompt_len"], item.get("protected_tail", 0))


class Evictor:
    """The TriAttention eviction loop over a paged KV cache. The cache memory named by the view
    is borrowed: keep it alive while the Evictor is used."""

    def __init__(self, handle: int, view: KvCacheView) -> None:
        """Takes a kvtier_evictor handle: use create() or create_from_arrays()."""
        self._owner = _capi.Handle(handle, lib.kvtier_evictor_destroy)
        self._view = view

    @staticmethod
    def create(config: EvictorConfig, calibration_path: str, model_config_path: str,
               view: KvCacheView) -> "Evictor":
        """An Evictor from a calibration file and the model's config.json (or model directory)."""
        out = c_void_p(None)
        err = _capi.Error()
        check(lib.kvtier_evictor_create_from_files(
            byref(config.to_c()), _args.text_arg(calibration_path, "calibration_path").encode(),
            _args.text_arg(model_config_path, "model_config_path").encode(), byref(view.to_c()),
            byref(out), byref(err)), err)
        return Evictor(out.value, view)  # type: ignore[arg-type]

    @staticmethod
    def create_from_arrays(config: EvictorConfig, q_mean_real: Any, q_mean_imag: Any,
                           q_abs_mean: Any, omega: Any, freq_scale_sq: Any, layers: int,
                           heads: int, view: KvCacheView) -> "Evictor":
        """An Evictor from an in-memory calibration: q_mean_real, q_mean_imag and q_abs_mean are
        float32 [layers][heads][bands] (flattened row-major; any shape of that size), omega and
        freq_scale_sq float32 [bands]; bands = len(omega), head_dim = 2 * bands."""
        arrays = [_args.f32_array(a, n) for a, n in (
            (q_mean_real, "q_mean_real"), (q_mean_imag, "q_mean_imag"),
            (q_abs_mean, "q_abs_mean"), (omega, "omega"), (freq_scale_sq, "freq_scale_sq"))]
        fields: List[Any] = []
        for a in arrays:
            fields += [a.as_pointer(c_float), a.count]
        cal = _capi.CalibrationArrays(_args.integer(layers, "layers", -2**31, 2**31 - 1),
                                      _args.integer(heads, "heads", -2**31, 2**31 - 1), *fields)
        out = c_void_p(None)
        err = _capi.Error()
        check(lib.kvtier_evictor_create(byref(config.to_c()), byref(cal), byref(view.to_c()),
                                        byref(out), byref(err)), err)
        return Evictor(out.value, view)  # type: ignore[arg-type]

    def add_request(self, id: int, prompt_len: int) -> None:
        err = _capi.Error()
        check(lib.kvtier_evictor_add_request(self._owner.value, _args.u64(id, "id"),
                                             _args.i64(prompt_len, "prompt_len"), byref(err)),
              err)

    def remove_request(self, id: int) -> None:
        err = _capi.Error()
        check(lib.kvtier_evictor_remove_request(self._owner.value, _args.u64(id, "id"),
                                                byref(err)), err)

    def on_generation_step_end(self, requests: Sequence[Any],
                               stream: int = 0) -> List[StepOutcome]:
        """Ends a generation step for `requests` (StepRequest objects or dicts with the same
        keys); returns one StepOutcome per request, in input order. `stream` is a cudaStream_t
        address for a device view (ignored for a host view)."""
        reqs = [_step_request(r) for r in requests]
        n = max(len(reqs), 1)
        c_reqs = (_capi.StepRequest * n)()
        tables = []
        for i, r in enumerate(reqs):
            table = _args.i32_array(r.block_table, "block_table")
            tables.append(table)
            c_reqs[i] = _capi.StepRequest(_args.u64(r.id, "id"), _args.i64(r.new_tokens,
                                                                           "new_tokens"),
                                          table.as_pointer(c_int32), table.count,
                                          _args.i64(r.length, "length"),
                                          _args.i64(r.prompt_len, "prompt_len"),
                                          _args.i64(r.protected_tail, "protected_tail"))
        outcomes = (_capi.StepOutcome * n)()
        freed_capacity = sum(t.count for t in tables)
        freed = (c_int32 * max(freed_capacity, 1))()
        err = _capi.Error()
        check(lib.kvtier_evictor_step_end(self._owner.value, c_reqs, len(reqs),
                                          _args.u64(stream, "stream") or None, outcomes, freed,
                                          freed_capacity, byref(err)), err)
        return [StepOutcome(o.id, bool(o.evicted), o.new_length, o.evicted_tokens,
                            list(freed[o.freed_offset:o.freed_offset + o.freed_count]))
                for o in outcomes[:len(reqs)]]

    def state(self, id: int) -> Dict[str, int]:
        """A tracked request's schedule state (prompt_len, confirmed_length, generation_steps,
        last_boundary, evicted_tokens, logical_length)."""
        s = _capi.RoundState()
        err = _capi.Error()
        check(lib.kvtier_evictor_state(self._owner.value, _args.u64(id, "id"), byref(s),
                                       byref(err)), err)
        return {name: getattr(s, name) for name, _ in _capi.RoundState._fields_}

    def _info(self) -> Any:
        config = _capi.EvictorConfig()
        on_gpu, num = c_int(0), c_int64(0)
        err = _capi.Error()
        check(lib.kvtier_evictor_info(self._owner.value, byref(config), byref(on_gpu), byref(num),
                                      byref(err)), err)
        return config, bool(on_gpu.value), num.value

    @property
    def on_gpu(self) -> bool:
        return self._info()[1]

    @property
    def num_requests(self) -> int:
        return self._info()[2]

    @property
    def config(self) -> EvictorConfig:
        return EvictorConfig.from_c(self._info()[0])
