"""Argument conversion shared by the package: integers checked against their C types, token and
page-index sequences (lists, ranges, NumPy arrays) as contiguous C arrays, block hashes as one
buffer of equal-length hashes, and durations as milliseconds. NumPy is used when the argument is
a NumPy array and is never required."""

from __future__ import annotations

import array
import ctypes
import math
import numbers
from typing import Any, Iterable, List, Sequence, Tuple, Union

from kvtier._errors import invalid

U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
I64_MAX = 0x7FFFFFFFFFFFFFFF

IntLike = Union[int, numbers.Integral]
# Page indices and token ids: a sequence or range of ints, or a 1-D NumPy integer array (an
# Iterable of NumPy integers).
IntArray = Iterable[IntLike]


def integer(value: Any, name: str, low: int, high: int) -> int:
    """`value` as an int in [low, high]: TypeError for a non-integer (bool included),
    InvalidRequestError naming `name` for one out of range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        try:
            index = value.__index__()  # NumPy integers, IntEnums
        except (AttributeError, TypeError):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
        value = index
    value = int(value)
    if not low <= value <= high:
        raise invalid(f"{name} {value} is out of range [{low}, {high}]")
    return value


def u32(value: Any, name: str) -> int:
    return integer(value, name, 0, U32_MAX)


def u64(value: Any, name: str) -> int:
    return integer(value, name, 0, U64_MAX)


def i64(value: Any, name: str) -> int:
    return integer(value, name, -I64_MAX - 1, I64_MAX)


def millis(seconds: float, name: str) -> int:
    """A duration in float seconds as whole milliseconds (rounded up; 0 or less: 0)."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(seconds).__name__}")
    if not seconds > 0:
        return 0
    ms = math.ceil(float(seconds) * 1000.0)
    if ms > U32_MAX:
        raise invalid(f"{name} {seconds} s is longer than {U32_MAX // 1000} s")
    return ms


def _is_numpy(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "__array_interface__")


class CArray:
    """A contiguous C array made from a sequence, with the object that owns its memory."""

    def __init__(self, owner: Any, pointer: int, count: int) -> None:
        self.owner = owner
        self.pointer = pointer
        self.count = count

    def as_pointer(self, ctype: Any) -> Any:
        return ctypes.cast(ctypes.c_void_p(self.pointer or None), ctypes.POINTER(ctype))


def _from_numpy(value: Any, dtype: str, name: str, check_range: bool) -> CArray:
    import numpy as np
    arr = np.ascontiguousarray(value).reshape(-1)
    if check_range and arr.size and arr.dtype.kind in "iu":
        info = np.iinfo(np.dtype(dtype))
        low, high = arr.min(), arr.max()
        if low < info.min or high > info.max:
            raise invalid(f"{name}: value {low if low < info.min else high} is out of range "
                          f"[{info.min}, {info.max}]")
    elif check_range and arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got a {arr.dtype} array")
    arr = np.ascontiguousarray(arr, dtype=dtype)
    return CArray(arr, arr.ctypes.data if arr.size else 0, int(arr.size))


def _from_sequence(value: Iterable[Any], typecode: str, name: str) -> CArray:
    try:
        arr = array.array(typecode, value)
    except OverflowError as e:
        raise invalid(f"{name}: {e}") from None
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers or a NumPy array") from None
    if len(arr) == 0:
        return CArray(arr, 0, 0)
    address, count = arr.buffer_info()
    return CArray(arr, address, count)


def u32_array(value: Any, name: str, check_range: bool = True) -> CArray:
    """uint32 elements: page indices (range-checked) or tokens (NumPy arrays cast, as any uint32
    conversion of token ids would)."""
    if _is_numpy(value):
        return _from_numpy(value, "uint32", name, check_range)
    return _from_sequence(value, "I", name)


def i32_array(value: Any, name: str) -> CArray:
    if _is_numpy(value):
        return _from_numpy(value, "int32", name, True)
    return _from_sequence(value, "i", name)


def f32_array(value: Any, name: str) -> CArray:
    """float32 elements, flattened row-major (NumPy arrays of any shape, or flat sequences)."""
    if _is_numpy(value):
        import numpy as np
        arr = np.ascontiguousarray(value, dtype=np.float32).reshape(-1)
        return CArray(arr, arr.ctypes.data if arr.size else 0, int(arr.size))
    try:
        arr = array.array("f", value)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of numbers or a NumPy array") from None
    return CArray(arr, arr.buffer_info()[0] if len(arr) else 0, len(arr))


def int_list(value: Any, name: str) -> List[int]:
    """A sequence of int32 values as a list (copied)."""
    return [int(v) for v in i32_array(value, name).owner]


def hash_buffer(hashes: Sequence[Any], name: str = "block hashes") -> Tuple[Any, int, int]:
    """The hashes end to end as (ctypes buffer, hash_len, count). Hashes must be bytes (or
    bytearray). Hashes of different lengths are zero-padded to 32 bytes, which is how the daemon
    keys a shorter hash; lengths are otherwise checked by the library."""
    if isinstance(hashes, (bytes, bytearray, str)):
        raise TypeError(f"{name} must be a sequence of bytes, not one {type(hashes).__name__}")
    items = list(hashes)
    for h in items:
        if not isinstance(h, (bytes, bytearray)):
            raise TypeError(f"{name} must be bytes, got {type(h).__name__}")
    if not items:
        return (None, 32, 0)
    lengths = {len(h) for h in items}
    if len(lengths) == 1:
        hash_len = lengths.pop()
        data = b"".join(bytes(h) for h in items)
    else:
        hash_len = 32
        if max(lengths) > 32 or min(lengths) == 0:
            bad = next(h for h in items if len(h) == 0 or len(h) > 32)
            raise invalid(f"a block hash of {len(bad)} bytes is not 1 to 32 bytes")
        data = b"".join(bytes(h).ljust(32, b"\0") for h in items)
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data) if data else None
    return (buf, hash_len, len(items))


def split_hashes(data: bytes, count: int) -> List[bytes]:
    return [data[i * 32:(i + 1) * 32] for i in range(count)]


def bytes_arg(value: Any, name: str) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    return bytes(value)


def text_arg(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value
