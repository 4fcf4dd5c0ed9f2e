"""Saving the PV when the API's answers lie: a POST the server carried out but answered with a
5xx, and a read after AlreadyExists answered 429. Neither proves that no PV points at the new
directory, and here one does: the claim binds to it. The directory, and what the tenant wrote
into it meanwhile, must survive; the provision is retried and settles on the PV it saved.

A real provisioner runs in this process (`api_answer_faults`), so a test can rewrite the
answers of its requests and see when its work queue takes a claim back for another attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from localcluster import LocalCluster, wait_for
from provisioner.configuration.config import DEFAULT_NODE
from provisioner.process.app import Provisioner
from provisioner.provisioning.work_keys import CLAIM, Key
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import unique_base_path
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, creatable, volume_path

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
VOLUMES = "/api/v1/persistentvolumes"
TENANT_FILE = "written-by-the-tenant"


def retried_keys(provisioner: Provisioner) -> list[Key]:
    """The keys the provisioner's workers hand back for another attempt, from now on."""
    queue = provisioner.controller._queue
    retried: list[Key] = []
    lock = threading.Lock()
    add_rate_limited = queue.add_rate_limited

    def record(key: Key) -> None:
        with lock:
            retried.append(key)
        add_rate_limited(key)

    queue.add_rate_limited = record  # type: ignore[method-assign,assignment]
    return retried


def start_claim(setup: ProvisionerSetup) -> None:
    storage_class = setup.create_class("save")
    setup.create_claim("data", storage_class)
    setup.create_consumer("app", "data", NODE)


def tenant_writes(setup: ProvisionerSetup) -> Path:
    """Once the claim is Bound, its pod writes into the volume (the test does it for it)."""
    directory = setup.node_path("node-1", volume_path(setup.wait_bound("data")))
    written = directory / TENANT_FILE
    written.write_text("precious")
    return written


def claim_key(setup: ProvisionerSetup) -> Key:
    return (CLAIM, str(setup.claim("data")["metadata"]["uid"]))


def test_a_pv_saved_but_answered_503_keeps_its_directory_and_binds(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("save-503")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    with provisioner_with_faults(setup, cluster) as (provisioner, faults):
        provisioner.local_path._actions._pv_save_retry_delay = 0.1
        retried = retried_keys(provisioner)
        # Every attempt of the first round is sent on (the first creates the PV, the others
        # meet AlreadyExists) and answered 503; the last waits until the tenant has written.
        posts = faults.arm(
            "POST", lambda path: path == VOLUMES, 503, times=5, send_first=True, hold_last=True
        )
        start_claim(setup)
        wait_for(lambda: posts.holding.is_set() or None, 120, "the round's last PV POST")
        written = tenant_writes(setup)
        posts.release()
        key = claim_key(setup)
        wait_for(lambda: key in retried or None, 60, "the round to end and the claim retried")
        assert written.exists(), "the directory of the PV the claim bound to was removed"
        assert written.read_text() == "precious"
        # The retry saves the same PV again: AlreadyExists, and a read shows it is the claim's.
        setup.wait_event("data", "ProvisioningSucceeded", timeout=60)
        assert setup.phase("data") == "Bound"


def test_a_read_answered_429_after_already_exists_keeps_the_directory(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("save-429")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    with provisioner_with_faults(setup, cluster) as (provisioner, faults):
        provisioner.local_path._actions._pv_save_retry_delay = 0.1
        retried = retried_keys(provisioner)
        # The PV is created but its answer is a 503; the retry meets AlreadyExists, and the
        # read that would show whose PV it is gets a 429 (and waits until the tenant wrote).
        faults.arm("POST", lambda path: path == VOLUMES, 503, send_first=True)
        read = faults.arm(
            "GET", lambda path: path.startswith(f"{VOLUMES}/pvc-"), 429, hold_last=True
        )
        start_claim(setup)
        wait_for(lambda: read.holding.is_set() or None, 120, "the read after AlreadyExists")
        written = tenant_writes(setup)
        read.release()
        key = claim_key(setup)
        wait_for(lambda: key in retried or None, 60, "the round to end and the claim retried")
        assert written.exists(), "the directory of the PV the claim bound to was removed"
        assert written.read_text() == "precious"
        # The retry saves the same PV again: AlreadyExists, and a read shows it is the claim's.
        setup.wait_event("data", "ProvisioningSucceeded", timeout=60)
        assert setup.phase("data") == "Bound"
