// The module's exceptions (bindings.h). The classes are created with PyErr_NewExceptionWithDoc so
// that InvalidRequestError and NotFoundError derive from both kvtier.Error and the built-in
// ValueError / KeyError the Evictor bindings always raised. Their references are kept for the
// life of the process (never released at interpreter exit, when releasing would be unsafe).
#include <pybind11/pybind11.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "client/python/bindings.h"

namespace py = pybind11;

namespace kvtier::python {
namespace {

PyObject* g_error = nullptr;
PyObject* g_invalid_request = nullptr;
PyObject* g_not_found = nullptr;

PyObject* NewException(const char* name, const char* doc, PyObject* bases) {
  PyObject* type = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  return type;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  g_error = NewException(
      "kvtier.Error",
      "An error of libkvtier or kvtierd. `code` is the status code name (\"UNAVAILABLE\", "
      "\"NOT_FOUND\", ...), `message` the text without it; str() gives \"CODE: message\".",
      PyExc_RuntimeError);
  py::tuple invalid_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid_request = NewException(
      "kvtier.InvalidRequestError",
      "INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION or ALREADY_EXISTS: a kvtier.Error "
      "that is also a ValueError.",
      invalid_bases.ptr());
  py::tuple not_found_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_KeyError));
  g_not_found =
      NewException("kvtier.NotFoundError", "NOT_FOUND: a kvtier.Error that is also a KeyError.",
                   not_found_bases.ptr());
  m.attr("Error") = py::handle(g_error);
  m.attr("InvalidRequestError") = py::handle(g_invalid_request);
  m.attr("NotFoundError") = py::handle(g_not_found);
}

py::object MakeError(const absl::Status& status) {
  PyObject* type = g_error;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      type = g_invalid_request;
      break;
    case absl::StatusCode::kNotFound:
      type = g_not_found;
      break;
    default:
      break;
  }
  const std::string code = absl::StatusCodeToString(status.code());
  const std::string message(status.message());
  py::object error = py::handle(type)(absl::StrCat(code, ": ", message));
  error.attr("code") = code;
  error.attr("message") = message;
  return error;
}

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  py::object error = MakeError(status);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

SharedObject Share(py::object object) {
  return SharedObject(new py::object(std::move(object)), [](py::object* p) {
    if (!Py_IsInitialized()) {
      p->release();  // the interpreter is gone: leak the reference rather than touch it
      delete p;
      return;
    }
    py::gil_scoped_acquire gil;
    delete p;
  });
}

}  // namespace kvtier::python
