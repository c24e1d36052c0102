// Workloads of the example engine: the Mooncake traces (../shared/traces/, one request per line
// with its 512-token block ids) and a synthetic multi-turn agentic generator (sessions whose
// prompts grow turn by turn, short outputs, tool-call pauses of seconds to minutes). Both become
// sessions of turns with concrete token ids, derived deterministically from the block ids or the
// generator's seed. Pure data; thread-compatible.
#ifndef KVTIER_TOOLS_ENGINE_TRACE_H_
#define KVTIER_TOOLS_ENGINE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::engine {

// One turn of a session: tokens appended to the context (the user's message or the tool's result;
// the whole prompt for the first turn), then `output_tokens` generated tokens.
struct Turn {
  int64_t arrival_ms = 0;  // when the turn's input is there
  std::vector<uint32_t> input;
  uint32_t output_tokens = 0;
  int64_t tool_pause_ms = 0;  // pause after this turn before the next one (0 for the last turn)
};

struct Session {
  uint64_t id = 0;
  std::vector<Turn> turns;
};

// The tokens of Mooncake block `hash_id` (512 of them, or `count` when fewer are used): a
// deterministic function of the id, so equal ids give equal tokens.
std::vector<uint32_t> BlockTokens(uint64_t hash_id, uint32_t count);

// The tokens a session generates in turn `turn` (unique to the session and turn).
std::vector<uint32_t> GeneratedTokens(uint64_t session, uint32_t turn, uint32_t count);

// Reads a Mooncake trace (JSON lines: timestamp, input_length, output_length, hash_ids): each
// request becomes a one-turn session whose input is the tokens of its block ids (the last block
// cut to input_length). At most `limit` requests (0: all). InvalidArgument names the line.
absl::StatusOr<std::vector<Session>> LoadMooncakeTrace(const std::string& path, uint64_t limit);

struct SyntheticOptions {
  uint64_t seed = 1;
  uint32_t sessions = 64;
  uint32_t system_prompts = 4;  // shared prefixes (system prompt + tool definitions)
  uint32_t system_prompt_tokens = 4096;
  uint32_t min_turns = 2, max_turns = 8;
  uint32_t first_message_tokens = 1024;
  uint32_t min_tool_result_tokens = 200, max_tool_result_tokens = 3000;
  uint32_t min_output_tokens = 20, max_output_tokens = 300;
  int64_t min_pause_ms = 2'000, max_pause_ms = 180'000;  // tool calls: seconds to minutes
  int64_t session_spacing_ms = 5'000;                    // mean gap between session starts
};

// Sessions of an agent: a shared system prompt, a first message, then turns that append a tool
// result after a pause. Deterministic for a seed.
std::vector<Session> SyntheticAgenticTrace(const SyntheticOptions& options);

}  // namespace kvtier::engine

#endif  // KVTIER_TOOLS_ENGINE_TRACE_H_
