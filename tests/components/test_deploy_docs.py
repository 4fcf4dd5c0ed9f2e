"""The deployment docs lead to a state that lasts: no recipe keeps the stack's state in a
temporary directory or encrypts its secrets with an empty passphrase (a later `up` or `destroy`
could then neither find the stack nor trust its secrets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DOCS = [
    "README.md",
    "components/README.md",
    "Pulumi.yaml",
    *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md")),
]
UNSAFE = {
    "a backend in /tmp": re.compile(r"file://(/tmp|/var/tmp|\$TMPDIR)"),
    "an empty passphrase": re.compile(r"PULUMI_CONFIG_PASSPHRASE=(\"\"|''|\s|$)", re.MULTILINE),
}


@pytest.mark.parametrize("document", DEPLOY_DOCS)
def test_no_recipe_for_a_temporary_state_or_an_empty_passphrase(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    for what, pattern in UNSAFE.items():
        assert not pattern.search(text), f"{document} recommends {what}"


@pytest.mark.parametrize("document", ["README.md", "docs/install.md"])
def test_the_install_recipe_keeps_state_and_passphrase(document: str) -> None:
    recipe = (ROOT / document).read_text(encoding="utf-8")
    assert "pulumi login --local" in recipe
    assert 'export PULUMI_CONFIG_PASSPHRASE_FILE="$HOME/' in recipe
