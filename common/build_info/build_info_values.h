// The values build_info_values.cc (generated at build time) defines; read them through
// common/build_info/build_info.h, never directly.
#ifndef KVTIER_COMMON_BUILD_INFO_BUILD_INFO_VALUES_H_
#define KVTIER_COMMON_BUILD_INFO_BUILD_INFO_VALUES_H_

namespace kvtier::build_info::internal {

extern const char kVersion[];
extern const char kRevision[];
extern const char kCudaArchs[];
extern const char kCudaVersion[];
extern const char kLiburingVersion[];
extern const char kOpensslVersion[];
extern const char kBuildType[];
extern const char kCompiler[];

}  // namespace kvtier::build_info::internal

#endif  // KVTIER_COMMON_BUILD_INFO_BUILD_INFO_VALUES_H_
