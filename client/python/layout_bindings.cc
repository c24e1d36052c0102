// kvtier (Python): page layouts, block hashes, the pools an engine registers (shared-memory files
// viewed as numpy arrays, CUDA IPC registrations) and the compression configuration. Layouts and
// registrations are values; a SharedMemoryPool owns its mapping, and every numpy view of it keeps
// the pool alive (the view's base is the pool).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/python/bindings.h"
#include "codec/dtype.h"
#include "kvtier/block_hasher.h"
#include "kvtier/compression.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"

namespace py = pybind11;

namespace kvtier::python {
namespace {

using TokenArray = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>;

// A kvtier.DType or its name ("bf16", "fp16", "fp8_e4m3", "fp32", "bytes").
DType ToDType(const py::object& dtype) {
  if (py::isinstance<py::str>(dtype)) {
    const std::string name = dtype.cast<std::string>();
    return static_cast<DType>(ValueOrThrow(codec::ParseDType(absl::string_view(name))));
  }
  return static_cast<DType>(dtype.cast<codec::DType>());
}

std::vector<std::string> ExtraKeys(const std::vector<py::bytes>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const py::bytes& k : keys) out.push_back(std::string(k));
  return out;
}

py::list BytesList(const std::vector<std::string>& values) {
  py::list out;
  for (const std::string& v : values) out.append(py::bytes(v));
  return out;
}

std::string LayoutRepr(const PageLayout& l) {
  return absl::StrCat("PageLayout(tokens_per_page=", l.tokens_per_page(),
                      ", pools=", l.pools().size(), ", buffers=", l.buffers().size(),
                      ", hot_page_bytes=", l.hot_page_bytes(), ")");
}

py::array ByteView(py::handle owner, uint8_t* data, uint64_t bytes) {
  return py::array(py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(bytes)}, {1}, data, owner);
}

void BindLayout(py::module_& m) {
  py::class_<PoolInfo>(m, "PoolInfo", "One pool of a layout: `slot_bytes` per page.")
      .def_readonly("name", &PoolInfo::name)
      .def_readonly("slot_bytes", &PoolInfo::slot_bytes)
      .def("__repr__", [](const PoolInfo& p) {
        return absl::StrCat("PoolInfo(name='", p.name, "', slot_bytes=", p.slot_bytes, ")");
      });
  py::class_<BufferInfo>(m, "BufferInfo", "One buffer of a layout (codec/FORMAT.md).")
      .def_readonly("name", &BufferInfo::name)
      .def_readonly("role", &BufferInfo::role)
      .def_readonly("layer", &BufferInfo::layer)
      .def_property_readonly("dtype",
                             [](const BufferInfo& b) { return static_cast<codec::DType>(b.dtype); })
      .def_readonly("heads", &BufferInfo::heads)
      .def_readonly("tokens", &BufferInfo::tokens)
      .def_readonly("head_dim", &BufferInfo::head_dim)
      .def_readonly("row_stride", &BufferInfo::row_stride)
      .def_readonly("pool", &BufferInfo::pool)
      .def_readonly("offset_bytes", &BufferInfo::offset_bytes)
      .def_readonly("data_bytes", &BufferInfo::data_bytes)
      .def("__repr__", [](const BufferInfo& b) {
        return absl::StrCat("BufferInfo(name='", b.name, "', role='", b.role, "', pool=", b.pool,
                            ", offset_bytes=", b.offset_bytes, ", data_bytes=", b.data_bytes, ")");
      });

  py::class_<PageLayout>(
      m, "PageLayout",
      "How one page of an engine's KV cache lies in its pools (an immutable value). Build one "
      "with gqa(), mla(), hybrid(), preset() or from_json(). dtype arguments take a kvtier.DType "
      "or its name.")
      .def_static(
          "gqa",
          [](uint32_t num_layers, uint32_t kv_heads, uint32_t head_dim, uint32_t tokens_per_page,
             const py::object& dtype, uint32_t rope_start, uint32_t rope_len) {
            GqaLayoutOptions o;
            o.num_layers = num_layers;
            o.kv_heads = kv_heads;
            o.head_dim = head_dim;
            o.tokens_per_page = tokens_per_page;
            o.dtype = ToDType(dtype);
            o.rope_start = rope_start;
            o.rope_len = rope_len;
            return ValueOrThrow(PageLayout::Gqa(o));
          },
          py::arg("num_layers"), py::arg("kv_heads"), py::arg("head_dim"),
          py::arg("tokens_per_page"), py::arg("dtype") = "bf16", py::arg("rope_start") = 0,
          py::arg("rope_len") = 0,
          "Grouped-query attention: per layer a K and a V buffer in one pool 'kv'; rope_len 0 "
          "means RoPE over the whole K row.")
      .def_static(
          "mla",
          [](uint32_t num_layers, uint32_t tokens_per_page, uint32_t kv_lora_rank,
             uint32_t rope_dim, const py::object& dtype, uint32_t indexer_bytes_per_token) {
            MlaLayoutOptions o;
            o.num_layers = num_layers;
            o.tokens_per_page = tokens_per_page;
            o.kv_lora_rank = kv_lora_rank;
            o.rope_dim = rope_dim;
            o.dtype = ToDType(dtype);
            o.indexer_bytes_per_token = indexer_bytes_per_token;
            return ValueOrThrow(PageLayout::Mla(o));
          },
          py::arg("num_layers"), py::arg("tokens_per_page"), py::arg("kv_lora_rank") = 512,
          py::arg("rope_dim") = 64, py::arg("dtype") = "bf16",
          py::arg("indexer_bytes_per_token") = 0, "Multi-head latent attention.")
      .def_static(
          "hybrid",
          [](uint32_t num_layers, std::vector<uint32_t> attention_layers, uint32_t kv_heads,
             uint32_t head_dim, uint32_t tokens_per_page, uint32_t state_bytes,
             const py::object& dtype, uint32_t rope_start, uint32_t rope_len) {
            HybridLayoutOptions o;
            o.num_layers = num_layers;
            o.attention_layers = std::move(attention_layers);
            o.kv_heads = kv_heads;
            o.head_dim = head_dim;
            o.tokens_per_page = tokens_per_page;
            o.state_bytes = state_bytes;
            o.dtype = ToDType(dtype);
            o.rope_start = rope_start;
            o.rope_len = rope_len;
            return ValueOrThrow(PageLayout::Hybrid(o));
          },
          py::arg("num_layers"), py::arg("attention_layers"), py::arg("kv_heads"),
          py::arg("head_dim"), py::arg("tokens_per_page"), py::arg("state_bytes"),
          py::arg("dtype") = "bf16", py::arg("rope_start") = 0, py::arg("rope_len") = 0,
          "Attention layers (K and V) and state layers kept losslessly.")
      .def_static(
          "preset",
          [](const std::string& name, uint32_t tokens_per_page, const py::object& dtype) {
            return ValueOrThrow(PageLayout::Preset(name, tokens_per_page, ToDType(dtype)));
          },
          py::arg("name"), py::arg("tokens_per_page"), py::arg("dtype") = "bf16",
          "A well-known model (see preset_names()); kvtier.NotFoundError lists them.")
      .def_static("preset_names", &PageLayout::PresetNames)
      .def_static(
          "from_json",
          [](const std::string& json) { return ValueOrThrow(PageLayout::FromJson(json)); },
          py::arg("json"), "The JSON form of `kvtier-codec layout`.")
      .def("to_json", &PageLayout::ToJson)
      .def_property_readonly("tokens_per_page", &PageLayout::tokens_per_page)
      .def_property_readonly("pools", &PageLayout::pools)
      .def_property_readonly("buffers", &PageLayout::buffers)
      .def_property_readonly("hot_page_bytes", &PageLayout::hot_page_bytes,
                             "Sum of the buffers' data bytes: what an offload reads per page.")
      .def_property_readonly("fingerprint", &PageLayout::fingerprint)
      .def_property_readonly("has_mla", &PageLayout::has_mla)
      .def("__repr__", &LayoutRepr);
}

void BindHasher(py::module_& m) {
  m.attr("BLOCK_HASH_BYTES") = kBlockHashBytes;
  py::class_<BlockHasher>(
      m, "BlockHasher",
      "Block hashes of token sequences, chained from an engine's hash_root: h_i = "
      "SHA-256(h_{i-1} || tokens of page i as little-endian u32 || extra key). Only full pages "
      "are hashed. Tokens: a list of int or a numpy array (converted to uint32).")
      .def(py::init([](const py::bytes& root, uint32_t tokens_per_page) {
             return ValueOrThrow(BlockHasher::Create(std::string(root), tokens_per_page));
           }),
           py::arg("root"), py::arg("tokens_per_page"))
      .def(
          "hash",
          [](const BlockHasher& h, const TokenArray& tokens,
             const std::vector<py::bytes>& extra_keys) {
            const std::vector<std::string> keys = ExtraKeys(extra_keys);
            absl::StatusOr<std::vector<std::string>> out;
            {
              py::gil_scoped_release release;
              out = h.Hash(std::span<const uint32_t>(tokens.data(), tokens.size()), keys);
            }
            return BytesList(ValueOrThrow(std::move(out)));
          },
          py::arg("tokens"), py::arg("extra_keys") = std::vector<py::bytes>(),
          "The hashes (32 bytes each) of the full pages of `tokens`; `extra_keys`, when given, "
          "has one key per page.")
      .def(
          "hash_after",
          [](const BlockHasher& h, const py::bytes& parent, const TokenArray& tokens,
             const std::vector<py::bytes>& extra_keys) {
            const std::vector<std::string> keys = ExtraKeys(extra_keys);
            const std::string p(parent);
            absl::StatusOr<std::vector<std::string>> out;
            {
              py::gil_scoped_release release;
              out = h.HashAfter(p, std::span<const uint32_t>(tokens.data(), tokens.size()), keys);
            }
            return BytesList(ValueOrThrow(std::move(out)));
          },
          py::arg("parent"), py::arg("tokens"), py::arg("extra_keys") = std::vector<py::bytes>(),
          "Continues a chain after `parent` (a previous page's hash).")
      .def_static(
          "next",
          [](const py::bytes& parent, const TokenArray& tokens, const py::bytes& extra_key) {
            return py::bytes(BlockHasher::Next(
                std::string(parent), std::span<const uint32_t>(tokens.data(), tokens.size()),
                std::string(extra_key)));
          },
          py::arg("parent"), py::arg("tokens"), py::arg("extra_key") = py::bytes(),
          "One link of the chain: the hash of the page `tokens` (any length) after `parent`.")
      .def_property_readonly("root", [](const BlockHasher& h) { return py::bytes(h.root()); })
      .def_property_readonly("tokens_per_page", &BlockHasher::tokens_per_page);
  m.def(
      "hex_hash", [](const py::bytes& hash) { return HexHash(std::string(hash)); }, py::arg("hash"),
      "Lower-case hex of a block hash.");
}

// DLPack's C structures (dlpack.h, ABI-stable since v0.2): what a "dltensor" capsule points to.
struct DlDevice {
  int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed, ...
  int32_t device_id;
};
struct DlDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DlTensor {
  void* data;
  DlDevice device;
  int32_t ndim;
  DlDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byte_offset;
};
struct DlManagedTensor {
  DlTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DlManagedTensor*);
};
constexpr int32_t kDlCuda = 2;

// The device and the byte range of a C-contiguous array exported through __dlpack__. The capsule
// is not consumed (its destructor releases the export); the caller keeps the array alive.
struct DlpackRange {
  int32_t device_type = 0;
  int32_t device_id = 0;
  uintptr_t pointer = 0;
  uint64_t bytes = 0;
};

DlpackRange ReadDlpack(const py::object& array) {
  if (!py::hasattr(array, "__dlpack__")) {
    throw py::value_error(
        "the array has no __dlpack__ (torch.Tensor, cupy.ndarray and numpy arrays have it)");
  }
  const py::object capsule = array.attr("__dlpack__")();
  auto* managed = static_cast<DlManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    throw py::value_error("__dlpack__ did not return a 'dltensor' capsule");
  }
  const DlTensor& t = managed->dl_tensor;
  uint64_t elements = 1;
  int64_t expected_stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.strides != nullptr && t.shape[i] != 1 && t.strides[i] != expected_stride) {
      throw py::value_error(absl::StrCat("the array is not C-contiguous (dimension ", i,
                                         " has stride ", t.strides[i], ", expected ",
                                         expected_stride, ")"));
    }
    expected_stride *= t.shape[i];
    elements *= static_cast<uint64_t>(t.shape[i]);
  }
  DlpackRange r;
  r.device_type = t.device.device_type;
  r.device_id = t.device.device_id;
  r.pointer = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  r.bytes = elements * ((uint64_t{t.dtype.bits} * t.dtype.lanes + 7) / 8);
  return r;
}

void BindPools(py::module_& m) {
  py::class_<PoolRegistration>(
      m, "PoolRegistration",
      "One pool as register_engine sends it: a shared-memory file or a CUDA IPC export.")
      .def_static(
          "shared_memory",
          [](std::string name, uint32_t slots, std::string path, std::string shm_name,
             uint64_t offset_bytes, uint64_t size_bytes) {
            PoolRegistration r;
            r.name = std::move(name);
            r.slots = slots;
            r.shared_memory.emplace();
            r.shared_memory->path = std::move(path);
            r.shared_memory->shm_name = std::move(shm_name);
            r.shared_memory->offset_bytes = offset_bytes;
            r.shared_memory->size_bytes = size_bytes;
            return r;
          },
          py::arg("name"), py::arg("slots"), py::kw_only(), py::arg("path") = "",
          py::arg("shm_name") = "", py::arg("offset_bytes") = 0, py::arg("size_bytes") = 0,
          "A file the engine mapped itself (`path`, or a POSIX `shm_name`); size_bytes 0 means "
          "slots x slot_bytes.")
      .def_static(
          "cuda",
          [](std::string name, uint32_t slots, int device, uintptr_t pointer, uint64_t size_bytes,
             uint64_t offset_bytes) {
            return ValueOrThrow(ExportCudaPool(std::move(name), slots, device,
                                               reinterpret_cast<void*>(pointer), offset_bytes,
                                               size_bytes));
          },
          py::arg("name"), py::arg("slots"), py::arg("device"), py::arg("pointer"),
          py::arg("size_bytes"), py::arg("offset_bytes") = 0,
          "Exports `size_bytes` of device memory starting `offset_bytes` after the device "
          "address `pointer` (e.g. torch's t.data_ptr(); it may lie inside a larger "
          "allocation). kvtier.Error UNIMPLEMENTED in builds without CUDA.")
      .def_static(
          "from_dlpack",
          [](std::string name, uint32_t slots, const py::object& array) {
            const DlpackRange r = ReadDlpack(array);
            if (r.device_type != kDlCuda) {
              throw py::value_error(absl::StrCat(
                  "pool '", name, "': a DLPack array on device type ", r.device_type,
                  " (not CUDA) cannot be shared with kvtierd; for a host pool create a "
                  "kvtier.SharedMemoryPool and use its array()"));
            }
            return ValueOrThrow(ExportCudaPool(std::move(name), slots, r.device_id,
                                               reinterpret_cast<void*>(r.pointer), 0, r.bytes));
          },
          py::arg("name"), py::arg("slots"), py::arg("array"),
          "Exports a C-contiguous CUDA array (torch.Tensor, cupy.ndarray: anything with "
          "__dlpack__) as the pool `name` (the registration names its cudaMalloc allocation and "
          "the array's offset in it); the array's bytes "
          "must hold `slots` pages. ValueError for host or non-contiguous arrays; kvtier.Error "
          "UNIMPLEMENTED in builds without CUDA.")
      .def_readonly("name", &PoolRegistration::name)
      .def_readonly("slots", &PoolRegistration::slots)
      .def_property_readonly("kind",
                             [](const PoolRegistration& r) -> std::string {
                               if (r.shared_memory) return "shared_memory";
                               if (r.cuda_ipc) return "cuda_ipc";
                               return "none";
                             })
      .def_property_readonly("path",
                             [](const PoolRegistration& r) {
                               return r.shared_memory ? r.shared_memory->path : std::string();
                             })
      .def_property_readonly("shm_name",
                             [](const PoolRegistration& r) {
                               return r.shared_memory ? r.shared_memory->shm_name : std::string();
                             })
      .def_property_readonly("size_bytes",
                             [](const PoolRegistration& r) -> uint64_t {
                               if (r.shared_memory) return r.shared_memory->size_bytes;
                               if (r.cuda_ipc) return r.cuda_ipc->size_bytes;
                               return 0;
                             })
      .def_property_readonly("offset_bytes",
                             [](const PoolRegistration& r) -> uint64_t {
                               if (r.shared_memory) return r.shared_memory->offset_bytes;
                               if (r.cuda_ipc) return r.cuda_ipc->base_offset_bytes;
                               return 0;
                             })
      .def_property_readonly("device_ordinal",
                             [](const PoolRegistration& r) -> py::object {
                               if (!r.cuda_ipc) return py::none();
                               return py::int_(r.cuda_ipc->device_ordinal);
                             })
      .def("__repr__", [](const PoolRegistration& r) {
        return absl::StrCat("PoolRegistration(name='", r.name, "', slots=", r.slots, ", ",
                            r.shared_memory ? absl::StrCat("path='", r.shared_memory->path, "'")
                                            : std::string("cuda_ipc"),
                            ")");
      });

  py::class_<SharedMemoryPool>(
      m, "SharedMemoryPool",
      "A host pool in a shared-memory file (under the daemon's pools.allowed_dirs), mapped "
      "read-write; the file is removed when the pool is garbage-collected. array() and slot() "
      "are writable numpy views sharing the mapping; each keeps the pool alive.")
      .def(
          py::init([](const std::string& path, std::string name, uint32_t slots,
                      uint64_t slot_bytes) {
            return ValueOrThrow(SharedMemoryPool::Create(path, std::move(name), slots, slot_bytes));
          }),
          py::arg("path"), py::arg("name"), py::arg("slots"), py::arg("slot_bytes"))
      .def_static(
          "create",
          [](const std::string& path, std::string name, uint32_t slots, uint64_t slot_bytes) {
            return ValueOrThrow(SharedMemoryPool::Create(path, std::move(name), slots, slot_bytes));
          },
          py::arg("path"), py::arg("name"), py::arg("slots"), py::arg("slot_bytes"))
      .def(
          "array",
          [](py::object self) {
            SharedMemoryPool& p = self.cast<SharedMemoryPool&>();
            return ByteView(self, p.data(), p.size_bytes());
          },
          "The whole mapping as a writable 1-D numpy uint8 array (slots x slot_bytes); "
          "reshape((slots, slot_bytes)) gives one row per page.")
      .def(
          "slot",
          [](py::object self, uint32_t index) {
            SharedMemoryPool& p = self.cast<SharedMemoryPool&>();
            if (index >= p.slots()) {
              throw py::index_error(
                  absl::StrCat("slot ", index, " out of range (", p.slots(), " slots)"));
            }
            return ByteView(self, p.slot(index), p.slot_bytes());
          },
          py::arg("index"), "Slot `index` as a writable numpy uint8 array of slot_bytes.")
      .def("registration", &SharedMemoryPool::Registration)
      .def_property_readonly("path", &SharedMemoryPool::path)
      .def_property_readonly("slots", &SharedMemoryPool::slots)
      .def_property_readonly("slot_bytes", &SharedMemoryPool::slot_bytes)
      .def_property_readonly("size_bytes", &SharedMemoryPool::size_bytes)
      .def_property_readonly(
          "data_ptr",
          [](const SharedMemoryPool& p) { return reinterpret_cast<uintptr_t>(p.data()); })
      .def("__repr__", [](const SharedMemoryPool& p) {
        return absl::StrCat("SharedMemoryPool(path='", p.path(), "', slots=", p.slots(),
                            ", slot_bytes=", p.slot_bytes(), ")");
      });
  m.def(
      "create_shared_memory_pools",
      [](const PageLayout& layout, const std::string& dir, const std::string& prefix,
         uint32_t slots) {
        return ValueOrThrow(CreateSharedMemoryPools(layout, dir, prefix, slots));
      },
      py::arg("layout"), py::arg("dir"), py::arg("prefix"), py::arg("slots"),
      "One SharedMemoryPool per pool of `layout`, each '<dir>/<prefix>.<pool name>'.");

  py::class_<DevicePool>(m, "DevicePool",
                         "A GPU pool allocated and exported by libkvtier (CUDA builds only).")
      .def_static(
          "create",
          [](int device, std::string name, uint32_t slots, uint64_t slot_bytes) {
            return ValueOrThrow(DevicePool::Create(device, std::move(name), slots, slot_bytes));
          },
          py::arg("device"), py::arg("name"), py::arg("slots"), py::arg("slot_bytes"),
          "kvtier.Error UNIMPLEMENTED without CUDA, UNAVAILABLE without the device.")
      .def_property_readonly(
          "data_ptr", [](const DevicePool& p) { return reinterpret_cast<uintptr_t>(p.data()); })
      .def_property_readonly("device", &DevicePool::device)
      .def_property_readonly("slots", &DevicePool::slots)
      .def_property_readonly("slot_bytes", &DevicePool::slot_bytes)
      .def_property_readonly("size_bytes", &DevicePool::size_bytes)
      .def("registration", &DevicePool::Registration);
  m.def("cuda_available", &CudaAvailable,
        "True when libkvtier was built with CUDA and sees a device.");
}

void BindCompression(py::module_& m) {
  py::class_<CompressionConfig>(
      m, "CompressionConfig",
      "One compression method's settings (kvtier/compression.h); `options` holds every key of "
      "the block as text.")
      .def(py::init<>())
      .def_readwrite("algorithm", &CompressionConfig::algorithm)
      .def_readwrite("budget", &CompressionConfig::budget)
      .def_readwrite("beta", &CompressionConfig::beta)
      .def_readwrite("eviction_mode", &CompressionConfig::eviction_mode)
      .def_readwrite("calibration_path", &CompressionConfig::calibration_path)
      .def_readwrite("model_config_path", &CompressionConfig::model_config_path)
      .def_readwrite("quant", &CompressionConfig::quant)
      .def_readwrite("rope_precision", &CompressionConfig::rope_precision)
      .def_readwrite("daemon_socket", &CompressionConfig::daemon_socket)
      .def_readwrite("durable", &CompressionConfig::durable)
      .def_readwrite("options", &CompressionConfig::options)
      .def("__repr__", [](const CompressionConfig& c) {
        return absl::StrCat("CompressionConfig(algorithm='", c.algorithm, "', ", c.options.size(),
                            " options)");
      });
  m.def(
      "parse_compression_config",
      [](const std::string& text) { return ValueOrThrow(ParseCompressionConfig(text)); },
      py::arg("text"),
      "Parses one configuration block (YAML or JSON); InvalidRequestError names the key.");
  m.def(
      "load_compression_config",
      [](const std::string& path) { return ValueOrThrow(LoadCompressionConfig(path)); },
      py::arg("path"));
  m.def("compression_method_names", &CompressionMethodNames,
        "The registered compression methods, sorted.");
}

}  // namespace

void BindLayoutAndPools(py::module_& m) {
  BindLayout(m);
  BindHasher(m);
  BindPools(m);
  BindCompression(m);
}

}  // namespace kvtier::python
