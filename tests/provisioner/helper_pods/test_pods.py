"""The helper pods' facade is handed objects, never a callable that leads back into its caller:
what reaches it is a queue the loop reads, an event recorder, the path book's last look (a
query it defines) and plain settings."""

from __future__ import annotations

import collections.abc
import typing
from typing import Any

import pytest

from provisioner.helper_pods.pod_batcher import PodBatcher
from provisioner.helper_pods.pods import HelperPods


def _callables(hint: Any) -> bool:
    """Whether a parameter's type is, or holds, a callable."""
    if typing.get_origin(hint) is collections.abc.Callable:
        return True
    return any(_callables(argument) for argument in typing.get_args(hint))


@pytest.mark.parametrize("built", [HelperPods, PodBatcher])
def test_nothing_handed_to_the_helper_pods_is_a_callable(built: type[Any]) -> None:
    hints = typing.get_type_hints(built.__init__)
    assert hints, "the constructor is annotated"
    assert [name for name, hint in hints.items() if _callables(hint)] == []
