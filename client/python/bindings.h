// The parts of the `kvtier` Python module (pybind11), one Bind* function per file, and the error
// conversion they share: every non-OK absl::Status becomes a kvtier.Error (a RuntimeError) whose
// text is "CODE_NAME: message", with attributes `code` ("INVALID_ARGUMENT", ...) and `message`
// (the server's or the library's text). InvalidArgument, OutOfRange, FailedPrecondition and
// AlreadyExists raise kvtier.InvalidRequestError (also a ValueError), NotFound raises
// kvtier.NotFoundError (also a KeyError). Everything here runs with the GIL held.
#ifndef KVTIER_CLIENT_PYTHON_BINDINGS_H_
#define KVTIER_CLIENT_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::python {

// Creates kvtier.Error, kvtier.InvalidRequestError and kvtier.NotFoundError in `m`. Called once,
// before anything can raise.
void RegisterErrors(pybind11::module_& m);

// The exception object for a non-OK `status` (not raised).
pybind11::object MakeError(const absl::Status& status);

// Raises MakeError(status) unless it is OK.
void ThrowIfError(const absl::Status& status);

template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  ThrowIfError(result.status());
  return *std::move(result);
}

// A Python object that may be copied and dropped on any thread: the last owner takes the GIL to
// release the reference (or leaks it once the interpreter is finalizing).
using SharedObject = std::shared_ptr<pybind11::object>;
SharedObject Share(pybind11::object object);

// PageLayout, BlockHasher, the pools and their registrations, the compression configuration.
void BindLayoutAndPools(pybind11::module_& m);
// Client, its result types and enums, EventWatch.
void BindClient(pybind11::module_& m);

}  // namespace kvtier::python

#endif  // KVTIER_CLIENT_PYTHON_BINDINGS_H_
