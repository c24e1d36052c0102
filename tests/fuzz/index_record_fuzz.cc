// libFuzzer target for the index encodings (daemon/index/block_record.h): arbitrary bytes go to
// DecodeBlockKey, DecodeBlockRecord and DecodeNamespaceId. Nothing may crash, read out of bounds or
// hit undefined behaviour; a decoder that fails must say DataLoss, and one that succeeds must have
// read a canonical encoding: encoding the decoded value gives back the input, byte for byte.
// Built by tests/fuzz/CMakeLists.txt (KVTIER_BUILD_FUZZERS=ON, clang). Single-threaded.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/index/block_record.h"

namespace kvtier::index {
namespace {

[[noreturn]] void Fail(const char* what, absl::string_view detail) {
  std::fprintf(stderr, "index_record_fuzz: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

// Checks a decoder's result for `input`: DataLoss, or a value that encodes back to `input`.
template <typename T, typename Encode>
void CheckDecoded(const char* name, const absl::StatusOr<T>& decoded, absl::string_view input,
                  Encode encode) {
  if (!decoded.ok()) {
    if (decoded.status().code() != absl::StatusCode::kDataLoss) {
      Fail(name, decoded.status().ToString());
    }
    return;
  }
  if (encode(*decoded) != input) Fail(name, "re-encoding differs from the input");
}

}  // namespace
}  // namespace kvtier::index

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::index;  // NOLINT(build/namespaces): entry point of this file only
  const absl::string_view input(reinterpret_cast<const char*>(data), size);

  CheckDecoded("block key", DecodeBlockKey(input), input,
               [](const BlockKey& key) { return EncodeBlockKey(key); });
  absl::StatusOr<BlockRecord> record = DecodeBlockRecord(input);
  CheckDecoded("block record", record, input,
               [](const BlockRecord& r) { return EncodeBlockRecord(r); });
  if (record.ok() && TierName(record->tier) == "invalid") Fail("block record", "invalid tier");
  CheckDecoded("namespace id", DecodeNamespaceId(input), input,
               [](NamespaceId id) { return EncodeNamespaceId(id); });
  return 0;
}
