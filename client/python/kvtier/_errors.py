"""kvtier's exceptions and the conversion of C ABI statuses into them.

Every non-OK status becomes a kvtier.Error (a RuntimeError) whose str() is "CODE: message", with
attributes `code` ("INVALID_ARGUMENT", ...) and `message` (the server's or the library's text).
INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION and ALREADY_EXISTS raise InvalidRequestError
(also a ValueError); NOT_FOUND raises NotFoundError (also a KeyError).
"""

from __future__ import annotations

from typing import Any

STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")


class Error(RuntimeError):
    """An error of libkvtier or kvtierd. `code` is the status code name ("UNAVAILABLE",
    "NOT_FOUND", ...), `message` the text without it; str() gives "CODE: message"."""

    code: str
    message: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> Any:
        return (type(self), (self.code, self.message))


class InvalidRequestError(Error, ValueError):
    """INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION or ALREADY_EXISTS: a kvtier.Error that
    is also a ValueError."""


class NotFoundError(Error, KeyError):
    """NOT_FOUND: a kvtier.Error that is also a KeyError."""

    def __str__(self) -> str:  # KeyError would quote the text
        return f"{self.code}: {self.message}"


_INVALID = {"INVALID_ARGUMENT", "OUT_OF_RANGE", "FAILED_PRECONDITION", "ALREADY_EXISTS"}


def status_name(code: int) -> str:
    return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else "UNKNOWN"


def make_error(code: int, message: str) -> Error:
    """The exception for a non-OK status number (not raised)."""
    name = status_name(code)
    if name in _INVALID:
        return InvalidRequestError(name, message)
    if name == "NOT_FOUND":
        return NotFoundError(name, message)
    return Error(name, message)


def check(status: int, err: Any) -> None:
    """Raises the exception for a C ABI status unless it is 0; `err` is the kvtier_error."""
    if status != 0:
        raise make_error(status, err.message.decode("utf-8", "replace"))


def precondition(message: str) -> Error:
    return make_error(9, message)


def invalid(message: str) -> Error:
    return make_error(3, message)
