// Trace loading and the synthetic generator. Token ids come from splitmix64 over (block id,
// position) or (session, turn, position), in a 151,936-token vocabulary (Qwen3's), so the block
// hashes of the client are computed over realistic-looking ids.
#include "tools/engine/trace.h"

#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_reading.h"
#include "nlohmann/json.hpp"

namespace kvtier::engine {
namespace {

constexpr uint32_t kVocab = 151936;
constexpr uint32_t kMooncakeBlockTokens = 512;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<uint32_t> Tokens(uint64_t stream, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  for (uint32_t i = 0; i < count; ++i) {
    tokens[i] = static_cast<uint32_t>(SplitMix64(stream * 0x100000001B3ull + i) % kVocab);
  }
  return tokens;
}

}  // namespace

std::vector<uint32_t> BlockTokens(uint64_t hash_id, uint32_t count) {
  return Tokens(SplitMix64(hash_id ^ 0x6D6F6F6E63616B65ull), count);
}

std::vector<uint32_t> GeneratedTokens(uint64_t session, uint32_t turn, uint32_t count) {
  return Tokens(SplitMix64((session << 24) ^ (uint64_t{turn} << 4) ^ 0x4F55545055540000ull), count);
}

absl::StatusOr<std::vector<Session>> LoadMooncakeTrace(const std::string& path, uint64_t limit) {
  constexpr uint64_t kMaxTraceBytes = uint64_t{1} << 30;
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxTraceBytes, "trace");
  if (!text.ok()) return text.status();
  std::vector<Session> sessions;
  uint64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (limit != 0 && sessions.size() >= limit) break;
    ++line_no;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("hash_ids") ||
        !j["hash_ids"].is_array() || !j.value("input_length", nlohmann::json()).is_number() ||
        !j.value("output_length", nlohmann::json()).is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace '", path, "' line ", line_no,
                       ": expected {timestamp, input_length, output_length, hash_ids}"));
    }
    const int64_t input_length = j["input_length"].get<int64_t>();
    const auto& ids = j["hash_ids"];
    const auto blocks = static_cast<int64_t>(ids.size());
    if (input_length < 1 || input_length > blocks * kMooncakeBlockTokens ||
        input_length <= (blocks - 1) * kMooncakeBlockTokens) {
      return absl::InvalidArgumentError(absl::StrCat("trace '", path, "' line ", line_no,
                                                     ": input_length ", input_length, " with ",
                                                     ids.size(), " blocks of 512 tokens"));
    }
    Session s;
    s.id = line_no;
    Turn t;
    t.arrival_ms = j.value("timestamp", int64_t{0});
    t.output_tokens = static_cast<uint32_t>(j["output_length"].get<int64_t>());
    for (size_t b = 0; b < ids.size(); ++b) {
      if (!ids[b].is_number_unsigned()) {
        return absl::InvalidArgumentError(
            absl::StrCat("trace '", path, "' line ", line_no, ": hash_ids[", b, "] is not an id"));
      }
      const int64_t left = input_length - static_cast<int64_t>(b) * kMooncakeBlockTokens;
      const uint32_t n = static_cast<uint32_t>(std::min<int64_t>(left, kMooncakeBlockTokens));
      const std::vector<uint32_t> block = BlockTokens(ids[b].get<uint64_t>(), n);
      t.input.insert(t.input.end(), block.begin(), block.end());
    }
    s.turns.push_back(std::move(t));
    sessions.push_back(std::move(s));
  }
  return sessions;
}

std::vector<Session> SyntheticAgenticTrace(const SyntheticOptions& o) {
  std::mt19937_64 rng(o.seed);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng);
  };
  std::vector<Session> sessions;
  int64_t start = 0;
  for (uint32_t s = 0; s < o.sessions; ++s) {
    Session session;
    session.id = s + 1;
    const uint64_t prompt_id = static_cast<uint64_t>(uniform(0, o.system_prompts - 1));
    const int turns = static_cast<int>(uniform(o.min_turns, o.max_turns));
    int64_t now = start;
    for (int t = 0; t < turns; ++t) {
      Turn turn;
      turn.arrival_ms = now;
      if (t == 0) {
        turn.input = Tokens(SplitMix64(0x53595354454Dull + prompt_id), o.system_prompt_tokens);
        const std::vector<uint32_t> first =
            Tokens(SplitMix64((uint64_t{s} << 20) + 1), o.first_message_tokens);
        turn.input.insert(turn.input.end(), first.begin(), first.end());
      } else {
        turn.input = Tokens(
            SplitMix64((uint64_t{s} << 20) + 2 + t),
            static_cast<uint32_t>(uniform(o.min_tool_result_tokens, o.max_tool_result_tokens)));
      }
      turn.output_tokens = static_cast<uint32_t>(uniform(o.min_output_tokens, o.max_output_tokens));
      turn.tool_pause_ms = t + 1 < turns ? uniform(o.min_pause_ms, o.max_pause_ms) : 0;
      now += 1 + turn.tool_pause_ms;
      session.turns.push_back(std::move(turn));
    }
    sessions.push_back(std::move(session));
    start += uniform(o.session_spacing_ms / 2, o.session_spacing_ms * 3 / 2);
  }
  return sessions;
}

}  // namespace kvtier::engine
