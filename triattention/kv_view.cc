// Geometry checks and strides of KvCacheView / KvRequestView.
#include "triattention/kv_view.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvtier::triattention {

KvStrides KvStridesOf(const KvCacheView& view) {
  KvStrides s;
  const uint64_t elem = codec::DTypeBytes(view.dtype);
  s.row_bytes = elem * static_cast<uint64_t>(view.head_dim);
  const uint64_t heads = static_cast<uint64_t>(view.num_kv_heads);
  const uint64_t tokens = static_cast<uint64_t>(view.page_tokens);
  if (view.layout == KvLayout::kHnd) {
    s.token = s.row_bytes;
    s.head = tokens * s.row_bytes;
  } else {
    s.head = s.row_bytes;
    s.token = heads * s.row_bytes;
  }
  s.plane = tokens * heads * s.row_bytes;
  if (view.pool_kind == KvPoolKind::kCombined) {
    s.page = 2 * s.plane;
    s.v_in_page = s.plane;
  } else {
    s.page = s.plane;
    s.v_in_page = 0;
  }
  if (view.page_stride_bytes != 0) s.page = view.page_stride_bytes;
  return s;
}

absl::Status ValidateKvCacheView(const KvCacheView& view) {
  if (view.layers.empty()) return absl::InvalidArgumentError("kv view: layers is empty");
  if (view.pool_kind != KvPoolKind::kSeparate && view.pool_kind != KvPoolKind::kCombined) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: unknown pool_kind ", static_cast<int>(view.pool_kind)));
  }
  for (size_t l = 0; l < view.layers.size(); ++l) {
    const KvLayerPools& p = view.layers[l];
    if (p.k == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("kv view: layers[", l, "].k is null"));
    }
    if (view.pool_kind == KvPoolKind::kSeparate && p.v == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("kv view: layers[", l, "].v is null"));
    }
    if (view.pool_kind == KvPoolKind::kCombined && p.v != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv view: layers[", l, "].v must be null in a combined K|V pool"));
    }
  }
  if (view.num_pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv view: num_pages ", view.num_pages, " < 1"));
  }
  if (view.page_tokens < 16 || view.page_tokens > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: page_tokens ", view.page_tokens, " outside [16, 256]"));
  }
  if (view.num_kv_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: num_kv_heads ", view.num_kv_heads, " < 1"));
  }
  if (view.head_dim != 64 && view.head_dim != 128 && view.head_dim != 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: head_dim ", view.head_dim, " is not 64, 128 or 256"));
  }
  if (view.dtype != codec::DType::kBf16 && view.dtype != codec::DType::kFp16 &&
      view.dtype != codec::DType::kFp8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat("kv view: dtype ", static_cast<int>(view.dtype),
                                                   " is not bf16, fp16 or fp8_e4m3"));
  }
  if (view.layout != KvLayout::kHnd && view.layout != KvLayout::kNhd) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: unknown layout ", static_cast<int>(view.layout)));
  }
  if (view.memory != KvMemory::kHost && view.memory != KvMemory::kDevice) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: unknown memory ", static_cast<int>(view.memory)));
  }
  if (view.num_kv_heads > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv view: num_kv_heads ", view.num_kv_heads, " > 65536"));
  }
  if (view.page_stride_bytes != 0) {
    KvCacheView packed = view;
    packed.page_stride_bytes = 0;
    const uint64_t page = KvStridesOf(packed).page;
    if (view.page_stride_bytes < page || view.page_stride_bytes % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("kv view: page_stride_bytes ",
                                                     view.page_stride_bytes, " is below one page (",
                                                     page, " bytes) or not a multiple of 16"));
    }
  }
  const KvStrides s = KvStridesOf(view);
  if (static_cast<uint64_t>(view.num_pages) > (uint64_t{1} << 62) / s.page) {
    return absl::InvalidArgumentError(absl::StrCat("kv view: num_pages ", view.num_pages,
                                                   " makes a pool larger than 2^62 bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateKvRequest(const KvCacheView& view, const KvRequestView& request) {
  if (request.prompt_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv request: prompt_len ", request.prompt_len, " < 0"));
  }
  if (request.length < request.prompt_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv request: length ", request.length, " < prompt_len ", request.prompt_len));
  }
  if (request.protected_tail < 0 || request.protected_tail > request.length - request.prompt_len) {
    return absl::InvalidArgumentError(absl::StrCat("kv request: protected_tail ",
                                                   request.protected_tail, " outside [0, ",
                                                   request.length - request.prompt_len, "]"));
  }
  const int64_t pages_needed = (request.length + view.page_tokens - 1) / view.page_tokens;
  if (static_cast<int64_t>(request.block_table.size()) < pages_needed) {
    return absl::InvalidArgumentError(absl::StrCat("kv request: block_table has ",
                                                   request.block_table.size(), " pages, length ",
                                                   request.length, " needs ", pages_needed));
  }
  std::vector<int32_t> sorted(request.block_table.begin(), request.block_table.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= view.num_pages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kv request: block_table[", i, "] = ", sorted[i], " outside [0, ", view.num_pages, ")"));
    }
  }
  std::sort(sorted.begin(), sorted.end());
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv request: block_table lists page ", *dup, " twice"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::triattention
