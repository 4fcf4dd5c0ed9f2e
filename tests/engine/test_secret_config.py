"""A value set with `pulumi config set --secret` must never end up in plaintext in a ConfigMap
or in the stack's state: every value of this stack ends up in a Kubernetes object that is not a
Secret, so a secret one is refused at preview with one `error:` line naming the key, and
neither preview nor `up` writes it anywhere."""

from __future__ import annotations

import json

import pytest
from pulumi import automation as auto

from localcluster import LocalCluster
from tests.engine.support import StackFactory, api_get, error_lines

MARKER = "s3cr3t-token-do-not-store"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("setupScript", f'#!/bin/sh\nset -eu\nTOKEN={MARKER}\nmkdir -m 0777 -p "$VOL_DIR"\n'),
        ("image", f"registry.example.com/{MARKER}/provisioner:0.1.0"),
    ],
    ids=["setupScript", "image"],
)
def test_secret_value_fails_preview_and_reaches_neither_cluster_nor_state(
    stacks: StackFactory, cluster: LocalCluster, key: str, value: str
) -> None:
    stack = stacks.create()
    names = stack.names
    stack.stack.set_config(f"local-path-storage:{key}", auto.ConfigValue(value, secret=True))
    assert MARKER not in stack.stack_file.read_text(encoding="utf-8")

    output = stack.failed_preview()
    errors = error_lines(output)
    assert len(errors) == 1, output
    assert errors[0].startswith(f"error: stack config local-path-storage:{key}: "), errors[0]
    assert "secret" in errors[0]
    assert MARKER not in output

    with pytest.raises(auto.CommandError) as failed_up:
        stack.up()
    assert MARKER not in str(failed_up.value)
    assert MARKER not in json.dumps(stack.stack.export_stack().deployment)
    assert api_get(cluster, f"/api/v1/namespaces/{names.namespace}") is None
