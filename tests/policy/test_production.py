from __future__ import annotations

import pytest

from policy.production import check_stack
from tests.policy.resources import deployment, storage_class

RETAIN = storage_class("keep", reclaim_policy="Retain")


def messages(*resources: object) -> list[str]:
    return [message for message, _ in check_stack(list(resources))]  # type: ignore[arg-type]


def test_a_production_shaped_stack_passes() -> None:
    assert messages(deployment(), storage_class(), RETAIN) == []


def test_one_replica() -> None:
    [message] = messages(deployment(replicas=1.0), RETAIN)
    assert "1 replica" in message
    assert "set replicas to 2" in message


def test_no_memory_limit() -> None:
    [message] = messages(deployment(memory_limit=None), RETAIN)
    assert "no memory limit" in message


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--no-leader-election",), ()),
        (("--no-leader",), ()),  # argparse's abbreviation, which the runtime accepts
        ((), ({"name": "LEADER_ELECTION", "value": "off"},)),
    ],
)
def test_leader_election_off(args: tuple[str, ...], env: tuple[dict[str, str], ...]) -> None:
    [message] = messages(deployment(args=args, env=env), RETAIN)
    assert "leader election is off" in message


def test_delete_on_every_class() -> None:
    [message] = messages(
        deployment(), storage_class("a"), storage_class("b", reclaim_policy="Delete")
    )
    assert message.startswith("every StorageClass (a, b) has reclaimPolicy Delete")
    assert "reclaimPolicy: Retain" in message
