"""Page layouts (kvtier/layout.h) and block hashes (kvtier/block_hasher.h)."""

from __future__ import annotations

import ctypes
from ctypes import byref, c_int, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p
from typing import Any, List, Optional, Sequence, Union

from kvtier import _args, _capi
from kvtier._args import IntArray
from kvtier._capi import lib
from kvtier._errors import check
from kvtier._types import KvEnum

BLOCK_HASH_BYTES = _capi.BLOCK_HASH_BYTES


class DType(KvEnum):
    """Element type of a layout buffer."""
    bf16 = 1
    fp16 = 2
    fp8_e4m3 = 3
    fp32 = 4
    bytes = 5


DTypeLike = Union[DType, str]


def dtype_value(dtype: Any) -> int:
    """A DType or its name ("bf16", "fp16", "fp8_e4m3", "fp32", "bytes") as its number;
    InvalidRequestError (a ValueError) for an unknown name."""
    if isinstance(dtype, DType):
        return int(dtype)
    if isinstance(dtype, str):
        out = c_int(0)
        err = _capi.Error()
        check(lib.kvtier_dtype_from_name(dtype.encode(), byref(out), byref(err)), err)
        return out.value
    raise TypeError(f"dtype must be a kvtier.DType or its name, got {type(dtype).__name__}")


class PoolInfo:
    """One pool of a layout: the engine registers `slot_bytes` per page."""

    __slots__ = ("name", "slot_bytes")

    def __init__(self, name: str, slot_bytes: int) -> None:
        self.name = name
        self.slot_bytes = slot_bytes

    def __repr__(self) -> str:
        return f"PoolInfo(name={self.name!r}, slot_bytes={self.slot_bytes})"


class BufferInfo:
    """One buffer of a layout (codec/FORMAT.md): role "k", "v", "mla_latent" or "lossless"."""

    __slots__ = ("name", "role", "layer", "dtype", "heads", "tokens", "head_dim", "row_stride",
                 "pool", "offset_bytes", "data_bytes")

    def __init__(self, info: Any) -> None:
        self.name: str = _capi.text(info.name)
        self.role: str = _capi.text(info.role)
        self.layer: int = info.layer
        self.dtype: DType = DType(info.dtype)
        self.heads: int = info.heads
        self.tokens: int = info.tokens
        self.head_dim: int = info.head_dim
        self.row_stride: int = info.row_stride
        self.pool: int = info.pool
        self.offset_bytes: int = info.offset_bytes
        self.data_bytes: int = info.data_bytes

    def __repr__(self) -> str:
        return (f"BufferInfo(name={self.name!r}, role={self.role!r}, pool={self.pool}, "
                f"offset_bytes={self.offset_bytes}, data_bytes={self.data_bytes})")


class PageLayout:
    """How one page of an engine's KV cache lies in its pools (an immutable value). Build one
    with gqa(), mla(), hybrid(), preset() or from_json(). dtype arguments take a kvtier.DType or
    its name."""

    def __init__(self, handle: int) -> None:
        """Takes ownership of a kvtier_layout handle (use the builders)."""
        self._handle: Optional[int] = handle
        err = _capi.Error()
        tokens, hot, pools = c_uint32(0), c_uint64(0), c_size_t(0)
        check(lib.kvtier_layout_info(handle, byref(tokens), byref(hot), byref(pools), byref(err)),
              err)
        fingerprint, has_mla, buffers = c_uint64(0), c_int(0), c_size_t(0)
        check(lib.kvtier_layout_summary(handle, byref(fingerprint), byref(has_mla),
                                        byref(buffers), byref(err)), err)
        self._tokens_per_page = tokens.value
        self._hot_page_bytes = hot.value
        self._fingerprint = fingerprint.value
        self._has_mla = bool(has_mla.value)
        self._pools: List[PoolInfo] = []
        for i in range(pools.value):
            slot = c_uint64(0)
            name = _capi.read_string(
                lambda buf, cap, req, e, i=i: lib.kvtier_layout_pool(handle, i, buf, cap, req,
                                                                      byref(slot), e))
            self._pools.append(PoolInfo(name, slot.value))
        self._buffers: List[BufferInfo] = []
        for i in range(buffers.value):
            info = _capi.BufferInfo()
            check(lib.kvtier_layout_buffer(handle, i, byref(info), byref(err)), err)
            self._buffers.append(BufferInfo(info))

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            lib.kvtier_layout_destroy(handle)

    @property
    def handle(self) -> int:
        """The kvtier_layout handle (borrowed; valid while this object lives)."""
        assert self._handle is not None
        return self._handle

    @staticmethod
    def _build(call: Any, *args: Any) -> "PageLayout":
        out = c_void_p(None)
        err = _capi.Error()
        check(call(*args, byref(out), byref(err)), err)
        return PageLayout(out.value)  # type: ignore[arg-type]

    @staticmethod
    def gqa(num_layers: int, kv_heads: int, head_dim: int, tokens_per_page: int,
            dtype: DTypeLike = "bf16", rope_start: int = 0, rope_len: int = 0) -> "PageLayout":
        """Grouped-query attention: per layer a K and a V buffer in one pool 'kv'; rope_len 0
        means RoPE over the whole K row."""
        u = _args.u32
        return PageLayout._build(lib.kvtier_layout_gqa, u(num_layers, "num_layers"),
                                 u(kv_heads, "kv_heads"), u(head_dim, "head_dim"),
                                 u(tokens_per_page, "tokens_per_page"), dtype_value(dtype),
                                 u(rope_start, "rope_start"), u(rope_len, "rope_len"))

    @staticmethod
    def mla(num_layers: int, tokens_per_page: int, kv_lora_rank: int = 512, rope_dim: int = 64,
            dtype: DTypeLike = "bf16", indexer_bytes_per_token: int = 0) -> "PageLayout":
        """Multi-head latent attention."""
        u = _args.u32
        return PageLayout._build(lib.kvtier_layout_mla, u(num_layers, "num_layers"),
                                 u(tokens_per_page, "tokens_per_page"),
                                 u(kv_lora_rank, "kv_lora_rank"), u(rope_dim, "rope_dim"),
                                 dtype_value(dtype),
                                 u(indexer_bytes_per_token, "indexer_bytes_per_token"))

    @staticmethod
    def hybrid(num_layers: int, attention_layers: Sequence[int], kv_heads: int, head_dim: int,
               tokens_per_page: int, state_bytes: int, dtype: DTypeLike = "bf16",
               rope_start: int = 0, rope_len: int = 0) -> "PageLayout":
        """Attention layers (K and V) and state layers kept losslessly."""
        u = _args.u32
        layers = _args.u32_array(attention_layers, "attention_layers")
        return PageLayout._build(lib.kvtier_layout_hybrid, u(num_layers, "num_layers"),
                                 layers.as_pointer(c_uint32), layers.count,
                                 u(kv_heads, "kv_heads"), u(head_dim, "head_dim"),
                                 u(tokens_per_page, "tokens_per_page"),
                                 u(state_bytes, "state_bytes"), dtype_value(dtype),
                                 u(rope_start, "rope_start"), u(rope_len, "rope_len"))

    @staticmethod
    def preset(name: str, tokens_per_page: int, dtype: DTypeLike = "bf16") -> "PageLayout":
        """A well-known model (see preset_names()); kvtier.NotFoundError lists them."""
        return PageLayout._build(lib.kvtier_layout_from_preset,
                                 _args.text_arg(name, "name").encode(),
                                 _args.u32(tokens_per_page, "tokens_per_page"),
                                 dtype_value(dtype))

    @staticmethod
    def preset_names() -> List[str]:
        names = _capi.read_string(lib.kvtier_layout_preset_names)
        return names.split("\n") if names else []

    @staticmethod
    def from_json(json: str) -> "PageLayout":
        """The JSON form of `kvtier-codec layout`."""
        return PageLayout._build(lib.kvtier_layout_from_json,
                                 _args.text_arg(json, "json").encode())

    def to_json(self) -> str:
        handle = self.handle
        return _capi.read_string(
            lambda buf, cap, req, e: lib.kvtier_layout_to_json(handle, buf, cap, req, e))

    @property
    def tokens_per_page(self) -> int:
        return self._tokens_per_page

    @property
    def pools(self) -> List[PoolInfo]:
        return list(self._pools)

    @property
    def buffers(self) -> List[BufferInfo]:
        return list(self._buffers)

    @property
    def hot_page_bytes(self) -> int:
        """Sum of the buffers' data bytes: what an offload reads per page."""
        return self._hot_page_bytes

    @property
    def fingerprint(self) -> int:
        """The layout's fingerprint, as the daemon derives namespaces from it."""
        return self._fingerprint

    @property
    def has_mla(self) -> bool:
        return self._has_mla

    def __repr__(self) -> str:
        return (f"PageLayout(tokens_per_page={self._tokens_per_page}, pools={len(self._pools)}, "
                f"buffers={len(self._buffers)}, hot_page_bytes={self._hot_page_bytes})")


def _keys(extra_keys: Sequence[bytes]) -> Any:
    keys = [_args.bytes_arg(k, "extra_keys[]") for k in extra_keys]
    if not keys:
        return None, None, 0, []
    bufs = [(c_uint8 * max(len(k), 1)).from_buffer_copy(k.ljust(1, b"\0")) for k in keys]
    ptrs = (ctypes.POINTER(c_uint8) * len(keys))(
        *[ctypes.cast(b, ctypes.POINTER(c_uint8)) for b in bufs])
    lens = (c_size_t * len(keys))(*[len(k) for k in keys])
    return ptrs, lens, len(keys), bufs


class BlockHasher:
    """Block hashes of token sequences, chained from an engine's hash_root: h_i =
    SHA-256(h_{i-1} || tokens of page i as little-endian u32 || extra key). Only full pages are
    hashed. Tokens: a list of int or a NumPy array (converted to uint32)."""

    def __init__(self, root: bytes, tokens_per_page: int) -> None:
        root = _args.bytes_arg(root, "root")
        self._root = root
        self._tokens_per_page = _args.u32(tokens_per_page, "tokens_per_page")
        out = c_void_p(None)
        err = _capi.Error()
        buf = (c_uint8 * max(len(root), 1)).from_buffer_copy(root.ljust(1, b"\0"))
        check(lib.kvtier_hasher_create(buf, len(root), self._tokens_per_page, byref(out),
                                       byref(err)), err)
        self._handle: Optional[int] = out.value

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            lib.kvtier_hasher_destroy(handle)

    def _hash(self, parent: Optional[bytes], tokens: IntArray,
              extra_keys: Sequence[bytes]) -> List[bytes]:
        toks = _args.u32_array(tokens, "tokens", check_range=False)
        pages = toks.count // self._tokens_per_page
        out = (c_uint8 * max(pages * BLOCK_HASH_BYTES, 1))()
        count = c_size_t(0)
        err = _capi.Error()
        ptrs, lens, nkeys, _bufs = _keys(extra_keys)
        parent_buf = None
        if parent is not None:
            parent = _args.bytes_arg(parent, "parent")
            parent_buf = (c_uint8 * max(len(parent), 1)).from_buffer_copy(parent.ljust(1, b"\0"))
        check(lib.kvtier_hasher_hash_v2(self._handle, parent_buf,
                                        0 if parent is None else len(parent),
                                        toks.as_pointer(c_uint32), toks.count, ptrs, lens, nkeys,
                                        out, pages, byref(count), byref(err)), err)
        return _args.split_hashes(bytes(out), count.value)

    def hash(self, tokens: IntArray, extra_keys: Sequence[bytes] = ()) -> List[bytes]:
        """The hashes (32 bytes each) of the full pages of `tokens`; `extra_keys`, when given,
        has one key per page."""
        return self._hash(None, tokens, extra_keys)

    def hash_after(self, parent: bytes, tokens: IntArray,
                   extra_keys: Sequence[bytes] = ()) -> List[bytes]:
        """Continues a chain after `parent` (a previous page's hash)."""
        return self._hash(parent, tokens, extra_keys)

    @staticmethod
    def next(parent: bytes, tokens: IntArray, extra_key: bytes = b"") -> bytes:
        """One link of the chain: the hash of the page `tokens` (any length) after `parent`."""
        parent = _args.bytes_arg(parent, "parent")
        extra_key = _args.bytes_arg(extra_key, "extra_key")
        toks = _args.u32_array(tokens, "tokens", check_range=False)
        out = (c_uint8 * BLOCK_HASH_BYTES)()
        err = _capi.Error()
        pbuf = (c_uint8 * max(len(parent), 1)).from_buffer_copy(parent.ljust(1, b"\0"))
        kbuf = (c_uint8 * max(len(extra_key), 1)).from_buffer_copy(extra_key.ljust(1, b"\0"))
        check(lib.kvtier_hash_next(pbuf, len(parent), toks.as_pointer(c_uint32), toks.count,
                                   kbuf, len(extra_key), out, byref(err)), err)
        return bytes(out)

    @property
    def root(self) -> bytes:
        return self._root

    @property
    def tokens_per_page(self) -> int:
        return self._tokens_per_page

    def __repr__(self) -> str:
        return f"BlockHasher(root={self._root.hex()[:16]}..., tokens_per_page={self._tokens_per_page})"


def hex_hash(hash: bytes) -> str:
    """Lower-case hex of a block hash."""
    return _args.bytes_arg(hash, "hash").hex()
