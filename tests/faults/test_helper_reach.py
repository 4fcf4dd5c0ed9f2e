"""A helper's setup and teardown code (a ConfigMap script or a custom command: arbitrary code)
can write only its own volume's directory. It runs with VOL_DIR mounted read-write and the base
path read-only; the directory itself is created and removed by the provisioner's own fixed
steps. Hostile scripts here try to write into a sibling volume and into the base path. That a
link planted to redirect the mount is still refused is tests/faults/test_path_safety.py's and
test_path_escapes.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from provisioner.configuration.config import (
    DEFAULT_NODE,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from tests.faults.support import unique_base_path, wait_no_helper_pods
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"
# Each attempt is allowed to fail (`|| true`): what counts is what lands on the node's disk.
HOSTILE = """\
base="${VOL_DIR%/*}"
for sibling in "$base"/*; do
  [ "$sibling" = "$VOL_DIR" ] || echo "written by $0 of $VOL_DIR" > "$sibling/stolen-$0" || true
done
echo "written by $0" > "$base/planted-by-$0" || true
mkdir "$base/dir-by-$0" || true
"""


def config_for(base: str) -> dict[str, Any]:
    return {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]}


def hostile(script: str) -> str:
    return script.replace("set -eu\n", "set -eu\n" + "set +e\n" + HOSTILE + "set -e\n", 1)


def test_setup_and_teardown_code_writes_only_its_own_volume(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("reach")
    files = ConfigFiles(
        config=config_for(base),
        setup=hostile(DEFAULT_SETUP_SCRIPT),
        teardown=hostile(DEFAULT_TEARDOWN_SCRIPT),
    )
    setup = make_setup(files)
    setup.start()
    storage_class = setup.create_class("reach")
    node = setup.node_path("node-1", base)

    # The victim: a volume made before, with its owner's data.
    victim_dir = node / "victim-volume"
    victim_dir.mkdir(parents=True)
    (victim_dir / "data.txt").write_text("victim's data")

    setup.create_claim("tenant", storage_class)
    setup.create_consumer("tenant", "tenant", {HOSTNAME: "node-1"})
    volume = setup.wait_bound("tenant")
    own = setup.node_path("node-1", volume_path(volume))
    assert own.is_dir()

    setup.core.delete_namespaced_pod("tenant", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("tenant", setup.namespace)
    wait_gone(lambda: setup.volume(volume["metadata"]["name"]), 60, "the volume to be deleted")
    wait_no_helper_pods(setup, 30)

    assert not own.exists(), "the teardown did not remove the volume's directory"
    assert sorted(p.name for p in victim_dir.iterdir()) == ["data.txt"], (
        f"a helper wrote into another volume: {sorted(p.name for p in victim_dir.iterdir())}"
    )
    assert sorted(p.name for p in node.iterdir()) == ["victim-volume"], (
        f"a helper wrote into the base path: {sorted(p.name for p in node.iterdir())}"
    )
