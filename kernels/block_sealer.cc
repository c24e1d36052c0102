// BlockSealer's host-side template, the same in every build.
#include "kernels/block_sealer.h"

#include <cstring>

namespace kvtier::kernels {

SealTemplate MakeSealTemplate(const codec::BlockPlan& plan, int exps_per_page) {
  SealTemplate t;
  const codec::ColdBlockHeader h = codec::PlanHeader(plan);
  t.header.resize(plan.header_bytes);
  codec::WriteColdBlockHeader(h, absl::MakeSpan(t.header));
  // The kernel computes the header checksum with its field zero, as WriteColdBlockHeader does.
  std::memset(t.header.data() + codec::kColdBlockHeaderCrcOffset, 0, 4);
  // Exponent e: buffer e's k, then (nvfp4x2) buffer e - n's k2 where that buffer has two passes:
  // GpuNvfp4Codec::SealBlock's rule.
  const size_t n = plan.buffers.size();
  t.exp_offsets.assign(static_cast<size_t>(exps_per_page), -1);
  for (size_t e = 0; e < t.exp_offsets.size(); ++e) {
    const size_t b = e < n ? e : e - n;
    if (b >= n || (e >= n && plan.buffers[b].passes != 2)) continue;
    t.exp_offsets[e] = static_cast<int16_t>(codec::kColdBlockFixedHeaderBytes +
                                            b * codec::kColdBlockBufferEntryBytes +
                                            codec::kColdBlockEntryScaleExpOffset + (e >= n));
  }
  return t;
}

}  // namespace kvtier::kernels
