"""Errors the console's actions and cluster client raise, each with the HTTP status the API answers with.

Pages show the same message; `field` names the input that was wrong, when one was."""

from __future__ import annotations


class ConsoleError(Exception):
    status = 502
    code = "cluster_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def as_api_body(self) -> dict:
        if self.field:
            return {self.field: [self.message]}
        return {"detail": self.message, "code": self.code}


class Invalid(ConsoleError):
    """Bad input: nothing was changed."""

    status = 400
    code = "invalid"


class NotFound(ConsoleError):
    status = 404
    code = "not_found"


class Conflict(ConsoleError):
    """The request is valid but the resource's state refuses it (a group with active members, a topic that
    exists)."""

    status = 409
    code = "conflict"


class Unavailable(ConsoleError):
    """The cluster did not answer in time."""

    status = 503
    code = "cluster_unavailable"
