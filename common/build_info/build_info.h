// BuildInfo: what this binary was built from and with, for `--version`, the kvtier_build_info
// metric and kvtierd's start-up log line. Fixed when the binary is built (the revision at build
// time, the rest when CMake configures); static storage, thread-safe.
#ifndef KVTIER_COMMON_BUILD_INFO_BUILD_INFO_H_
#define KVTIER_COMMON_BUILD_INFO_BUILD_INFO_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvtier::build_info {

struct BuildInfo {
  // The project version of CMakeLists.txt: "0.1.0".
  absl::string_view version;
  // The git revision: "4de6988", "4de6988-dirty" with uncommitted changes to tracked files,
  // "unknown" outside a git checkout (a tarball, the container build), or the CMake cache
  // variable KVTIER_GIT_REVISION where it is set.
  absl::string_view revision;
  // The CUDA architectures the kernels were compiled for, "sm_80,sm_90,sm_100a"; empty when the
  // build has no CUDA sources. cuda_version: nvcc's version ("12.8.93"), empty without CUDA.
  absl::string_view cuda_archs;
  absl::string_view cuda_version;
  // The liburing version the disk tier's io_uring engine was built with ("2.3"); empty when
  // liburing is not linked. Whether the running kernel grants a ring is a run-time question
  // (io::UringAvailable).
  absl::string_view liburing_version;
  // OpenSSL's version at configure time ("3.0.15"; the TLS of gRPC and the hashing use it).
  absl::string_view openssl_version;
  // CMAKE_BUILD_TYPE ("RelWithDebInfo") and the C++ compiler ("GNU 12.2.0").
  absl::string_view build_type;
  absl::string_view compiler;
};

// This binary's build information.
const BuildInfo& Get();

// What `<program> --version` prints: a first line "<program> <version> (revision <revision>)",
// then one "  name: value" line per build feature (build, cuda, io_uring, tls), then one per
// entry of `runtime` (name, value), e.g. {"kernel", "grants io_uring rings"}. Ends in a newline.
std::string VersionText(absl::string_view program,
                        const std::vector<std::pair<std::string, std::string>>& runtime = {});

}  // namespace kvtier::build_info

#endif  // KVTIER_COMMON_BUILD_INFO_BUILD_INFO_H_
