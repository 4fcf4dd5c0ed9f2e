"""The one error a CSI call fails with: a gRPC status code the spec names and a message."""

from __future__ import annotations

import grpc


class CsiError(Exception):
    """A CSI call's refusal; `code` is the spec's for the case, `message` says what and how to
    fix it. The gRPC binding (services.py) turns it into the call's status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
