// absl::Status as gRPC's status, for the services' handlers. Apart from proto_convert.h so that
// the message conversions need only the generated message headers, not grpc++. Pure functions;
// thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_GRPC_STATUS_H_
#define KVTIER_DAEMON_SERVICE_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace kvtier::service {

// The status as a gRPC status (same code and message).
grpc::Status ToGrpc(const absl::Status& status);
// Finishes a unary callback RPC at once with `status`; returns its reactor.
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* ctx, const absl::Status& status);
// The call's deadline; InfiniteFuture when the client set none.
absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx);

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_GRPC_STATUS_H_
