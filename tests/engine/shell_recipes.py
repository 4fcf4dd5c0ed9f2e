"""The documentation's shell recipes, as the tests that run them verbatim read and run them: a
page marks each tested block with an HTML comment naming the test, and the block runs under
`bash -euo pipefail`, as a user pasting it into a strict shell would."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def marked_blocks(document: Path, marker: str) -> list[str]:
    """The shell blocks that follow `marker` in `document`, in order."""
    parts = document.read_text(encoding="utf-8").split(marker)[1:]
    blocks = []
    for after in parts:
        match = re.match(r"\s*```sh\n(.*?)```", after, re.DOTALL)
        assert match is not None, f"a shell block follows each marker in {document.name}"
        blocks.append(match.group(1))
    return blocks


def run_shell(script: str, cwd: Path, env: dict[str, str]) -> str:
    """Runs `script`; its output, or a failed assertion with the output's tail."""
    completed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    return output
