// Conversions between the public contract's layout and codec messages (kvtier/v1/layout.proto)
// and the codec library's types, shared by the daemon and the client library. Pure functions;
// thread-safe.
#ifndef KVTIER_PROTO_CODEC_CONVERT_H_
#define KVTIER_PROTO_CODEC_CONVERT_H_

#include "absl/status/statusor.h"
#include "codec/codec_spec.h"
#include "codec/page_layout.h"
#include "kvtier/v1/layout.pb.h"

namespace kvtier::proto {

// A validated layout. InvalidArgument names the buffer and field; FailedPrecondition when the
// message's fingerprint is set and differs from the one computed here.
absl::StatusOr<codec::PageLayout> LayoutFromProto(const v1::PageLayout& layout);
void LayoutToProto(const codec::PageLayout& layout, v1::PageLayout* out);

// An unset codec (CODEC_UNSPECIFIED) takes `fallback`'s codec; unset rope and alignment take
// their defaults. InvalidArgument for an unknown enum value or a bad alignment.
absl::StatusOr<codec::CodecSpec> CodecFromProto(const v1::CodecSpec& spec,
                                                const codec::CodecSpec& fallback);
void CodecToProto(const codec::CodecSpec& spec, v1::CodecSpec* out);

}  // namespace kvtier::proto

#endif  // KVTIER_PROTO_CODEC_CONVERT_H_
