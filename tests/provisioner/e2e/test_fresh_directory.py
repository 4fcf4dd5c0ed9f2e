"""A retained directory is never handed to a new claim unless the class opts in, on the real
cluster; a claim's own interrupted attempt still binds (see
provisioner/provisioning/fresh_directory.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster
NAMESPACED = "{{ .PVC.Namespace }}/{{ .PVC.Name }}"
NODE = "node-1"
ON_NODE = {"kubernetes.io/hostname": NODE}


def claim_and_consume(setup: ProvisionerSetup, name: str, storage_class: str) -> None:
    setup.create_claim(name, storage_class)
    setup.create_consumer(name, name, node_selector=ON_NODE)


def release(setup: ProvisionerSetup, claim: str) -> None:
    setup.core.delete_namespaced_pod(claim, setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim(claim, setup.namespace)

    def present() -> bool | None:
        try:
            setup.claim(claim)
        except ApiException as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return None
            raise
        return True

    wait_gone(present, 60, f"claim {claim} to go")


def failed_event(setup: ProvisionerSetup, claim: str) -> dict[str, Any]:
    """The ProvisioningFailed event on this claim object (not an earlier one of its name)."""
    uid = setup.claim(claim)["metadata"]["uid"]

    def find() -> dict[str, Any] | None:
        for event in setup.events(claim):
            if event["involvedObject"].get("uid") == uid and (
                event.get("reason") == "ProvisioningFailed"
            ):
                return event
        return None

    return eventually(find, 90, f"a ProvisioningFailed event on the new claim {claim}")


def test_a_retained_directory_goes_to_a_new_claim_only_when_the_class_opts_in(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/fresh-{uuid.uuid4().hex[:6]}"
    setup = make_setup(ConfigFiles(config=default_config(base)))
    setup.start()
    retain = setup.create_class(
        "retain", reclaim_policy="Retain", parameters={"pathPattern": NAMESPACED}
    )
    claim_and_consume(setup, "db", retain)
    old = setup.wait_bound("db")
    path = volume_path(old)
    data = setup.node_path(NODE, path) / "secret.txt"
    data.write_text("the old team's data")

    # The claim goes, its Retain PV stays Released with the data; then the PV is deleted.
    release(setup, "db")
    setup.core.delete_persistent_volume(old["metadata"]["name"])
    wait_gone(lambda: setup.volume(old["metadata"]["name"]), 60, "the retained PV to go")

    # Another team's claim of the same namespace and name renders the same path: refused.
    claim_and_consume(setup, "db", retain)
    event = failed_event(setup, "db")
    assert event["type"] == "Warning"
    assert f"refusing {path}: it already exists with data" in event["message"]
    assert "reuseExistingData" in event["message"]
    assert setup.phase("db") == "Pending"
    assert data.read_text() == "the old team's data"
    assert sorted(p.name for p in data.parent.iterdir()) == ["secret.txt"]

    # A class that opts in hands the directory over, data and all.
    release(setup, "db")
    reuse = setup.create_class(
        "reuse",
        reclaim_policy="Retain",
        parameters={"pathPattern": NAMESPACED, "reuseExistingData": "true"},
    )
    claim_and_consume(setup, "db", reuse)
    again = setup.wait_bound("db", timeout=90)
    assert volume_path(again) == path
    assert data.read_text() == "the old team's data"


def test_a_claims_own_interrupted_attempt_still_binds(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """The first setup writes into the volume's directory and fails, so its `finish` cannot
    remove the directory: the retry's `prepare` finds it, not empty, and takes it as this
    claim's own (its marker names the volume), and the second setup succeeds."""
    base = f"/opt/fresh-{uuid.uuid4().hex[:6]}"
    setup_script = DEFAULT_SETUP_SCRIPT + (
        'if [ ! -e "$VOL_DIR/made-by-setup" ]; then\n'
        '  echo setup > "$VOL_DIR/made-by-setup"\n'
        '  echo "interrupted on purpose" >&2\n'
        "  exit 1\n"
        "fi\n"
    )
    setup = make_setup(ConfigFiles(config=default_config(base), setup=setup_script))
    setup.start()
    storage_class = setup.create_class("nested", parameters={"pathPattern": NAMESPACED})
    claim_and_consume(setup, "db", storage_class)
    assert "interrupted on purpose" in failed_event(setup, "db")["message"]
    volume = setup.wait_bound("db", timeout=120)
    assert volume_path(volume) == f"{base}/{setup.namespace}/db"
    directory = setup.node_path(NODE, volume_path(volume))
    assert (directory / "made-by-setup").read_text() == "setup\n"
