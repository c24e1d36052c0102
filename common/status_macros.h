// Status propagation macros for absl::Status / absl::StatusOr (Debian's Abseil 20220623 has none).
// KVTIER_RETURN_IF_ERROR(expr): returns the status of `expr` when it is not OK.
// KVTIER_ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr, returns its status on error, else
// assigns (or declares, when `lhs` is a declaration) the value.
#ifndef KVTIER_COMMON_STATUS_MACROS_H_
#define KVTIER_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVTIER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status kvtier_status_ = (expr);          \
    if (!kvtier_status_.ok()) return kvtier_status_; \
  } while (0)

#define KVTIER_STATUS_CONCAT_INNER_(a, b) a##b
#define KVTIER_STATUS_CONCAT_(a, b) KVTIER_STATUS_CONCAT_INNER_(a, b)

#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_STATUS_CONCAT_(kvtier_statusor_, __LINE__), lhs, expr)

#define KVTIER_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // KVTIER_COMMON_STATUS_MACROS_H_
