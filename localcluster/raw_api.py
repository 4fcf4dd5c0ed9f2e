"""Reading API objects as plain dicts (the JSON the server sent) instead of typed models.

Why: the harness works on pods, ConfigMaps and Secrets as the API spells them (camelCase keys,
as in manifests), and building the client's typed models for every list is slow (see the cost
facts in the shared guide). `_preload_content=False` makes the client hand back the raw
response, which this decodes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def manifest(body: dict[str, Any]) -> Any:
    """A plain dict manifest for a client operation: the client sends dicts as they are; its
    signatures only name its typed models."""
    return body


def call_json(operation: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Calls a `kubernetes` client operation and returns its response body as a dict."""
    response = operation(*args, _preload_content=False, **kwargs)
    document: dict[str, Any] = json.loads(response.data)
    return document
