"""Pulumi.yaml and the stack files agree with the program."""

from __future__ import annotations

import pytest

from components.naming import CONFIG_NAMESPACE
from components.settings import KNOWN_KEYS, SCALAR_DEFAULTS
from policy.pack import OPT_INS, STACK_NAMESPACE
from tests.components.stack_files import STACKS, project_file, stack_file

PULUMI_TYPES = {str: "string", int: "integer", bool: "boolean"}
POLICY_KEYS = {"production", *OPT_INS.values()}
"""What a stack may declare about itself to the policy pack (policy/pack.py)."""


def test_project_runs_python_from_the_linked_virtualenv() -> None:
    project = project_file()
    assert project["name"] == CONFIG_NAMESPACE
    assert project["runtime"] == {
        "name": "python",
        "options": {"toolchain": "pip", "virtualenv": ".venv"},
    }
    assert project["stackConfigDir"] == "stacks"


def test_declared_scalars_match_the_parser_defaults() -> None:
    declared = project_file()["config"]
    assert set(declared) == set(SCALAR_DEFAULTS)
    for key, declaration in declared.items():
        default = SCALAR_DEFAULTS[key]
        assert declaration["default"] == default, key
        assert declaration["type"] == PULUMI_TYPES[type(default)], key
        assert declaration["description"].strip(), key


@pytest.mark.parametrize("stack", STACKS)
def test_stack_files_use_known_keys_and_no_secrets(stack: str) -> None:
    content = stack_file(stack)
    assert set(content) == {"config"}, "no secrets provider or encryption salt is needed"
    for full_key, value in content["config"].items():
        namespace, key = full_key.split(":", 1)
        assert namespace in (CONFIG_NAMESPACE, STACK_NAMESPACE), full_key
        assert key in (KNOWN_KEYS if namespace == CONFIG_NAMESPACE else POLICY_KEYS), full_key
        assert not (isinstance(value, dict) and "secure" in value)
