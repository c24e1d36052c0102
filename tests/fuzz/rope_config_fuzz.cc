// libFuzzer target for RopeTablesFromConfigJson (triattention/rope.h): a model's config.json is
// input from outside the process. Nothing may crash, hit undefined behaviour or allocate without
// bound; a failure must be InvalidArgument, and a success must keep the promises of rope.h: a
// rotary dim that is even and within head_dim, one finite positive frequency per rotary pair, a
// finite positive attention factor, KV heads dividing query heads, and counts within
// kMaxConfigCount. Seeds: the config.json texts of tests/unit/triattention/rope_test.cc (any
// Hugging Face config.json works too). Built by tests/fuzz/CMakeLists.txt; single-threaded.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "triattention/rope.h"

namespace kvtier::triattention {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "rope_config_fuzz: %s\n", what);
  std::abort();
}

void CheckTables(const RopeTables& t) {
  if (t.head_dim < 2 || t.head_dim > kMaxRopeHeadDim || t.head_dim % 2 != 0) Fail("head_dim");
  if (t.rotary_dim < 2 || t.rotary_dim > t.head_dim || t.rotary_dim % 2 != 0) Fail("rotary_dim");
  if (static_cast<int>(t.inv_freq.size()) != t.rotary_dim / 2) Fail("inv_freq size");
  for (double w : t.inv_freq) {
    if (!std::isfinite(w) || w <= 0.0) Fail("inv_freq value");
  }
  if (!std::isfinite(t.attention_factor) || t.attention_factor <= 0.0) Fail("attention_factor");
  if (t.num_layers < 1 || t.num_layers > kMaxConfigCount) Fail("num_layers");
  if (t.num_attention_heads < 1 || t.num_attention_heads > kMaxConfigCount) Fail("heads");
  if (t.num_kv_heads < 1 || t.num_attention_heads % t.num_kv_heads != 0) Fail("kv heads");
  if (t.rope_type != "default" && t.rope_type != "linear" && t.rope_type != "dynamic" &&
      t.rope_type != "llama3" && t.rope_type != "yarn") {
    Fail("rope_type");
  }
}

}  // namespace
}  // namespace kvtier::triattention

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::triattention;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<RopeTables> tables = RopeTablesFromConfigJson(text);
  if (tables.ok()) {
    CheckTables(*tables);
  } else if (tables.status().code() != absl::StatusCode::kInvalidArgument) {
    Fail("an error other than InvalidArgument");
  }
  return 0;
}
