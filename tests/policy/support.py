"""The policy pack as the engine tests run it: a copy of policy/ whose PulumiPolicy.yaml points
the Python language host at the virtualenv running the tests (which has this checkout
installed), as scripts.pulumi_engine.project_copy does for the program."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from scripts.pulumi_engine import copy_entry_point

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"


def policy_pack_copy(destination: Path) -> Path:
    destination.mkdir(parents=True, exist_ok=True)
    manifest = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text(encoding="utf-8"))
    manifest["runtime"]["options"]["virtualenv"] = sys.prefix
    (destination / "PulumiPolicy.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    copy_entry_point(POLICY_DIR / "__main__.py", destination / "__main__.py")
    return destination
