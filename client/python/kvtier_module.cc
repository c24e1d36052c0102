// kvtier: the Python module (pybind11). This file defines the module and its TriAttention Evictor
// binding (triattention/evictor.h): the configuration, a paged KV cache view built from raw
// integer addresses (numpy `arr.ctypes.data`, torch `t.data_ptr()`), and the per-step eviction
// loop. The client library's bindings (layouts, hashes, pools, Client) live in layout_bindings.cc
// and client_bindings.cc; errors are converted as bindings.h describes (kvtier.Error and its
// subclasses, which are also ValueError / KeyError where the Evictor raised those).
// Views only borrow memory: the caller keeps the arrays (or tensors) alive and unmoved while a
// view, or an Evictor made from it, is used.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/python/bindings.h"
#include "codec/dtype.h"
#include "triattention/calibration.h"
#include "triattention/compaction.h"
#include "triattention/evictor.h"
#include "triattention/kv_view.h"
#include "triattention/schedule.h"
#include "triattention/scoring.h"

namespace py = pybind11;

namespace kvtier::python {
namespace {

using triattention::Calibration;
using triattention::CompactionOrder;
using triattention::EvictionMode;
using triattention::Evictor;
using triattention::EvictorConfig;
using triattention::KvCacheView;
using triattention::KvLayerPools;
using triattention::KvLayout;
using triattention::KvMemory;
using triattention::KvPoolKind;
using triattention::RequestRoundState;
using triattention::StepOutcome;

// One request of a step as Python builds it; the block table is owned here, so the
// KvRequestView handed to the Evictor borrows memory that lives through the call.
struct PyStepRequest {
  uint64_t id = 0;
  int64_t new_tokens = 1;
  std::vector<int32_t> block_table;
  int64_t length = 0;
  int64_t prompt_len = 0;
  int64_t protected_tail = 0;
};

// A StepRequest, or a dict with the same keys (new_tokens and protected_tail optional).
PyStepRequest ToStepRequest(py::handle item) {
  if (py::isinstance<PyStepRequest>(item)) return item.cast<PyStepRequest>();
  if (!py::isinstance<py::dict>(item)) {
    throw py::type_error("a step request must be a StepRequest or a dict");
  }
  const py::dict d = py::reinterpret_borrow<py::dict>(item);
  auto required = [&d](const char* key) -> py::object {
    if (!d.contains(key)) throw py::key_error(absl::StrCat("step request dict has no '", key, "'"));
    return d[key];
  };
  PyStepRequest r;
  r.id = required("id").cast<uint64_t>();
  r.new_tokens = d.contains("new_tokens") ? d["new_tokens"].cast<int64_t>() : 1;
  r.block_table = required("block_table").cast<std::vector<int32_t>>();
  r.length = required("length").cast<int64_t>();
  r.prompt_len = required("prompt_len").cast<int64_t>();
  r.protected_tail = d.contains("protected_tail") ? d["protected_tail"].cast<int64_t>() : 0;
  return r;
}

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::vector<float> ToVector(const FloatArray& a) {
  return std::vector<float>(a.data(), a.data() + a.size());
}

std::string ConfigRepr(const EvictorConfig& c) {
  return absl::StrCat(
      "EvictorConfig(budget=", c.budget, ", beta=", c.beta,
      ", mode=", triattention::EvictionModeName(c.mode),
      ", normalize=", c.normalize ? "True" : "False",
      ", order=", c.order == CompactionOrder::kFillHoles ? "fill_holes" : "preserve_order",
      ", num_offsets=", c.num_offsets, ", device=", c.device, ", max_batch=", c.max_batch,
      ", max_decode_tokens=", c.max_decode_tokens, ")");
}

}  // namespace
}  // namespace kvtier::python

PYBIND11_MODULE(kvtier, m) {
  using namespace kvtier::python;  // NOLINT(build/namespaces)
  namespace codec = kvtier::codec;
  RegisterErrors(m);
  m.doc() =
      "kvtier: the client library of kvtierd (Client, PageLayout, BlockHasher, SharedMemoryPool, "
      "the compression configuration) and the TriAttention Evictor (KV-cache eviction by "
      "trigonometric scoring).\n\n"
      "Views only borrow memory: keep the arrays / tensors whose addresses a KvCacheView holds "
      "alive and unmoved while the view, or an Evictor made from it, is used.";

  py::enum_<EvictionMode>(m, "EvictionMode")
      .value("union", EvictionMode::kUnion)
      .value("per_head", EvictionMode::kPerHead)
      .value("per_layer_perhead", EvictionMode::kPerLayerPerHead);
  py::enum_<CompactionOrder>(m, "CompactionOrder")
      .value("fill_holes", CompactionOrder::kFillHoles)
      .value("preserve_order", CompactionOrder::kPreserveOrder);
  py::enum_<KvLayout>(m, "KvLayout").value("hnd", KvLayout::kHnd).value("nhd", KvLayout::kNhd);
  py::enum_<KvPoolKind>(m, "KvPoolKind")
      .value("separate", KvPoolKind::kSeparate)
      .value("combined", KvPoolKind::kCombined);
  py::enum_<KvMemory>(m, "KvMemory")
      .value("host", KvMemory::kHost)
      .value("device", KvMemory::kDevice);
  py::enum_<codec::DType>(m, "DType")
      .value("bf16", codec::DType::kBf16)
      .value("fp16", codec::DType::kFp16)
      .value("fp8_e4m3", codec::DType::kFp8E4M3)
      .value("fp32", codec::DType::kFp32)
      .value("bytes", codec::DType::kBytes);

  const EvictorConfig defaults;
  py::class_<EvictorConfig>(m, "EvictorConfig", "Evictor settings (triattention/evictor.h).")
      .def(py::init([](int64_t budget, int64_t beta, EvictionMode mode, bool normalize,
                       CompactionOrder order, int num_offsets, int device, int max_batch,
                       int64_t max_decode_tokens) {
             EvictorConfig c;
             c.budget = budget;
             c.beta = beta;
             c.mode = mode;
             c.normalize = normalize;
             c.order = order;
             c.num_offsets = num_offsets;
             c.device = device;
             c.max_batch = max_batch;
             c.max_decode_tokens = max_decode_tokens;
             return c;
           }),
           py::kw_only(), py::arg("budget") = defaults.budget, py::arg("beta") = defaults.beta,
           py::arg("mode") = defaults.mode, py::arg("normalize") = defaults.normalize,
           py::arg("order") = defaults.order, py::arg("num_offsets") = defaults.num_offsets,
           py::arg("device") = defaults.device, py::arg("max_batch") = defaults.max_batch,
           py::arg("max_decode_tokens") = defaults.max_decode_tokens)
      .def_readwrite("budget", &EvictorConfig::budget)
      .def_readwrite("beta", &EvictorConfig::beta)
      .def_readwrite("mode", &EvictorConfig::mode)
      .def_readwrite("normalize", &EvictorConfig::normalize)
      .def_readwrite("order", &EvictorConfig::order)
      .def_readwrite("num_offsets", &EvictorConfig::num_offsets)
      .def_readwrite("device", &EvictorConfig::device)
      .def_readwrite("max_batch", &EvictorConfig::max_batch)
      .def_readwrite("max_decode_tokens", &EvictorConfig::max_decode_tokens)
      .def("__repr__", &ConfigRepr);

  py::class_<KvCacheView>(
      m, "KvCacheView",
      "An engine's paged KV cache, by raw addresses: `layers` is a list of (k_ptr, v_ptr) "
      "integer addresses, one pair per attention layer (v_ptr 0 for a combined pool). Pass "
      "numpy arrays' `arr.ctypes.data` or torch tensors' `t.data_ptr()`.\n\n"
      "The view only BORROWS that memory: the caller must keep the arrays / tensors alive and "
      "unmoved while this view, or an Evictor made from it, is used.")
      .def(py::init([](const std::vector<std::pair<uint64_t, uint64_t>>& layers, int64_t num_pages,
                       int page_tokens, int num_kv_heads, int head_dim, codec::DType dtype,
                       KvLayout layout, KvPoolKind pool_kind, KvMemory memory) {
             KvCacheView v;
             for (const auto& [k, val] : layers) {
               v.layers.push_back(KvLayerPools{.k = reinterpret_cast<void*>(k),
                                               .v = reinterpret_cast<void*>(val)});
             }
             v.num_pages = num_pages;
             v.page_tokens = page_tokens;
             v.num_kv_heads = num_kv_heads;
             v.head_dim = head_dim;
             v.dtype = dtype;
             v.layout = layout;
             v.pool_kind = pool_kind;
             v.memory = memory;
             return v;
           }),
           py::arg("layers"), py::arg("num_pages"), py::arg("page_tokens"), py::arg("num_kv_heads"),
           py::arg("head_dim"), py::arg("dtype") = codec::DType::kBf16,
           py::arg("layout") = KvLayout::kHnd, py::arg("pool_kind") = KvPoolKind::kSeparate,
           py::arg("memory") = KvMemory::kHost)
      .def_property_readonly("layers",
                             [](const KvCacheView& v) {
                               py::list out;
                               for (const KvLayerPools& p : v.layers) {
                                 out.append(py::make_tuple(reinterpret_cast<uint64_t>(p.k),
                                                           reinterpret_cast<uint64_t>(p.v)));
                               }
                               return out;
                             })
      .def_readonly("num_pages", &KvCacheView::num_pages)
      .def_readonly("page_tokens", &KvCacheView::page_tokens)
      .def_readonly("num_kv_heads", &KvCacheView::num_kv_heads)
      .def_readonly("head_dim", &KvCacheView::head_dim)
      .def_readonly("dtype", &KvCacheView::dtype)
      .def_readonly("layout", &KvCacheView::layout)
      .def_readonly("pool_kind", &KvCacheView::pool_kind)
      .def_readonly("memory", &KvCacheView::memory)
      .def(
          "validate",
          [](const KvCacheView& v) { ThrowIfError(kvtier::triattention::ValidateKvCacheView(v)); },
          "Checks the geometry (ValueError naming the field otherwise).");

  py::class_<PyStepRequest>(m, "StepRequest",
                            "One request at the end of a generation step. The block table is "
                            "copied (a list of int or a numpy int32 array).")
      .def(py::init([](uint64_t id, int64_t new_tokens, std::vector<int32_t> block_table,
                       int64_t length, int64_t prompt_len, int64_t protected_tail) {
             return PyStepRequest{.id = id,
                                  .new_tokens = new_tokens,
                                  .block_table = std::move(block_table),
                                  .length = length,
                                  .prompt_len = prompt_len,
                                  .protected_tail = protected_tail};
           }),
           py::arg("id"), py::arg("new_tokens"), py::arg("block_table"), py::arg("length"),
           py::arg("prompt_len"), py::arg("protected_tail") = 0)
      .def_readwrite("id", &PyStepRequest::id)
      .def_readwrite("new_tokens", &PyStepRequest::new_tokens)
      .def_readwrite("block_table", &PyStepRequest::block_table)
      .def_readwrite("length", &PyStepRequest::length)
      .def_readwrite("prompt_len", &PyStepRequest::prompt_len)
      .def_readwrite("protected_tail", &PyStepRequest::protected_tail);

  py::class_<StepOutcome>(m, "StepOutcome")
      .def_readonly("id", &StepOutcome::id)
      .def_readonly("evicted", &StepOutcome::evicted)
      .def_readonly("new_length", &StepOutcome::new_length)
      .def_readonly("evicted_tokens", &StepOutcome::evicted_tokens)
      .def_property_readonly("freed_pages",
                             [](const StepOutcome& o) {
                               py::list out;
                               for (int32_t page : o.freed_pages) out.append(page);
                               return out;
                             })
      .def("__repr__", [](const StepOutcome& o) {
        return absl::StrCat("StepOutcome(id=", o.id, ", evicted=", o.evicted ? "True" : "False",
                            ", new_length=", o.new_length, ", evicted_tokens=", o.evicted_tokens,
                            ", freed_pages=", o.freed_pages.size(), " pages)");
      });

  py::class_<Evictor>(m, "Evictor",
                      "The TriAttention eviction loop over a paged KV cache. The cache memory "
                      "named by the view is borrowed: keep it alive while the Evictor is used.")
      .def_static(
          "create",
          [](const EvictorConfig& config, const std::string& calibration_path,
             const std::string& model_config_path, const KvCacheView& view) {
            absl::StatusOr<std::unique_ptr<Evictor>> evictor;
            {
              py::gil_scoped_release release;  // file I/O
              evictor = Evictor::CreateFromFiles(config, calibration_path, model_config_path, view);
            }
            return ValueOrThrow(std::move(evictor));
          },
          py::arg("config"), py::arg("calibration_path"), py::arg("model_config_path"),
          py::arg("view"),
          "An Evictor from a calibration file and the model's config.json (or model directory).")
      .def_static(
          "create_from_arrays",
          [](const EvictorConfig& config, const FloatArray& q_mean_real,
             const FloatArray& q_mean_imag, const FloatArray& q_abs_mean, const FloatArray& omega,
             const FloatArray& freq_scale_sq, int layers, int heads, const KvCacheView& view) {
            Calibration c;
            c.layers = layers;
            c.heads = heads;
            c.bands = static_cast<int>(omega.size());
            c.head_dim = 2 * c.bands;
            c.rope_style = "half";
            c.q_mean_real = ToVector(q_mean_real);
            c.q_mean_imag = ToVector(q_mean_imag);
            c.q_abs_mean = ToVector(q_abs_mean);
            c.present.assign(layers > 0 && heads > 0
                                 ? static_cast<size_t>(layers) * static_cast<size_t>(heads)
                                 : 0,
                             1);
            c.omega = ToVector(omega);
            c.freq_scale_sq = ToVector(freq_scale_sq);
            return ValueOrThrow(Evictor::Create(config, std::move(c), view));
          },
          py::arg("config"), py::arg("q_mean_real"), py::arg("q_mean_imag"), py::arg("q_abs_mean"),
          py::arg("omega"), py::arg("freq_scale_sq"), py::arg("layers"), py::arg("heads"),
          py::arg("view"),
          "An Evictor from an in-memory calibration: q_mean_real, q_mean_imag and q_abs_mean are "
          "float32 [layers][heads][bands] (flattened row-major; any shape of that size), omega "
          "and freq_scale_sq float32 [bands]; bands = len(omega), head_dim = 2 * bands.")
      .def(
          "add_request",
          [](Evictor& e, uint64_t id, int64_t prompt_len) {
            ThrowIfError(e.AddRequest(id, prompt_len));
          },
          py::arg("id"), py::arg("prompt_len"))
      .def(
          "remove_request", [](Evictor& e, uint64_t id) { ThrowIfError(e.RemoveRequest(id)); },
          py::arg("id"))
      .def(
          "on_generation_step_end",
          [](Evictor& e, const py::sequence& requests, uint64_t stream) {
            std::vector<PyStepRequest> owned;
            owned.reserve(requests.size());
            for (py::handle item : requests) owned.push_back(ToStepRequest(item));
            std::vector<kvtier::triattention::StepRequest> step(owned.size());
            for (size_t i = 0; i < owned.size(); ++i) {
              const PyStepRequest& r = owned[i];
              step[i].id = r.id;
              step[i].new_tokens = r.new_tokens;
              step[i].kv.block_table = r.block_table;
              step[i].kv.length = r.length;
              step[i].kv.prompt_len = r.prompt_len;
              step[i].kv.protected_tail = r.protected_tail;
            }
            return ValueOrThrow(e.OnGenerationStepEnd(step, reinterpret_cast<void*>(stream)));
          },
          py::arg("requests"), py::arg("stream") = 0,
          "Ends a generation step for `requests` (StepRequest objects or dicts with the same "
          "keys); returns one StepOutcome per request, in input order. `stream` is a "
          "cudaStream_t address for a device view (ignored for a host view).")
      .def(
          "state",
          [](const Evictor& e, uint64_t id) {
            const RequestRoundState s = ValueOrThrow(e.State(id));
            py::dict d;
            d["prompt_len"] = s.prompt_len;
            d["confirmed_length"] = s.confirmed_length;
            d["generation_steps"] = s.generation_steps;
            d["last_boundary"] = s.last_boundary;
            d["evicted_tokens"] = s.evicted_tokens;
            d["logical_length"] = s.LogicalLength();
            return d;
          },
          py::arg("id"))
      .def_property_readonly("on_gpu", &Evictor::on_gpu)
      .def_property_readonly("num_requests", &Evictor::num_requests)
      .def_property_readonly("config", [](const Evictor& e) { return e.config(); });

  BindLayoutAndPools(m);
  BindClient(m);
}
