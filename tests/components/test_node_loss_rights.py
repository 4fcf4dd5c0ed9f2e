"""The right to release claims for their node's loss (`delete` on claims) is granted only when
a StorageClass of the stack sets `nodeLossGracePeriod`: no other class needs it."""

from __future__ import annotations

import json
from typing import Any

from components import rbac
from components.program import run
from components.settings import parse_settings
from tests.components.mocked_engine import run_mocked
from tests.components.test_settings import dev_with

CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
DELETE_CLAIMS = {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["delete"]}


def classes(**parameters: str) -> str:
    entry: dict[str, Any] = {
        "name": "local-path-storage",
        "volumeBindingMode": "WaitForFirstConsumer",
        "parameters": parameters,
    }
    return json.dumps([entry])


def test_a_class_with_a_node_loss_grace_period_grants_deleting_claims() -> None:
    raw = dev_with(storageClasses=classes(nodeLossGracePeriod="10m"))
    assert parse_settings(raw).deployment.release_claims_on_node_loss is True
    result = run_mocked(raw, run, stack="dev")
    assert result.error is None, result.error
    rules = result.one(CLUSTER_ROLE).inputs["rules"]
    assert DELETE_CLAIMS in rules
    assert len(rules) == len(rbac.CLUSTER_RULES) + len(rbac.NODE_LOSS_RULES)


def test_classes_without_it_grant_no_delete_on_claims() -> None:
    raw = dev_with(storageClasses=classes(minSize="1Mi"))
    assert parse_settings(raw).deployment.release_claims_on_node_loss is False
    result = run_mocked(raw, run, stack="dev")
    assert result.error is None, result.error
    rules = result.one(CLUSTER_ROLE).inputs["rules"]
    claims = [rule for rule in rules if "persistentvolumeclaims" in rule["resources"]]
    assert all("delete" not in rule["verbs"] for rule in claims)
