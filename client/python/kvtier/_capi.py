"""libkvtier's C ABI through ctypes: finding and loading the library, the C structs of kvtier.h,
kvtier_v2.h and kvtier_evictor.h, and the prototype of every function the package calls.

Where the library comes from, first match wins:
  1. $KVTIER_LIBRARY, a path to libkvtier.so (a build tree's, an installed prefix's);
  2. the copy inside the package (kvtier/_lib/, put there when the package is built from the
     source tree); libraries it needs that were bundled beside it are loaded first, except those
     the process already has (its own libstdc++, OpenSSL...);
  3. the dynamic linker's search (ldconfig's cache, LD_LIBRARY_PATH): libkvtier.so.0.
ctypes releases the GIL around every foreign call, so blocking calls (RPCs, file I/O) let other
Python threads run. Internal: the public API is the kvtier package.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p)
from typing import Any, Dict, List, Optional, Set

_HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED_DIR = os.path.join(_HERE, "_lib")
LIBRARY_ENV = "KVTIER_LIBRARY"
SONAME = "libkvtier.so.0"


def _mapped_basenames() -> Set[str]:
    """Basenames of the shared objects this process has mapped (from /proc/self/maps)."""
    names = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if path.startswith("/") and ".so" in path:
                    names.add(os.path.basename(path))
    except OSError:
        pass
    return names


def _preload_bundled(exclude: str) -> None:
    """Loads the libraries bundled beside libkvtier (RTLD_LOCAL: their symbols stay out of the
    process's global scope), each after what it needs, so that loading libkvtier finds them by
    their SONAME. Libraries the process already maps are left to the process's copy."""
    loaded = _mapped_basenames()
    pending = sorted(f for f in os.listdir(BUNDLED_DIR)
                     if ".so" in f and f != exclude and f not in loaded)
    while pending:
        left = []
        for name in pending:
            try:
                ctypes.CDLL(os.path.join(BUNDLED_DIR, name), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
            except OSError:
                left.append(name)  # needs one that is not loaded yet
        if len(left) == len(pending):
            return  # loading libkvtier reports what is missing
        pending = left


def _load() -> ctypes.CDLL:
    tried: List[str] = []
    env = os.environ.get(LIBRARY_ENV, "")
    if env:
        try:
            return ctypes.CDLL(env)
        except OSError as e:
            raise ImportError(f"kvtier: ${LIBRARY_ENV}={env!r} could not be loaded: {e}") from e
    if os.path.isdir(BUNDLED_DIR):
        bundled = [f for f in os.listdir(BUNDLED_DIR) if f.startswith("libkvtier.so")]
        if bundled:
            _preload_bundled(bundled[0])
            path = os.path.join(BUNDLED_DIR, bundled[0])
            try:
                return ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path}: {e}")
    try:
        return ctypes.CDLL(SONAME)
    except OSError as e:
        tried.append(f"{SONAME} (the dynamic linker's search path): {e}")
    raise ImportError("kvtier: libkvtier could not be loaded; set $" + LIBRARY_ENV +
                      " to the path of libkvtier.so, or install the package built from a tree "
                      "that has it. Tried:\n  " + "\n  ".join(tried))


lib = _load()

# ---- kvtier.h -----------------------------------------------------------------------------------

ERROR_MESSAGE_BYTES = 512
ENGINE_ID_BYTES = 128
BLOCK_HASH_BYTES = 32
MAX_TIERS = 4
ITEM_MESSAGE_BYTES = 256


class Error(Structure):
    _fields_ = [("code", c_int), ("message", c_char * ERROR_MESSAGE_BYTES)]


class ServerInfo(Structure):
    _fields_ = [("api_version", c_uint32), ("incarnation_id", c_uint64),
                ("server_version", c_char * 64), ("node_name", c_char * 128),
                ("codecs", c_char * 128), ("tier_mask", c_uint32),
                ("max_items_per_request", c_uint32), ("cuda", c_int), ("cuda_ipc_pools", c_int),
                ("shared_memory_pools", c_int), ("persistent_host_tier", c_int),
                ("authentication", c_int), ("draining", c_int)]


class EngineInfo(Structure):
    _fields_ = [("namespace_id", c_uint64), ("hot_page_bytes", c_uint64),
                ("cold_block_bytes", c_uint64), ("incarnation_id", c_uint64),
                ("lease_ttl_ms", c_uint64), ("codec", c_char * 32)]


class OffloadOptions(Structure):
    _fields_ = [("durable", c_int), ("priority", c_int), ("ack", c_int)]


class ParkOptions(Structure):
    _fields_ = [("append", c_int), ("num_tokens", c_uint64), ("user_data", POINTER(c_uint8)),
                ("user_data_len", c_size_t), ("ttl_ms", c_uint32), ("priority", c_int),
                ("ack", c_int)]


class ParkResult(Structure):
    _fields_ = [("parked_pages", c_uint32), ("cold_bytes", c_uint64),
                ("expires_at_unix_ms", c_int64), ("tier", c_int)]


class ResumeResult(Structure):
    _fields_ = [("resumed_pages", c_uint32), ("parked_pages", c_uint32),
                ("num_tokens", c_uint64), ("user_data_len", c_size_t), ("released", c_int)]


class TierStats(Structure):
    _fields_ = [("tier", c_int)] + [(name, c_uint64) for name in (
        "capacity_bytes", "used_bytes", "blocks", "pinned_blocks", "hits", "misses", "bytes_in",
        "bytes_out", "evicted_blocks", "checksum_failures")]


class Stats(Structure):
    _fields_ = [("incarnation_id", c_uint64), ("uptime_ms", c_uint64),
                ("hot_bytes_offloaded", c_uint64), ("cold_bytes_offloaded", c_uint64),
                ("hot_bytes_onboarded", c_uint64), ("cold_bytes_onboarded", c_uint64),
                ("dropped_offloads", c_uint64), ("parked_requests", c_uint64),
                ("registered_engines", c_uint32), ("draining", c_int), ("num_tiers", c_uint32),
                ("tiers", TierStats * MAX_TIERS)]


class Event(Structure):
    _fields_ = [("kind", c_int), ("sequence", c_uint64), ("namespace_id", c_uint64),
                ("block_hashes", POINTER(c_uint8)), ("num_hashes", c_size_t), ("tier", c_int),
                ("from_tier", c_int), ("count", c_uint64)]


EVENT_FN = CFUNCTYPE(None, POINTER(Event), c_void_p)
WATCH_DONE_FN = CFUNCTYPE(None, POINTER(Error), c_void_p)

# ---- kvtier_v2.h --------------------------------------------------------------------------------

POOL_SHARED_MEMORY = 1
POOL_CUDA_IPC = 2


class ConnectOptions(Structure):
    _fields_ = [("socket_path", c_char_p), ("target", c_char_p), ("client_name", c_char_p),
                ("token", c_char_p), ("connect_timeout_ms", c_uint32),
                ("rpc_timeout_ms", c_uint32), ("no_keep_alive", c_int)]


class ServerInfoV2(Structure):
    _fields_ = [("info", ServerInfo), ("features", c_char * 1024)]


class CudaIpcPool(Structure):
    _fields_ = [("handle", c_uint8 * 64), ("device_uuid", c_uint8 * 16),
                ("device_ordinal", c_uint32), ("base_offset_bytes", c_uint64),
                ("size_bytes", c_uint64)]


class PoolRegistration(Structure):
    _fields_ = [("name", c_char_p), ("slots", c_uint32), ("kind", c_int), ("path", c_char_p),
                ("shm_name", c_char_p), ("offset_bytes", c_uint64), ("size_bytes", c_uint64),
                ("cuda", CudaIpcPool)]


class EngineOptionsV2(Structure):
    _fields_ = [("model", c_char_p), ("engine_name", c_char_p), ("tenant", c_char_p),
                ("partition", c_char_p), ("codec", c_char_p), ("layout", c_void_p),
                ("pools", POINTER(PoolRegistration)), ("num_pools", c_size_t),
                ("codec_alignment_bytes", c_uint32), ("lease_ttl_ms", c_uint32)]


class Item(Structure):
    _fields_ = [("code", c_int), ("tier", c_int), ("message", c_char * ITEM_MESSAGE_BYTES)]


class TransferResult(Structure):
    _fields_ = [("pages", c_uint32), ("hot_bytes", c_uint64), ("cold_bytes", c_uint64)]


class NamespaceStats(Structure):
    _fields_ = [("namespace_id", c_uint64), ("tenant", c_char * 128), ("model", c_char * 256),
                ("partition", c_char * 128), ("engines", c_uint32), ("hits", c_uint64),
                ("misses", c_uint64), ("parked_requests", c_uint64), ("num_tiers", c_uint32),
                ("tiers", TierStats * MAX_TIERS)]


class BufferInfo(Structure):
    _fields_ = [("name", c_char * 64), ("role", c_char * 32), ("layer", c_uint32),
                ("dtype", c_int), ("heads", c_uint32), ("tokens", c_uint32),
                ("head_dim", c_uint32), ("row_stride", c_uint32), ("pool", c_uint32),
                ("offset_bytes", c_uint64), ("data_bytes", c_uint64)]


# ---- kvtier_evictor.h ---------------------------------------------------------------------------

class EvictorConfig(Structure):
    _fields_ = [("budget", c_int64), ("beta", c_int64), ("mode", c_int), ("normalize", c_int),
                ("order", c_int), ("num_offsets", c_int), ("device", c_int),
                ("max_batch", c_int), ("max_decode_tokens", c_int64)]


class KvCacheView(Structure):
    _fields_ = [("k_pools", POINTER(c_void_p)), ("v_pools", POINTER(c_void_p)),
                ("num_layers", c_size_t), ("num_pages", c_int64), ("page_tokens", c_int),
                ("num_kv_heads", c_int), ("head_dim", c_int), ("dtype", c_int),
                ("layout", c_int), ("pool_kind", c_int), ("memory", c_int),
                ("page_stride_bytes", c_uint64)]


class CalibrationArrays(Structure):
    _fields_ = [("layers", c_int), ("heads", c_int),
                ("q_mean_real", POINTER(c_float)), ("q_mean_real_len", c_size_t),
                ("q_mean_imag", POINTER(c_float)), ("q_mean_imag_len", c_size_t),
                ("q_abs_mean", POINTER(c_float)), ("q_abs_mean_len", c_size_t),
                ("omega", POINTER(c_float)), ("omega_len", c_size_t),
                ("freq_scale_sq", POINTER(c_float)), ("freq_scale_sq_len", c_size_t)]


class StepRequest(Structure):
    _fields_ = [("id", c_uint64), ("new_tokens", c_int64), ("block_table", POINTER(c_int32)),
                ("block_table_len", c_size_t), ("length", c_int64), ("prompt_len", c_int64),
                ("protected_tail", c_int64)]


class StepOutcome(Structure):
    _fields_ = [("id", c_uint64), ("evicted", c_int), ("new_length", c_int64),
                ("evicted_tokens", c_int64), ("freed_offset", c_size_t),
                ("freed_count", c_size_t)]


class RoundState(Structure):
    _fields_ = [(name, c_int64) for name in (
        "prompt_len", "confirmed_length", "generation_steps", "last_boundary", "evicted_tokens",
        "logical_length")]


# ---- prototypes ---------------------------------------------------------------------------------

_P = POINTER
_u8p = _P(c_uint8)
_u32p = _P(c_uint32)
_err = _P(Error)
_PROTOTYPES: Dict[str, Any] = {
    # kvtier.h
    "kvtier_version": (c_char_p, []),
    "kvtier_client_close": (None, [c_void_p]),
    "kvtier_layout_from_preset": (c_int, [c_char_p, c_uint32, c_int, _P(c_void_p), _err]),
    "kvtier_layout_gqa": (c_int, [c_uint32] * 4 + [c_int, c_uint32, c_uint32, _P(c_void_p),
                                                   _err]),
    "kvtier_layout_from_json": (c_int, [c_char_p, _P(c_void_p), _err]),
    "kvtier_layout_destroy": (None, [c_void_p]),
    "kvtier_layout_info": (c_int, [c_void_p, _u32p, _P(c_uint64), _P(c_size_t), _err]),
    "kvtier_layout_pool": (c_int, [c_void_p, c_size_t, c_char_p, c_size_t, _P(c_size_t),
                                   _P(c_uint64), _err]),
    "kvtier_layout_to_json": (c_int, [c_void_p, c_char_p, c_size_t, _P(c_size_t), _err]),
    "kvtier_hasher_create": (c_int, [_u8p, c_size_t, c_uint32, _P(c_void_p), _err]),
    "kvtier_hasher_destroy": (None, [c_void_p]),
    "kvtier_shm_pool_create": (c_int, [c_char_p, c_char_p, c_uint32, c_uint64, _P(c_void_p),
                                       _err]),
    "kvtier_shm_pool_destroy": (None, [c_void_p]),
    "kvtier_shm_pool_data": (c_int, [c_void_p, _P(c_void_p), _P(c_uint64), _err]),
    "kvtier_client_unregister": (c_int, [c_void_p, c_char_p, _err]),
    "kvtier_client_park": (c_int, [c_void_p, c_char_p, c_char_p, _u32p, c_size_t,
                                   _P(ParkOptions), _P(ParkResult), _err]),
    "kvtier_client_watch_events": (c_int, [c_void_p, c_int, c_uint64, EVENT_FN, WATCH_DONE_FN,
                                           c_void_p, _P(c_void_p), _err]),
    "kvtier_watch_destroy": (None, [c_void_p]),
    # kvtier_v2.h
    "kvtier_free": (None, [c_void_p]),
    "kvtier_client_connect_v2": (c_int, [_P(ConnectOptions), _P(c_void_p), _err]),
    "kvtier_client_server_info_v2": (c_int, [c_void_p, c_int, _P(ServerInfoV2), _err]),
    "kvtier_client_keep_alive": (c_int, [c_void_p, c_char_p, _err]),
    "kvtier_cuda_available": (c_int, []),
    "kvtier_cuda_export_pool": (c_int, [c_char_p, c_uint32, c_int, c_void_p, c_uint64, c_uint64,
                                        _P(CudaIpcPool), _err]),
    "kvtier_device_pool_create": (c_int, [c_int, c_char_p, c_uint32, c_uint64, _P(c_void_p),
                                          _err]),
    "kvtier_device_pool_destroy": (None, [c_void_p]),
    "kvtier_device_pool_info": (c_int, [c_void_p, _P(c_void_p), _P(c_uint64), _P(CudaIpcPool),
                                        _err]),
    "kvtier_client_register_engine_v2": (c_int, [c_void_p, _P(EngineOptionsV2), c_char_p,
                                                 c_size_t, _u8p, _P(EngineInfo), _err]),
    "kvtier_client_lookup_v2": (c_int, [c_void_p, c_char_p, _u8p, c_size_t, c_size_t, c_uint32,
                                        _u32p, _P(c_int), _P(c_int64), _err]),
    "kvtier_client_offload_v2": (c_int, [c_void_p, c_char_p, _u8p, c_size_t, _u32p, c_size_t,
                                         _P(OffloadOptions), _P(TransferResult), _P(Item), _err]),
    "kvtier_client_offload_tokens": (c_int, [c_void_p, c_char_p, _u8p, c_size_t, _u32p, c_size_t,
                                             _u32p, _u32p, _P(OffloadOptions),
                                             _P(TransferResult), _P(Item), _err]),
    "kvtier_client_onboard_v2": (c_int, [c_void_p, c_char_p, _u8p, c_size_t, _u32p, c_size_t,
                                         c_int, _P(TransferResult), _P(Item), _err]),
    "kvtier_client_pin_v2": (c_int, [c_void_p, c_char_p, _u8p, c_size_t, c_size_t, c_uint32,
                                     _P(c_int64), _P(Item), _err]),
    "kvtier_client_unpin_v2": (c_int, [c_void_p, c_char_p, _u8p, c_size_t, c_size_t, _P(Item),
                                       _err]),
    "kvtier_client_resume_v2": (c_int, [c_void_p, c_char_p, c_char_p, _u32p, c_size_t, c_uint32,
                                        c_int, _P(ResumeResult), _P(c_void_p), _err]),
    "kvtier_client_release_v2": (c_int, [c_void_p, c_char_p, _P(c_char_p), c_size_t, _P(Item),
                                         _P(c_uint64), _err]),
    "kvtier_client_stats_v2": (c_int, [c_void_p, c_int, _P(Stats), _P(NamespaceStats), c_size_t,
                                       _P(c_size_t), _err]),
    "kvtier_dtype_from_name": (c_int, [c_char_p, _P(c_int), _err]),
    "kvtier_layout_mla": (c_int, [c_uint32] * 4 + [c_int, c_uint32, _P(c_void_p), _err]),
    "kvtier_layout_hybrid": (c_int, [c_uint32, _u32p, c_size_t] + [c_uint32] * 4 +
                             [c_int, c_uint32, c_uint32, _P(c_void_p), _err]),
    "kvtier_layout_preset_names": (c_int, [c_char_p, c_size_t, _P(c_size_t), _err]),
    "kvtier_layout_summary": (c_int, [c_void_p, _P(c_uint64), _P(c_int), _P(c_size_t), _err]),
    "kvtier_layout_buffer": (c_int, [c_void_p, c_size_t, _P(BufferInfo), _err]),
    "kvtier_hasher_hash_v2": (c_int, [c_void_p, _u8p, c_size_t, _u32p, c_size_t, _P(_u8p),
                                      _P(c_size_t), c_size_t, _u8p, c_size_t, _P(c_size_t),
                                      _err]),
    "kvtier_hash_next": (c_int, [_u8p, c_size_t, _u32p, c_size_t, _u8p, c_size_t, _u8p, _err]),
    "kvtier_compression_config_defaults": (c_int, [_P(c_void_p), _err]),
    "kvtier_compression_config_parse": (c_int, [c_char_p, _P(c_void_p), _err]),
    "kvtier_compression_config_load": (c_int, [c_char_p, _P(c_void_p), _err]),
    "kvtier_compression_config_destroy": (None, [c_void_p]),
    "kvtier_compression_config_field": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t,
                                                _P(c_size_t), _err]),
    "kvtier_compression_config_num_options": (c_size_t, [c_void_p]),
    "kvtier_compression_config_option": (c_int, [c_void_p, c_size_t, c_char_p, c_size_t,
                                                 _P(c_size_t), c_char_p, c_size_t, _P(c_size_t),
                                                 _err]),
    "kvtier_compression_method_names": (c_int, [c_char_p, c_size_t, _P(c_size_t), _err]),
    # kvtier_evictor.h
    "kvtier_evictor_config_defaults": (None, [_P(EvictorConfig)]),
    "kvtier_kv_cache_view_validate": (c_int, [_P(KvCacheView), _err]),
    "kvtier_evictor_create": (c_int, [_P(EvictorConfig), _P(CalibrationArrays), _P(KvCacheView),
                                      _P(c_void_p), _err]),
    "kvtier_evictor_create_from_files": (c_int, [_P(EvictorConfig), c_char_p, c_char_p,
                                                 _P(KvCacheView), _P(c_void_p), _err]),
    "kvtier_evictor_destroy": (None, [c_void_p]),
    "kvtier_evictor_add_request": (c_int, [c_void_p, c_uint64, c_int64, _err]),
    "kvtier_evictor_remove_request": (c_int, [c_void_p, c_uint64, _err]),
    "kvtier_evictor_step_end": (c_int, [c_void_p, _P(StepRequest), c_size_t, c_void_p,
                                        _P(StepOutcome), _P(c_int32), c_size_t, _err]),
    "kvtier_evictor_state": (c_int, [c_void_p, c_uint64, _P(RoundState), _err]),
    "kvtier_evictor_info": (c_int, [c_void_p, _P(EvictorConfig), _P(c_int), _P(c_int64), _err]),
}

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    try:
        _fn = getattr(lib, _name)
    except AttributeError as _e:
        raise ImportError(f"kvtier: the loaded libkvtier ({lib._name}) has no {_name}: it is "
                          "older than this package") from _e
    _fn.restype = _restype
    _fn.argtypes = _argtypes


class Handle:
    """Owns a C handle and destroys it when the last reference goes (never twice; the destroy
    function is held here, so it still works while the interpreter tears modules down)."""

    __slots__ = ("value", "_destroy")

    def __init__(self, value: Optional[int], destroy: Any) -> None:
        self.value = value
        self._destroy = destroy

    def release(self) -> None:
        value, self.value = self.value, None
        if value:
            self._destroy(value)

    def __del__(self) -> None:
        self.release()


def text(value: bytes) -> str:
    """A NUL-terminated C char array's bytes as str."""
    return value.decode("utf-8", "replace")


def cstr(value: Optional[str]) -> Optional[bytes]:
    """A str argument as NUL-terminated UTF-8 (None stays NULL)."""
    return None if value is None else value.encode("utf-8")


def read_string(call: Any, *args: Any) -> str:
    """Calls `call(*args, buffer, capacity, &required, err)` (the caller-buffer convention),
    growing the buffer once when it was too small; raises kvtier.Error for other failures."""
    from kvtier._errors import check
    capacity = 4096
    for _ in range(2):
        buf = ctypes.create_string_buffer(capacity)
        required = c_size_t(0)
        err = Error()
        status = call(*args, buf, capacity, ctypes.byref(required), ctypes.byref(err))
        if status == 0:
            return text(buf.value)
        if status != 8 or required.value <= capacity:  # 8: RESOURCE_EXHAUSTED
            check(status, err)
        capacity = required.value
    raise AssertionError("unreachable")
