"""One stack previewed (or updated) with the policy pack under changing stack values, for the
engine tests in tests/engine/test_policy_*.py: each module makes one such stack and runs
several previews against it, restoring its stack file after each."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from tests.engine.support import EngineStack

PINNED_HELPER = {"helperImage": "busybox:1.37.0"}
VIOLATION = re.compile(r"^\s*- \[(mandatory|advisory)\]\s+(\S+)\s", re.MULTILINE)


def violations(output: str) -> list[tuple[str, str]]:
    """(level, policy name) of each violation the engine printed."""
    return [(level, name) for level, name in VIOLATION.findall(output)]


class PolicyStack:
    def __init__(self, stack: EngineStack, pack: Path) -> None:
        self.stack = stack
        self.pack = pack
        self.good_file = stack.stack_file.read_text(encoding="utf-8")

    def _write(self, changes: dict[str, Any]) -> None:
        document = yaml.safe_load(self.good_file)
        for key, value in changes.items():
            full_key = key if ":" in key else f"local-path-storage:{key}"
            document["config"][full_key] = value
        self.stack.stack_file.write_text(yaml.safe_dump(document), encoding="utf-8")

    def run(
        self, changes: dict[str, Any], config_file: Path | None = None, *, up: bool = False
    ) -> tuple[bool, str]:
        """(succeeded, the engine's output) of a preview (or up) with the pack."""
        self._write(changes)
        options: dict[str, Any] = {"policy_packs": [str(self.pack)]}
        if config_file is not None:
            options["policy_pack_configs"] = [str(config_file)]
        try:
            outcome = self.stack.up(**options) if up else self.stack.preview(**options)
            return True, outcome.output
        except auto.CommandError as error:
            return False, str(error)
        finally:
            self.stack.stack_file.write_text(self.good_file, encoding="utf-8")
