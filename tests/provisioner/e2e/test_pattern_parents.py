"""Nothing leaked: the parents a pathPattern made go with the volume, on the real cluster, and a
sibling's setup that races their removal still succeeds."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import yaml

from provisioner.configuration.config import DEFAULT_HELPER_POD_YAML
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster
NAMESPACED = "{{ .PVC.Namespace }}/{{ .PVC.Name }}"
NODE = "node-1"


def release(setup: ProvisionerSetup, claim: str) -> None:
    setup.core.delete_namespaced_pod(claim, setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim(claim, setup.namespace)


def test_the_namespace_directory_a_pattern_made_goes_with_its_last_volume(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/parents-{uuid.uuid4().hex[:6]}"
    setup = make_setup(ConfigFiles(config=default_config(base)))
    setup.start()
    storage_class = setup.create_class("nested", parameters={"pathPattern": NAMESPACED})
    volumes = []
    for claim in ("one", "two"):
        setup.create_claim(claim, storage_class)
        setup.create_consumer(claim, claim, node_selector={"kubernetes.io/hostname": NODE})
        volumes.append(setup.wait_bound(claim))
    parent = setup.node_path(NODE, f"{base}/{setup.namespace}")
    assert sorted(p.name for p in parent.iterdir()) == ["one", "two"]

    release(setup, "one")
    wait_gone(lambda: setup.volume(volumes[0]["metadata"]["name"]), 60, "the first PV to go")
    assert sorted(p.name for p in parent.iterdir()) == ["two"], "a non-empty parent was removed"

    release(setup, "two")
    wait_gone(lambda: setup.volume(volumes[1]["metadata"]["name"]), 60, "the second PV to go")
    assert volume_node(volumes[1]) == NODE
    assert not setup.node_path(NODE, volume_path(volumes[1])).exists()
    assert not parent.exists(), f"{parent} leaked"
    assert setup.node_path(NODE, base).is_dir(), "the base path itself was removed"


def test_a_setup_racing_the_removal_of_its_parent_still_succeeds(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """The second claim's `prepare` finds <base>/<namespace>, and its `mkdir` of
    <base>/<namespace>/second is held (a stand-in on the helpers' PATH) until the first claim's
    teardown has removed that then empty parent: the setup must walk again and succeed."""
    base = f"/opt/race-{uuid.uuid4().hex[:6]}"
    tools = f"{base}/.race-tools"
    template = yaml.safe_load(DEFAULT_HELPER_POD_YAML)
    template["spec"]["containers"][0]["env"] = [
        {
            "name": "PATH",
            "value": f"{tools}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        }
    ]
    setup = make_setup(
        ConfigFiles(config=default_config(base), helper_pod=yaml.safe_dump(template))
    )
    setup.start()
    storage_class = setup.create_class("race", parameters={"pathPattern": NAMESPACED})
    setup.create_claim("first", storage_class)
    setup.create_consumer("first", "first", node_selector={"kubernetes.io/hostname": NODE})
    first = setup.wait_bound("first")

    parent = f"{base}/{setup.namespace}"
    host_tools = setup.node_path(NODE, tools)
    host_tools.mkdir(parents=True)
    stand_in = host_tools / "mkdir"
    stand_in.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "{parent}/second" ] && [ ! -e "{tools}/held" ]; then\n'
        f'  touch "{tools}/held"\n'
        "  i=0\n"
        f'  while [ -d "{parent}" ] && [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done\n'
        f'  if [ ! -d "{parent}" ]; then touch "{tools}/parent-was-removed"; fi\n'
        "fi\n"
        'exec /bin/mkdir "$@"\n'
    )
    stand_in.chmod(0o755)

    setup.create_claim("second", storage_class)
    setup.create_consumer("second", "second", node_selector={"kubernetes.io/hostname": NODE})
    eventually(
        lambda: True if (host_tools / "held").exists() else None,
        60,
        "the second setup to reach the mkdir of its own directory",
    )
    release(setup, "first")
    second = setup.wait_bound("second", timeout=90)

    assert (host_tools / "parent-was-removed").exists(), "the interleaving was not forced"
    wait_gone(lambda: setup.volume(first["metadata"]["name"]), 60, "the first PV to go")
    assert setup.node_path(NODE, volume_path(second)).is_dir()
    assert not setup.node_path(NODE, volume_path(first)).exists()
    events = [e.get("reason") for e in setup.events("second")]
    assert "ProvisioningSucceeded" in events
