// BuildInfo over the generated values (build_info_values.cc): this file does not change when
// the revision does, so only the generated one recompiles after a commit.
#include "common/build_info/build_info.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/build_info/build_info_values.h"

namespace kvtier::build_info {

const BuildInfo& Get() {
  static const BuildInfo info{
      .version = internal::kVersion,
      .revision = internal::kRevision,
      .cuda_archs = internal::kCudaArchs,
      .cuda_version = internal::kCudaVersion,
      .liburing_version = internal::kLiburingVersion,
      .openssl_version = internal::kOpensslVersion,
      .build_type = internal::kBuildType,
      .compiler = internal::kCompiler,
  };
  return info;
}

std::string VersionText(absl::string_view program,
                        const std::vector<std::pair<std::string, std::string>>& runtime) {
  const BuildInfo& b = Get();
  std::string out = absl::StrCat(program, " ", b.version, " (revision ", b.revision, ")\n");
  absl::StrAppend(&out, "  build: ", b.build_type.empty() ? "no build type" : b.build_type, ", ",
                  b.compiler, "\n");
  if (b.cuda_archs.empty()) {
    absl::StrAppend(&out, "  cuda: no (built without CUDA: shared-memory pools only)\n");
  } else {
    absl::StrAppend(&out, "  cuda: ", absl::StrReplaceAll(b.cuda_archs, {{",", ", "}}), " (nvcc ",
                    b.cuda_version, ")\n");
  }
  absl::StrAppend(&out, "  io_uring: ",
                  b.liburing_version.empty() ? std::string("no (liburing not linked)")
                                             : absl::StrCat("liburing ", b.liburing_version),
                  "\n");
  absl::StrAppend(&out, "  tls: ",
                  b.openssl_version.empty() ? std::string("gRPC's")
                                            : absl::StrCat("OpenSSL ", b.openssl_version),
                  "\n");
  for (const auto& [name, value] : runtime) absl::StrAppend(&out, "  ", name, ": ", value, "\n");
  return out;
}

}  // namespace kvtier::build_info
