// From kvtier's event log to KV events: which protocol events one logged store event becomes, and
// which namespaces a publisher carries (by tenant). Thread-compatible.
#ifndef KVTIER_DAEMON_KVEVENTS_EVENT_TRANSLATION_H_
#define KVTIER_DAEMON_KVEVENTS_EVENT_TRANSLATION_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "daemon/kvevents/kv_event_encoding.h"
#include "daemon/service/event_log.h"
#include "daemon/service/token_table.h"

namespace kvtier::kvevents {

// Appends the KV events of `logged` to `out`: kStored -> BlockStored in the tier's medium;
// kRemoved -> BlockRemoved from the medium of the fastest tier that held the blocks; kMoved (the
// fastest tier's copy was freed, a slower one remains) -> BlockStored in the new medium, then
// BlockRemoved from the old one; kCleared (a namespace emptied; its hashes are not logged) ->
// AllBlocksCleared. BlockStored carries no parent hash; its token ids and block size come from
// `tokens` (null: none): the blocks that have tokens recorded, as many as their block size, go in
// runs of consecutive such blocks of one block size, one BlockStored per run with their tokens
// concatenated (vLLM's form); a block with fewer recorded tokens (a partial page) gets a
// BlockStored of its own; the blocks without tokens go in runs with empty token_ids and the
// namespace's recorded block size, else `block_size`. The events keep the blocks' order.
void TranslateLoggedEvent(const service::LoggedEvent& logged, uint32_t block_size,
                          std::vector<KvEvent>* out, const service::TokenTable* tokens = nullptr);

// The tenant of a namespace id: nullopt when the id is unknown (never registered, or a record
// that does not parse).
using TenantOfNamespace = std::function<std::optional<std::string>(index::NamespaceId)>;

// Whether a namespace's events are published: every namespace when `tenants` is empty, else those
// whose tenant is listed. A namespace's tenant is asked once and kept (a namespace id is derived
// from its tenant, so it never changes); an unknown id is asked again next time and not
// published meanwhile.
class TenantFilter {
 public:
  TenantFilter(std::vector<std::string> tenants, TenantOfNamespace tenant_of);
  bool Publishes(index::NamespaceId ns);

 private:
  const absl::flat_hash_set<std::string> tenants_;
  const TenantOfNamespace tenant_of_;
  absl::flat_hash_map<index::NamespaceId, bool> known_;
};

}  // namespace kvtier::kvevents

#endif  // KVTIER_DAEMON_KVEVENTS_EVENT_TRANSLATION_H_
