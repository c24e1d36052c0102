"""The compression configuration (kvtier/compression.h): one method's settings, parsed from the
same YAML / JSON block in C++, Python and the example engine."""

from __future__ import annotations

import ctypes
from ctypes import byref, c_size_t, c_void_p
from typing import Any, Dict, List

from kvtier import _args, _capi
from kvtier._capi import lib
from kvtier._errors import check

_INT_FIELDS = ("budget", "beta")
_BOOL_FIELDS = ("durable",)
_TEXT_FIELDS = ("algorithm", "eviction_mode", "calibration_path", "model_config_path", "quant",
                "rope_precision", "daemon_socket")


def _field(handle: int, name: str) -> str:
    key = name.encode()
    return _capi.read_string(
        lambda buf, cap, req, e: lib.kvtier_compression_config_field(handle, key, buf, cap, req,
                                                                      e))


def _option(handle: int, index: int) -> Any:
    key_cap, value_cap = 256, 4096
    for _ in range(2):
        key = ctypes.create_string_buffer(key_cap)
        value = ctypes.create_string_buffer(value_cap)
        key_req, value_req = c_size_t(0), c_size_t(0)
        err = _capi.Error()
        status = lib.kvtier_compression_config_option(handle, index, key, key_cap, byref(key_req),
                                                      value, value_cap, byref(value_req),
                                                      byref(err))
        if status == 0:
            return _capi.text(key.value), _capi.text(value.value)
        if status != 8:  # RESOURCE_EXHAUSTED: a larger buffer
            check(status, err)
        key_cap, value_cap = max(key_cap, key_req.value), max(value_cap, value_req.value)
    raise AssertionError("unreachable")


class CompressionConfig:
    """One compression method's settings (kvtier/compression.h); `options` holds every key of
    the block as text. CompressionConfig() has every default."""

    algorithm: str
    budget: int
    beta: int
    eviction_mode: str
    calibration_path: str
    model_config_path: str
    quant: str
    rope_precision: str
    daemon_socket: str
    durable: bool
    options: Dict[str, str]

    def __init__(self) -> None:
        out = c_void_p(None)
        err = _capi.Error()
        check(lib.kvtier_compression_config_defaults(byref(out), byref(err)), err)
        self._read(out.value)  # type: ignore[arg-type]

    @classmethod
    def _from(cls, call: Any, arg: bytes) -> "CompressionConfig":
        out = c_void_p(None)
        err = _capi.Error()
        check(call(arg, byref(out), byref(err)), err)
        config = cls.__new__(cls)
        config._read(out.value)
        return config

    def _read(self, handle: int) -> None:
        try:
            for name in _TEXT_FIELDS:
                setattr(self, name, _field(handle, name))
            for name in _INT_FIELDS:
                setattr(self, name, int(_field(handle, name)))
            for name in _BOOL_FIELDS:
                setattr(self, name, _field(handle, name) == "true")
            self.options = dict(_option(handle, i)
                                for i in range(lib.kvtier_compression_config_num_options(handle)))
        finally:
            lib.kvtier_compression_config_destroy(handle)

    def __repr__(self) -> str:
        return f"CompressionConfig(algorithm={self.algorithm!r}, {len(self.options)} options)"


def parse_compression_config(text: str) -> CompressionConfig:
    """Parses one configuration block (YAML or JSON); InvalidRequestError names the key."""
    return CompressionConfig._from(lib.kvtier_compression_config_parse,
                                   _args.text_arg(text, "text").encode())


def load_compression_config(path: str) -> CompressionConfig:
    return CompressionConfig._from(lib.kvtier_compression_config_load,
                                   _args.text_arg(path, "path").encode())


def compression_method_names() -> List[str]:
    """The registered compression methods, sorted."""
    names = _capi.read_string(lib.kvtier_compression_method_names)
    return names.split("\n") if names else []
