// Page layouts: validation, fingerprint, JSON form and family builders.
// The fingerprint hashes a canonical little-endian encoding (FORMAT.md, "Layout fingerprint") so
// that it is stable across builds, compilers and machines; JSON parsing is strict (unknown keys are
// errors) because a typo in a layout silently changes what bytes mean.
// Overlap: the buffers of a pool are swept in order of their first byte, and each pair whose spans
// meet is checked exactly. A buffer without gaps between its rows is one range; rows of two
// strided buffers with equal strides collide iff some row distance k = i - j puts them within each
// other's width, which leaves at most two k to try. Strided buffers with different strides whose
// spans meet are refused without a search (it could take rows x rows steps per pair): no engine
// lays out memory that way.
#include "codec/page_layout.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/coding.h"
#include "common/quote.h"
#include "common/status_macros.h"

namespace kvtier::codec {
namespace {

using Json = nlohmann::json;

absl::Status BufferError(const BufferSpec& b, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("buffer ", Quoted(b.name), ": ", what));
}

bool IsPoolNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

// Where a buffer's rows lie in a slot, in bytes: `rows` rows of `width` bytes, `stride` apart, the
// first at `start`. A buffer without gaps between its rows is one row (its span).
struct Footprint {
  uint64_t start = 0, width = 0, stride = 0, rows = 0;
  uint64_t end() const { return start + (rows - 1) * stride + width; }
};

// REQUIRES: the buffer passed ValidateLayout's per-buffer rules (its span fits its slot).
Footprint FootprintOf(const PageLayout& layout, const BufferSpec& b) {
  const uint64_t element = DTypeBytes(b.dtype);
  Footprint f{b.offset_bytes, uint64_t{b.head_dim} * element, uint64_t{b.RowStride()} * element,
              layout.Rows(b)};
  if (f.rows == 1 || f.stride == f.width) {
    const uint64_t span = layout.SpanBytes(b);
    f = {b.offset_bytes, span, span, 1};
  }
  return f;
}

struct ByteRange {
  uint64_t begin = 0, end = 0;
};
ByteRange Row(const Footprint& f, uint64_t i) {
  return {f.start + i * f.stride, f.start + i * f.stride + f.width};
}

// The first row of `f` that ends after `begin`, when it starts before `end`.
std::optional<uint64_t> RowMeeting(const Footprint& f, uint64_t begin, uint64_t end) {
  uint64_t i = 0;
  if (begin >= f.start + f.width) i = (begin - f.start - f.width) / f.stride + 1;
  if (i >= f.rows || f.start + i * f.stride >= end) return std::nullopt;
  return i;
}

__int128 FloorDiv(__int128 x, __int128 y) {  // y > 0
  __int128 q = x / y;
  if (x % y != 0 && x < 0) --q;
  return q;
}

// Two buffers whose spans meet: a row of each that share bytes, or that their strides differ
// (both strided); nullopt when no byte is shared.
struct Collision {
  bool unequal_strides = false;
  ByteRange a, b;
};
std::optional<Collision> Collide(const Footprint& a, const Footprint& b) {
  if (b.rows == 1) {
    const std::optional<uint64_t> i = RowMeeting(a, b.start, b.end());
    if (!i.has_value()) return std::nullopt;
    return Collision{false, Row(a, *i), Row(b, 0)};
  }
  if (a.rows == 1) {
    const std::optional<uint64_t> j = RowMeeting(b, a.start, a.end());
    if (!j.has_value()) return std::nullopt;
    return Collision{false, Row(a, 0), Row(b, *j)};
  }
  if (a.stride != b.stride) return Collision{true, {}, {}};
  // Row i of a and row j of b share bytes iff, with k = i - j and d = b.start - a.start,
  // d - a.width < k * stride < d + b.width: an open range at most two strides long.
  const __int128 s = a.stride;
  const __int128 d = static_cast<__int128>(b.start) - static_cast<__int128>(a.start);
  const __int128 first = FloorDiv(d - static_cast<__int128>(a.width), s) + 1;
  for (__int128 k = first; k <= first + 1; ++k) {
    if (k * s >= d + static_cast<__int128>(b.width)) break;
    if (k > static_cast<__int128>(a.rows) - 1 || -k > static_cast<__int128>(b.rows) - 1) continue;
    const uint64_t i = k > 0 ? static_cast<uint64_t>(k) : 0;
    const uint64_t j = static_cast<uint64_t>(static_cast<__int128>(i) - k);
    return Collision{false, Row(a, i), Row(b, j)};
  }
  return std::nullopt;
}

// InvalidArgument naming two buffers of a pool that share a byte of a slot.
// REQUIRES: every buffer passed ValidateLayout's per-buffer rules.
absl::Status CheckNoOverlap(const PageLayout& layout) {
  std::vector<std::vector<size_t>> by_pool(layout.pools.size());
  std::vector<Footprint> footprints;
  footprints.reserve(layout.buffers.size());
  for (size_t i = 0; i < layout.buffers.size(); ++i) {
    footprints.push_back(FootprintOf(layout, layout.buffers[i]));
    by_pool[layout.buffers[i].pool].push_back(i);
  }
  for (size_t p = 0; p < by_pool.size(); ++p) {
    std::vector<size_t>& order = by_pool[p];
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return footprints[x].start < footprints[y].start; });
    for (size_t x = 0; x < order.size(); ++x) {
      const Footprint& a = footprints[order[x]];
      for (size_t y = x + 1; y < order.size() && footprints[order[y]].start < a.end(); ++y) {
        const Footprint& b = footprints[order[y]];
        const std::optional<Collision> c = Collide(a, b);
        if (!c.has_value()) continue;
        const std::string name_a = Quoted(layout.buffers[order[x]].name);
        const std::string name_b = Quoted(layout.buffers[order[y]].name);
        const std::string pool = Quoted(layout.pools[p].name);
        if (c->unequal_strides) {
          return absl::InvalidArgumentError(absl::StrCat(
              "buffers ", name_a, " and ", name_b, " of pool ", pool, " both reach into bytes [",
              b.start, ", ", std::min(a.end(), b.end()), ") of a slot with different row strides (",
              a.stride, " and ", b.stride,
              " bytes); buffers whose spans meet must interleave with equal row strides"));
        }
        return absl::InvalidArgumentError(
            absl::StrCat("buffers ", name_a, " and ", name_b, " overlap in pool ", pool, ": ",
                         name_a, " covers bytes [", c->a.begin, ", ", c->a.end, ") of a slot and ",
                         name_b, " bytes [", c->b.begin, ", ", c->b.end, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view BufferRoleName(BufferRole role) {
  switch (role) {
    case BufferRole::kAttentionK:
      return "k";
    case BufferRole::kAttentionV:
      return "v";
    case BufferRole::kMlaLatent:
      return "mla_latent";
    case BufferRole::kLossless:
      return "lossless";
  }
  return "unknown";
}

absl::StatusOr<BufferRole> ParseBufferRole(absl::string_view name) {
  for (BufferRole r : {BufferRole::kAttentionK, BufferRole::kAttentionV, BufferRole::kMlaLatent,
                       BufferRole::kLossless}) {
    if (name == BufferRoleName(r)) return r;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown buffer role ", Quoted(name),
                                                 " (expected k, v, mla_latent or lossless)"));
}

uint64_t PageLayout::SpanBytes(const BufferSpec& b) const {
  const uint64_t rows = Rows(b);
  if (rows == 0) return 0;
  return ((rows - 1) * b.RowStride() + b.head_dim) * DTypeBytes(b.dtype);
}

uint64_t PageLayout::HotBytes() const {
  uint64_t total = 0;
  for (const BufferSpec& b : buffers) total += DataBytes(b);
  return total;
}

absl::Status ValidateLayout(const PageLayout& layout) {
  if (layout.tokens_per_page == 0 || layout.tokens_per_page > kMaxTokensPerPage) {
    return absl::InvalidArgumentError(absl::StrCat("tokens_per_page ", layout.tokens_per_page,
                                                   " out of range [1, ", kMaxTokensPerPage, "]"));
  }
  if (layout.pools.empty()) return absl::InvalidArgumentError("layout has no pools");
  if (layout.pools.size() > kMaxPools) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout has ", layout.pools.size(), " pools; the maximum is ", kMaxPools));
  }
  std::set<std::string> pool_names;
  for (size_t i = 0; i < layout.pools.size(); ++i) {
    const PoolSpec& p = layout.pools[i];
    if (p.name.empty()) return absl::InvalidArgumentError(absl::StrCat("pool ", i, " has no name"));
    if (p.name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("pool ", i, ": name ", Quoted(p.name),
                                                     " is longer than ", kMaxNameBytes, " bytes"));
    }
    if (!std::all_of(p.name.begin(), p.name.end(), IsPoolNameChar)) {
      return absl::InvalidArgumentError(absl::StrCat("pool ", i, ": name ", Quoted(p.name),
                                                     " has a character outside [A-Za-z0-9_.-]"));
    }
    if (!pool_names.insert(p.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool name ", Quoted(p.name), " appears twice"));
    }
    if (p.slot_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("pool ", Quoted(p.name), ": slot_bytes is 0"));
    }
  }
  if (layout.buffers.empty()) return absl::InvalidArgumentError("layout has no buffers");
  if (layout.buffers.size() > kMaxBuffers) {
    return absl::InvalidArgumentError(absl::StrCat("layout has ", layout.buffers.size(),
                                                   " buffers; the maximum is ", kMaxBuffers));
  }
  std::set<std::string> names;
  uint32_t previous_layer = 0;
  for (size_t i = 0; i < layout.buffers.size(); ++i) {
    const BufferSpec& b = layout.buffers[i];
    if (b.name.empty())
      return absl::InvalidArgumentError(absl::StrCat("buffer ", i, " has no name"));
    if (b.name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", i, ": name ", Quoted(b.name),
                                                     " is longer than ", kMaxNameBytes, " bytes"));
    }
    if (!names.insert(b.name).second) return BufferError(b, "name appears twice");
    if (i > 0 && b.layer < previous_layer) {
      return BufferError(b, absl::StrCat("layer ", b.layer, " follows layer ", previous_layer,
                                         "; buffers must be ordered by layer"));
    }
    previous_layer = b.layer;
    const uint32_t tokens = b.Tokens(layout.tokens_per_page);
    if (b.heads == 0) return BufferError(b, "heads is 0");
    if (tokens > kMaxTokensPerPage) {
      return BufferError(b, absl::StrCat("tokens ", tokens, " exceeds ", kMaxTokensPerPage));
    }
    if (b.head_dim == 0 || b.head_dim > kMaxHeadDim) {
      return BufferError(
          b, absl::StrCat("head_dim ", b.head_dim, " out of range [1, ", kMaxHeadDim, "]"));
    }
    if (b.RowStride() < b.head_dim) {
      return BufferError(
          b, absl::StrCat("row_stride ", b.row_stride, " is smaller than head_dim ", b.head_dim));
    }
    if (b.Quantizable() && !IsQuantizable(b.dtype)) {
      return BufferError(b, absl::StrCat("role '", BufferRoleName(b.role), "' needs dtype bf16, ",
                                         "fp16 or fp8_e4m3, not ", DTypeName(b.dtype),
                                         " (use role 'lossless' for other data)"));
    }
    if (b.rope_len != 0 || b.rope_start != 0) {
      if (b.role != BufferRole::kAttentionK && b.role != BufferRole::kMlaLatent) {
        return BufferError(b, absl::StrCat("a RoPE range is only allowed on k and mla_latent ",
                                           "buffers, not on role '", BufferRoleName(b.role), "'"));
      }
      if (b.rope_len == 0) return BufferError(b, "rope_start is set but rope_len is 0");
      if (uint64_t{b.rope_start} + b.rope_len > b.head_dim) {
        return BufferError(
            b, absl::StrCat("RoPE range [", b.rope_start, ", ", uint64_t{b.rope_start} + b.rope_len,
                            ") exceeds head_dim ", b.head_dim));
      }
    }
    if (b.pool >= layout.pools.size()) {
      return BufferError(b, absl::StrCat("pool index ", b.pool, " out of range (layout has ",
                                         layout.pools.size(), " pools)"));
    }
    // Sizes are checked before they are multiplied out, so nothing below can wrap around.
    const uint64_t rows = uint64_t{b.heads} * tokens;
    constexpr uint64_t kMaxElements = uint64_t{1} << 40;
    if (rows > kMaxElements || b.RowStride() > kMaxElements / rows) {
      return BufferError(b, absl::StrCat(b.heads, " heads x ", tokens, " tokens x row_stride ",
                                         b.RowStride(), " elements is too large"));
    }
    if (layout.DataBytes(b) > kMaxBufferBytes) {
      return BufferError(b, absl::StrCat("holds ", layout.DataBytes(b), " bytes; the maximum is ",
                                         kMaxBufferBytes));
    }
    const PoolSpec& pool = layout.pools[b.pool];
    const uint64_t span = layout.SpanBytes(b);
    if (b.offset_bytes > pool.slot_bytes || span > pool.slot_bytes - b.offset_bytes) {
      const uint64_t end = b.offset_bytes > UINT64_MAX - span ? UINT64_MAX : b.offset_bytes + span;
      return BufferError(
          b, absl::StrCat("spans bytes [", b.offset_bytes, ", ", end, ") of a slot but pool ",
                          Quoted(pool.name), " slots are ", pool.slot_bytes, " bytes"));
    }
  }
  return CheckNoOverlap(layout);
}

uint64_t LayoutFingerprint(const PageLayout& layout) {
  std::string canonical = "KVTL";
  PutFixed32(&canonical, 1);  // canonical-encoding version
  PutFixed32(&canonical, layout.tokens_per_page);
  PutFixed32(&canonical, static_cast<uint32_t>(layout.buffers.size()));
  for (const BufferSpec& b : layout.buffers) {
    PutFixed32(&canonical, b.layer);
    PutFixed32(&canonical, static_cast<uint32_t>(b.role) | (static_cast<uint32_t>(b.dtype) << 8));
    PutFixed32(&canonical, b.heads);
    PutFixed32(&canonical, b.Tokens(layout.tokens_per_page));
    PutFixed32(&canonical, b.head_dim);
    PutFixed32(&canonical, b.rope_start);
    PutFixed32(&canonical, b.rope_len);
  }
  return XXH3_64bits(canonical.data(), canonical.size());
}

std::string LayoutToJson(const PageLayout& layout, int indent) {
  Json j;
  j["tokens_per_page"] = layout.tokens_per_page;
  j["pools"] = Json::array();
  for (const PoolSpec& p : layout.pools) {
    j["pools"].push_back({{"name", p.name}, {"slot_bytes", p.slot_bytes}});
  }
  j["buffers"] = Json::array();
  for (const BufferSpec& b : layout.buffers) {
    Json jb = Json::object();
    jb["name"] = b.name;
    jb["layer"] = b.layer;
    jb["role"] = std::string(BufferRoleName(b.role));
    jb["dtype"] = std::string(DTypeName(b.dtype));
    jb["heads"] = b.heads;
    jb["tokens"] = b.Tokens(layout.tokens_per_page);
    jb["head_dim"] = b.head_dim;
    jb["row_stride"] = b.RowStride();
    jb["rope_start"] = b.rope_start;
    jb["rope_len"] = b.rope_len;
    jb["pool"] = b.pool;
    jb["offset_bytes"] = b.offset_bytes;
    j["buffers"].push_back(std::move(jb));
  }
  return j.dump(indent);
}

namespace {

// Reads an unsigned integer member of `obj`; `where` prefixes error messages.
template <typename T>
absl::Status ReadUint(const Json& obj, const char* key, const std::string& where, bool required,
                      T* out) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(where, ": missing '", key, "'"));
    return absl::OkStatus();
  }
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", key, "' must be a non-negative integer, got ", it->dump()));
  }
  const uint64_t v = it->get<uint64_t>();
  if (v > std::numeric_limits<T>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", key, "' value ", v, " exceeds ", std::numeric_limits<T>::max()));
  }
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

absl::Status ReadString(const Json& obj, const char* key, const std::string& where,
                        std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end())
    return absl::InvalidArgumentError(absl::StrCat(where, ": missing '", key, "'"));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": '", key, "' must be a string, got ", it->dump()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status CheckKeys(const Json& obj, const std::string& where,
                       std::initializer_list<absl::string_view> allowed) {
  if (!obj.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not an object"));
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (absl::string_view a : allowed) known = known || it.key() == a;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key ", Quoted(it.key())));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PageLayout> ParseLayoutJson(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("layout JSON: not valid JSON");
  PageLayout layout;
  KVTIER_RETURN_IF_ERROR(CheckKeys(j, "layout JSON", {"tokens_per_page", "pools", "buffers"}));
  KVTIER_RETURN_IF_ERROR(
      ReadUint(j, "tokens_per_page", "layout JSON", /*required=*/true, &layout.tokens_per_page));
  if (!j.contains("pools") || !j["pools"].is_array()) {
    return absl::InvalidArgumentError("layout JSON: 'pools' must be an array");
  }
  for (size_t i = 0; i < j["pools"].size(); ++i) {
    const Json& jp = j["pools"][i];
    const std::string where = absl::StrCat("layout JSON: pools[", i, "]");
    KVTIER_RETURN_IF_ERROR(CheckKeys(jp, where, {"name", "slot_bytes"}));
    PoolSpec p;
    KVTIER_RETURN_IF_ERROR(ReadString(jp, "name", where, &p.name));
    KVTIER_RETURN_IF_ERROR(ReadUint(jp, "slot_bytes", where, true, &p.slot_bytes));
    layout.pools.push_back(std::move(p));
  }
  if (!j.contains("buffers") || !j["buffers"].is_array()) {
    return absl::InvalidArgumentError("layout JSON: 'buffers' must be an array");
  }
  for (size_t i = 0; i < j["buffers"].size(); ++i) {
    const Json& jb = j["buffers"][i];
    const std::string where = absl::StrCat("layout JSON: buffers[", i, "]");
    KVTIER_RETURN_IF_ERROR(
        CheckKeys(jb, where,
                  {"name", "layer", "role", "dtype", "heads", "tokens", "head_dim", "row_stride",
                   "rope_start", "rope_len", "pool", "offset_bytes"}));
    BufferSpec b;
    std::string role, dtype;
    KVTIER_RETURN_IF_ERROR(ReadString(jb, "name", where, &b.name));
    KVTIER_RETURN_IF_ERROR(ReadString(jb, "role", where, &role));
    KVTIER_RETURN_IF_ERROR(ReadString(jb, "dtype", where, &dtype));
    auto parsed_role = ParseBufferRole(role);
    if (!parsed_role.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed_role.status().message()));
    }
    b.role = *parsed_role;
    auto parsed_dtype = ParseDType(dtype);
    if (!parsed_dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed_dtype.status().message()));
    }
    b.dtype = *parsed_dtype;
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "layer", where, false, &b.layer));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "heads", where, false, &b.heads));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "tokens", where, false, &b.tokens));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "head_dim", where, true, &b.head_dim));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "row_stride", where, false, &b.row_stride));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "rope_start", where, false, &b.rope_start));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "rope_len", where, false, &b.rope_len));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "pool", where, false, &b.pool));
    KVTIER_RETURN_IF_ERROR(ReadUint(jb, "offset_bytes", where, false, &b.offset_bytes));
    layout.buffers.push_back(std::move(b));
  }
  KVTIER_RETURN_IF_ERROR(ValidateLayout(layout));
  return layout;
}

namespace {

// Lays the buffers end to end in one pool "kv" (16-byte aligned offsets) and validates.
absl::StatusOr<PageLayout> Finish(PageLayout layout) {
  uint64_t offset = 0;
  for (BufferSpec& b : layout.buffers) {
    b.offset_bytes = offset;
    offset += (layout.SpanBytes(b) + 15) / 16 * 16;
  }
  layout.pools = {PoolSpec{"kv", offset == 0 ? 1 : offset}};
  KVTIER_RETURN_IF_ERROR(ValidateLayout(layout));
  return layout;
}

BufferSpec AttentionBuffer(std::string name, uint32_t layer, BufferRole role, DType dtype,
                           uint32_t heads, uint32_t head_dim) {
  BufferSpec b;
  b.name = std::move(name);
  b.layer = layer;
  b.role = role;
  b.dtype = dtype;
  b.heads = heads;
  b.head_dim = head_dim;
  return b;
}

void AddGqaLayer(PageLayout& layout, uint32_t l, uint32_t heads, uint32_t head_dim, DType dtype,
                 uint32_t rope_start, uint32_t rope_len) {
  BufferSpec k =
      AttentionBuffer(absl::StrCat("k.", l), l, BufferRole::kAttentionK, dtype, heads, head_dim);
  k.rope_start = rope_start;
  k.rope_len = rope_len == 0 ? head_dim - rope_start : rope_len;
  layout.buffers.push_back(std::move(k));
  layout.buffers.push_back(
      AttentionBuffer(absl::StrCat("v.", l), l, BufferRole::kAttentionV, dtype, heads, head_dim));
}

}  // namespace

absl::StatusOr<PageLayout> BuildGqaLayout(const GqaOptions& o) {
  if (o.num_layers == 0) return absl::InvalidArgumentError("GQA layout: num_layers is 0");
  if (o.rope_start >= o.head_dim && o.head_dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GQA layout: rope_start ", o.rope_start,
                                                   " is not inside head_dim ", o.head_dim));
  }
  PageLayout layout;
  layout.tokens_per_page = o.tokens_per_page;
  for (uint32_t l = 0; l < o.num_layers; ++l) {
    AddGqaLayer(layout, l, o.kv_heads, o.head_dim, o.dtype, o.rope_start, o.rope_len);
  }
  return Finish(std::move(layout));
}

absl::StatusOr<PageLayout> BuildMlaLayout(const MlaOptions& o) {
  if (o.num_layers == 0) return absl::InvalidArgumentError("MLA layout: num_layers is 0");
  PageLayout layout;
  layout.tokens_per_page = o.tokens_per_page;
  for (uint32_t l = 0; l < o.num_layers; ++l) {
    BufferSpec latent = AttentionBuffer(absl::StrCat("latent.", l), l, BufferRole::kMlaLatent,
                                        o.dtype, 1, o.kv_lora_rank + o.rope_dim);
    latent.rope_start = o.rope_dim == 0 ? 0 : o.kv_lora_rank;
    latent.rope_len = o.rope_dim;
    layout.buffers.push_back(std::move(latent));
    if (o.indexer_bytes_per_token > 0) {
      BufferSpec index;
      index.name = absl::StrCat("index.", l);
      index.layer = l;
      index.role = BufferRole::kLossless;
      index.dtype = DType::kBytes;
      index.heads = 1;
      index.head_dim = o.indexer_bytes_per_token;
      layout.buffers.push_back(std::move(index));
    }
  }
  return Finish(std::move(layout));
}

absl::StatusOr<PageLayout> BuildHybridLayout(const HybridOptions& o) {
  if (o.num_layers == 0) return absl::InvalidArgumentError("hybrid layout: num_layers is 0");
  std::set<uint32_t> attention(o.attention_layers.begin(), o.attention_layers.end());
  for (uint32_t l : attention) {
    if (l >= o.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("hybrid layout: attention layer ", l,
                                                     " out of range (", o.num_layers, " layers)"));
    }
  }
  if (attention.size() < o.num_layers && o.state_bytes == 0) {
    return absl::InvalidArgumentError("hybrid layout: state layers need state_bytes > 0");
  }
  PageLayout layout;
  layout.tokens_per_page = o.tokens_per_page;
  for (uint32_t l = 0; l < o.num_layers; ++l) {
    if (attention.count(l)) {
      AddGqaLayer(layout, l, o.kv_heads, o.head_dim, o.dtype, o.rope_start, o.rope_len);
    } else {
      BufferSpec state;
      state.name = absl::StrCat("state.", l);
      state.layer = l;
      state.role = BufferRole::kLossless;
      state.dtype = DType::kBytes;
      state.heads = 1;
      state.tokens = 1;
      state.head_dim = o.state_bytes;
      layout.buffers.push_back(std::move(state));
    }
  }
  return Finish(std::move(layout));
}

}  // namespace kvtier::codec
