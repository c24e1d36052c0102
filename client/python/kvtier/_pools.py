"""The pools an engine registers (kvtier/pools.h): shared-memory files mapped by both processes
(SharedMemoryPool, viewed as NumPy arrays or memoryviews), GPU memory exported through CUDA IPC
(PoolRegistration.cuda / from_dlpack for a framework's tensor, DevicePool for memory libkvtier
allocates), and PoolRegistration, the value register_engine sends."""

from __future__ import annotations

import ctypes
from ctypes import (POINTER, Structure, byref, c_char_p, c_int32, c_int64, c_uint8, c_uint16,
                    c_uint64, c_void_p, py_object)
from typing import Any, List, Optional

from kvtier import _args, _capi
from kvtier._capi import lib
from kvtier._errors import check
from kvtier._layout import PageLayout


def cuda_available() -> bool:
    """True when libkvtier was built with CUDA and sees a device."""
    return bool(lib.kvtier_cuda_available())


class PoolRegistration:
    """One pool as register_engine sends it: a shared-memory file (kind "shared_memory") or a
    CUDA IPC export (kind "cuda_ipc"). A registration made from an object (a SharedMemoryPool,
    a DevicePool, a DLPack array) keeps it alive, and so does the Engine registered with it."""

    def __init__(self, name: str, slots: int, kind: str, *, path: str = "", shm_name: str = "",
                 offset_bytes: int = 0, size_bytes: int = 0,
                 cuda: Optional[_capi.CudaIpcPool] = None, owner: Any = None) -> None:
        self.name = _args.text_arg(name, "name")
        self.slots = _args.u32(slots, "slots")
        self.kind = kind
        self.path = path
        self.shm_name = shm_name
        self.size_bytes = size_bytes
        self.offset_bytes = offset_bytes
        self.device_ordinal: Optional[int] = None if cuda is None else int(cuda.device_ordinal)
        self._cuda = cuda
        self._owner = owner

    @staticmethod
    def shared_memory(name: str, slots: int, *, path: str = "", shm_name: str = "",
                      offset_bytes: int = 0, size_bytes: int = 0) -> "PoolRegistration":
        """A file the engine mapped itself (`path`, or a POSIX `shm_name`); size_bytes 0 means
        slots x slot_bytes."""
        return PoolRegistration(name, slots, "shared_memory", path=_args.text_arg(path, "path"),
                                shm_name=_args.text_arg(shm_name, "shm_name"),
                                offset_bytes=_args.u64(offset_bytes, "offset_bytes"),
                                size_bytes=_args.u64(size_bytes, "size_bytes"))

    @staticmethod
    def cuda(name: str, slots: int, device: int, pointer: int, size_bytes: int,
             offset_bytes: int = 0) -> "PoolRegistration":
        """Exports `size_bytes` of device memory starting `offset_bytes` after the device address
        `pointer` (e.g. torch's t.data_ptr(); it may lie inside a larger allocation).
        kvtier.Error UNIMPLEMENTED in builds without CUDA."""
        return _export(name, slots, device, pointer, size_bytes, offset_bytes, owner=None)

    @staticmethod
    def from_dlpack(name: str, slots: int, array: Any) -> "PoolRegistration":
        """Exports a C-contiguous CUDA array (torch.Tensor, cupy.ndarray: anything with
        __dlpack__) as the pool `name` (the registration names its cudaMalloc allocation and the
        array's offset in it); the array's bytes must hold `slots` pages. ValueError for host or
        non-contiguous arrays; kvtier.Error UNIMPLEMENTED in builds without CUDA."""
        r = read_dlpack(array)
        if r.device_type != DL_CUDA:
            raise ValueError(f"pool '{name}': a DLPack array on device type {r.device_type} (not "
                             "CUDA) cannot be shared with kvtierd; for a host pool create a "
                             "kvtier.SharedMemoryPool and use its array()")
        return _export(name, slots, r.device_id, r.pointer, r.bytes, 0, owner=array)

    def to_c(self, keep: List[Any]) -> _capi.PoolRegistration:
        """The C struct (its strings appended to `keep`, which must outlive it)."""
        c = _capi.PoolRegistration()
        name = self.name.encode()
        keep.append(name)
        c.name = name
        c.slots = self.slots
        if self.kind == "cuda_ipc":
            assert self._cuda is not None
            c.kind = _capi.POOL_CUDA_IPC
            c.cuda = self._cuda
        else:
            path, shm = self.path.encode(), self.shm_name.encode()
            keep.extend((path, shm))
            c.kind = _capi.POOL_SHARED_MEMORY
            c.path = path
            c.shm_name = shm
            c.offset_bytes = self.offset_bytes
            c.size_bytes = self.size_bytes
        return c

    def __repr__(self) -> str:
        where = f"path={self.path!r}" if self.kind == "shared_memory" else "cuda_ipc"
        if self.kind == "shared_memory" and self.shm_name and not self.path:
            where = f"shm_name={self.shm_name!r}"
        return f"PoolRegistration(name={self.name!r}, slots={self.slots}, {where})"


def _export(name: str, slots: int, device: int, pointer: int, size_bytes: int,
            offset_bytes: int, owner: Any) -> PoolRegistration:
    pool = _capi.CudaIpcPool()
    err = _capi.Error()
    check(lib.kvtier_cuda_export_pool(_args.text_arg(name, "name").encode(),
                                      _args.u32(slots, "slots"),
                                      _args.integer(device, "device", 0, 2**31 - 1),
                                      _args.u64(pointer, "pointer") or None,
                                      _args.u64(offset_bytes, "offset_bytes"),
                                      _args.u64(size_bytes, "size_bytes"), byref(pool),
                                      byref(err)), err)
    return PoolRegistration(name, slots, "cuda_ipc", offset_bytes=int(pool.base_offset_bytes),
                            size_bytes=int(pool.size_bytes), cuda=pool, owner=owner)


class SharedMemoryPool:
    """A host pool in a shared-memory file (under the daemon's pools.allowed_dirs), mapped
    read-write; the file is removed when the pool is garbage-collected. array() and slot() are
    writable NumPy views sharing the mapping, view() a writable memoryview (no NumPy needed);
    each keeps the pool alive."""

    def __init__(self, path: str, name: str, slots: int, slot_bytes: int) -> None:
        self._path = _args.text_arg(path, "path")
        self._name = _args.text_arg(name, "name")
        self._slots = _args.u32(slots, "slots")
        self._slot_bytes = _args.u64(slot_bytes, "slot_bytes")
        out = c_void_p(None)
        err = _capi.Error()
        check(lib.kvtier_shm_pool_create(self._path.encode(), self._name.encode(), self._slots,
                                         self._slot_bytes, byref(out), byref(err)), err)
        self._owner = _capi.Handle(out.value, lib.kvtier_shm_pool_destroy)
        data, size = c_void_p(None), c_uint64(0)
        check(lib.kvtier_shm_pool_data(out.value, byref(data), byref(size), byref(err)), err)
        self._data: int = data.value or 0
        self._size = size.value
        # One ctypes array over the mapping. Its (subclass) instance holds the handle, so every
        # buffer exported from it (memoryviews, NumPy arrays) keeps the mapping alive; the last
        # reference to go unmaps it and removes the file.
        mapping_type = type("SharedMemoryMapping", (c_uint8 * self._size,), {})
        self._mapping = mapping_type.from_address(self._data)
        self._mapping._kvtier_owner = self._owner  # type: ignore[attr-defined]

    @staticmethod
    def create(path: str, name: str, slots: int, slot_bytes: int) -> "SharedMemoryPool":
        return SharedMemoryPool(path, name, slots, slot_bytes)

    def view(self) -> memoryview:
        """The whole mapping as a writable 1-D memoryview of bytes (keeps the pool alive)."""
        return memoryview(self._mapping).cast("B")

    def array(self) -> Any:
        """The whole mapping as a writable 1-D NumPy uint8 array (slots x slot_bytes);
        reshape((slots, slot_bytes)) gives one row per page. Needs NumPy."""
        import numpy as np
        return np.frombuffer(self._mapping, dtype=np.uint8)

    def slot(self, index: int) -> Any:
        """Slot `index` as a writable NumPy uint8 array of slot_bytes."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._slots:
            raise IndexError(f"slot {index} out of range ({self._slots} slots)")
        return self.array()[index * self._slot_bytes:(index + 1) * self._slot_bytes]

    def registration(self) -> PoolRegistration:
        return PoolRegistration(self._name, self._slots, "shared_memory", path=self._path,
                                size_bytes=self._size, owner=self)

    @property
    def path(self) -> str:
        return self._path

    @property
    def name(self) -> str:
        return self._name

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_bytes(self) -> int:
        return self._slot_bytes

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def data_ptr(self) -> int:
        return self._data

    def __repr__(self) -> str:
        return (f"SharedMemoryPool(path={self._path!r}, slots={self._slots}, "
                f"slot_bytes={self._slot_bytes})")


def create_shared_memory_pools(layout: PageLayout, dir: str, prefix: str,
                               slots: int) -> List[SharedMemoryPool]:
    """One SharedMemoryPool per pool of `layout`, each '<dir>/<prefix>.<pool name>'."""
    return [SharedMemoryPool(f"{dir}/{prefix}.{p.name}", p.name, slots, p.slot_bytes)
            for p in layout.pools]


class DevicePool:
    """A GPU pool allocated and exported by libkvtier (CUDA builds only); freed when
    garbage-collected."""

    def __init__(self, handle: int, name: str, device: int, slots: int, slot_bytes: int) -> None:
        self._handle: Optional[int] = handle
        self._name = name
        self._device = device
        self._slots = slots
        self._slot_bytes = slot_bytes
        data, size = c_void_p(None), c_uint64(0)
        self._cuda = _capi.CudaIpcPool()
        err = _capi.Error()
        check(lib.kvtier_device_pool_info(handle, byref(data), byref(size), byref(self._cuda),
                                          byref(err)), err)
        self._data: int = data.value or 0
        self._size = size.value

    @staticmethod
    def create(device: int, name: str, slots: int, slot_bytes: int) -> "DevicePool":
        """kvtier.Error UNIMPLEMENTED without CUDA, UNAVAILABLE without the device."""
        out = c_void_p(None)
        err = _capi.Error()
        device = _args.integer(device, "device", 0, 2**31 - 1)
        slots = _args.u32(slots, "slots")
        slot_bytes = _args.u64(slot_bytes, "slot_bytes")
        check(lib.kvtier_device_pool_create(device, _args.text_arg(name, "name").encode(), slots,
                                            slot_bytes, byref(out), byref(err)), err)
        return DevicePool(out.value, name, device, slots, slot_bytes)  # type: ignore[arg-type]

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            lib.kvtier_device_pool_destroy(handle)

    @property
    def data_ptr(self) -> int:
        return self._data

    @property
    def device(self) -> int:
        return self._device

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_bytes(self) -> int:
        return self._slot_bytes

    @property
    def size_bytes(self) -> int:
        return self._size

    def registration(self) -> PoolRegistration:
        return PoolRegistration(self._name, self._slots, "cuda_ipc",
                                offset_bytes=int(self._cuda.base_offset_bytes),
                                size_bytes=int(self._cuda.size_bytes), cuda=self._cuda,
                                owner=self)

    def __repr__(self) -> str:
        return (f"DevicePool(device={self._device}, slots={self._slots}, "
                f"slot_bytes={self._slot_bytes})")


def to_registration(pool: Any) -> PoolRegistration:
    """A SharedMemoryPool, DevicePool or PoolRegistration as a PoolRegistration."""
    if isinstance(pool, PoolRegistration):
        return pool
    if isinstance(pool, (SharedMemoryPool, DevicePool)):
        return pool.registration()
    raise TypeError("a pool must be a SharedMemoryPool, DevicePool or PoolRegistration, got "
                    f"{type(pool).__name__}")


# ---- DLPack (dlpack.h, ABI-stable since v0.2): what a "dltensor" capsule points to ----------

DL_CUDA = 2


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int32),
                ("dtype", _DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class _DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = c_void_p
_capsule_pointer.argtypes = [py_object, c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [py_object, c_char_p]


class DlpackRange:
    """The device and the byte range of a C-contiguous array exported through __dlpack__."""

    def __init__(self, device_type: int, device_id: int, pointer: int, nbytes: int) -> None:
        self.device_type = device_type
        self.device_id = device_id
        self.pointer = pointer
        self.bytes = nbytes


def read_dlpack(array: Any) -> DlpackRange:
    """Reads the device, address and size of `array` through its __dlpack__ capsule without
    consuming it (the capsule's destructor releases the export); the caller keeps the array
    alive. ValueError for an object without __dlpack__ or a non-contiguous array."""
    if not hasattr(array, "__dlpack__"):
        raise ValueError("the array has no __dlpack__ (torch.Tensor, cupy.ndarray and numpy "
                         "arrays have it)")
    capsule = array.__dlpack__()
    if not _capsule_valid(capsule, b"dltensor"):
        raise ValueError("__dlpack__ did not return a 'dltensor' capsule")
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    elements = 1
    expected = 1
    for i in reversed(range(t.ndim)):
        dim = t.shape[i]
        if t.strides and dim != 1 and t.strides[i] != expected:
            raise ValueError(f"the array is not C-contiguous (dimension {i} has stride "
                             f"{t.strides[i]}, expected {expected})")
        expected *= dim
        elements *= dim
    item = (t.dtype.bits * t.dtype.lanes + 7) // 8
    result = DlpackRange(t.device.device_type, t.device.device_id,
                         (t.data or 0) + t.byte_offset, elements * item)
    del capsule  # releases the export
    return result
