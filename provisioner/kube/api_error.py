"""The API server's refusal of one of our requests.

Our own type rather than the kubernetes client's ApiException: catching that one means importing
the kubernetes package, which start-up no longer does (see `credentials`). The shape is the same
(status, reason, body, headers), so the handlers read it as they read that. The generated
client's typed calls, which tests and tools still make, raise its own ApiException.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    def __init__(
        self,
        status: int | None = None,
        reason: str | None = None,
        *,
        body: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers

    @classmethod
    def from_response(cls, response: Any, body: str | None) -> ApiError:
        """From a urllib3 response whose status is not 2xx (its body read by the caller)."""
        return cls(response.status, response.reason, body=body, headers=dict(response.headers))

    def __str__(self) -> str:
        text = f"({self.status})\nReason: {self.reason}\n"
        if self.body:
            text += f"HTTP response body: {self.body}\n"
        return text


def describe_api_error(error: ApiError) -> str:
    """`HTTP <status> <reason>: <the server's message>`, for a log line."""
    message = ""
    if error.body:
        try:
            message = json.loads(error.body).get("message", "")
        except (ValueError, AttributeError):
            message = str(error.body)[:200]
    return f"HTTP {error.status} {error.reason}" + (f": {message}" if message else "")
