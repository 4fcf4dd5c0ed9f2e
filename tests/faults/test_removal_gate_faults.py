"""The removal gate on the real cluster: each test forces the interleaving that used to delete a
tenant's data (issue 29), through the provisioner's public surface: a PV create whose answer is
lost (`api_answer_faults`), a ValidatingAdmissionPolicy that refuses a PV's create or delete as
an admission webhook or a brief RBAC gap would, and the node's disk.

- A clone whose PV save ended unsettled is retried after the tenant deleted its source: the
  retry binds the clone and its data survives (the source's verdict was taken once, before the
  first save).
- A reuseExistingData class whose PV create is refused outright: the retained data the class
  was meant to hand over stays (a give-back never removes what `prepare` reused), with a
  Warning on the claim.
- A Released volume whose teardown removed its directory and whose PV DELETE is then refused:
  once allowed, the PV goes at once, without a helper pod waiting for the missing directory,
  and the recreated claim's directory at the same path is left alone.
- A teardown pod that starts late (held by a scheduling gate, as one left by an earlier leader
  or waiting for its hostPath would be), after a new volume took its path: it removes nothing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client import AdmissionregistrationV1Api
from kubernetes.client.exceptions import ApiException

from localcluster import LocalCluster, wait_for
from localcluster.raw_api import call_json, manifest
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_NODE,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    load_config_bundle,
)
from provisioner.helper_pods.pod_shapes import build_helper_pod
from provisioner.provisioning.annotations import VOLUME_FINALIZER
from provisioner.provisioning.volume_decisions import TeardownPlan
from provisioner.provisioning.work_keys import CLAIM
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import unique_base_path
from tests.faults.test_volume_save_faults import VOLUMES, retried_keys
from tests.provisioner.e2e.support import (
    HELPER_SERVICE_ACCOUNT,
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    volume_path,
)
from tests.provisioner.e2e.test_clones import create_clone
from tests.provisioner.removal_permits import permit_for

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
NAMESPACED = "{{ .PVC.Namespace }}/{{ .PVC.Name }}"
TENANT_FILE = "written-by-the-tenant"


@contextmanager
def refusing_policy(
    setup: ProvisionerSetup, operation: str, expression: str, probe: Callable[[], None]
) -> Iterator[Callable[[], None]]:
    """A ValidatingAdmissionPolicy (and its binding) that refuses `operation` on PVs for which
    the CEL `expression` is false, with a 403 as a webhook would; in force once `probe` (a
    dry-run request it must refuse) is refused. Yields a function that lifts it."""
    admission = AdmissionregistrationV1Api(setup.core.api_client)
    name = f"refuse-{operation.lower()}-{uuid.uuid4().hex[:6]}"
    admission.create_validating_admission_policy(
        manifest(
            {
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": [operation],
                                "resources": ["persistentvolumes"],
                            }
                        ]
                    },
                    "validations": [
                        {
                            "expression": expression,
                            "message": "refused by the test's admission policy",
                            "reason": "Forbidden",
                        }
                    ],
                },
            }
        )
    )
    admission.create_validating_admission_policy_binding(
        manifest(
            {
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            }
        )
    )
    lifted = False

    def lift() -> None:
        nonlocal lifted
        if not lifted:
            lifted = True
            admission.delete_validating_admission_policy_binding(name)
            admission.delete_validating_admission_policy(name)

    def refused() -> bool | None:
        try:
            probe()
        except ApiException as error:
            return error.status == 403 or None
        return None

    try:
        wait_for(refused, 30, f"admission policy {name} to be in force")
        yield lift
    finally:
        lift()


def write_tenant_file(setup: ProvisionerSetup, claim: str) -> Any:
    directory = setup.node_path("node-1", volume_path(setup.wait_bound(claim)))
    written = directory / TENANT_FILE
    written.write_text("precious")
    return written


def our_event_reasons(setup: ProvisionerSetup, claim: str) -> list[tuple[str, str]]:
    uid = setup.claim(claim)["metadata"]["uid"]
    return [
        (event["reason"], event.get("message") or "")
        for event in setup.events(claim)
        if event["involvedObject"].get("uid") == uid
    ]


def test_a_clone_saved_unsettled_binds_and_keeps_its_data_after_its_source_went(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("clone-retry")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    with provisioner_with_faults(setup, cluster) as (provisioner, faults):
        provisioner.local_path._actions._pv_save_retry_delay = 0.1
        storage_class = setup.create_class("clone")
        setup.create_claim("src", storage_class)
        setup.create_consumer("src", "src", NODE)
        source = setup.wait_bound("src")
        (setup.node_path("node-1", volume_path(source)) / "seed").write_text("seed")
        retried = retried_keys(provisioner)
        # The clone's PV is created, its answer lost (a 503) on every attempt of the round; the
        # last waits until the tenant has used the clone and deleted its source.
        posts = faults.arm(
            "POST", lambda path: path == VOLUMES, 503, times=5, send_first=True, hold_last=True
        )
        create_clone(setup, "data", "src", storage_class)
        setup.create_consumer("app", "data", NODE)
        wait_for(lambda: posts.holding.is_set() or None, 120, "the clone's last PV POST")
        written = write_tenant_file(setup, "data")
        assert (written.parent / "seed").read_text() == "seed", "the copy is whole"
        setup.core.delete_namespaced_pod("src", setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim("src", setup.namespace)
        key = (CLAIM, str(setup.claim("data")["metadata"]["uid"]))
        posts.release()
        wait_for(lambda: key in retried or None, 60, "the round to end and the clone retried")
        # The retry saves the same PV again (AlreadyExists, and it is the clone's), or, before
        # the fix, read the source again, found it gone and gave the directory back.
        reasons = wait_for(
            lambda: (
                [
                    reason
                    for reason, message in our_event_reasons(setup, "data")
                    if reason == "ProvisioningSucceeded" or "back" in message
                ]
                or None
            ),
            60,
            "the retry's outcome",
        )
        time.sleep(3)  # a give-back's teardown pod, were there one, has run by now
        assert written.exists(), f"the bound clone's directory was removed ({reasons})"
        assert written.read_text() == "precious"
        assert "ProvisioningSucceeded" in reasons
        assert setup.phase("data") == "Bound"


def test_reused_data_stays_when_the_pv_create_is_refused(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("reuse-refused")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    storage_class = setup.create_class(
        "reuse", parameters={"pathPattern": NAMESPACED, "reuseExistingData": "true"}
    )
    # A retained volume of an earlier claim of that name: the class is there to hand it back.
    retained = setup.node_path("node-1", f"{base}/{setup.namespace}/data")
    retained.mkdir(parents=True)
    (retained / TENANT_FILE).write_text("precious")

    def probe() -> None:
        setup.core.create_persistent_volume(
            manifest(
                {
                    "metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}"},
                    "spec": {
                        "storageClassName": storage_class,
                        "capacity": {"storage": "1Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "hostPath": {"path": "/probe"},
                    },
                }
            ),
            dry_run="All",
        )

    expression = f"object.spec.storageClassName != '{storage_class}'"
    with (
        refusing_policy(setup, "CREATE", expression, probe),
        provisioner_with_faults(setup, cluster) as (provisioner, _),
    ):
        provisioner.local_path._actions._pv_save_retry_delay = 0.1
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", NODE)
        # Every save is refused (403) and a read shows no PV: before the fix, the directory
        # was given back, the teardown run on the retained data.
        wait_for(
            lambda: (
                any("giving" in message for _, message in our_event_reasons(setup, "data")) or None
            ),
            120,
            "the refused save's give-back",
        )
        outcome = wait_for(
            lambda: (
                [
                    message
                    for reason, message in our_event_reasons(setup, "data")
                    if reason in ("ProvisioningCleanupRefused", "ProvisioningCleanupFailed")
                ]
                or (not (retained / TENANT_FILE).exists() and ["removed"])
                or None
            ),
            60,
            "the give-back's outcome",
        )
        assert (retained / TENANT_FILE).exists(), f"the retained data was removed ({outcome})"
        assert (retained / TENANT_FILE).read_text() == "precious"
        assert any("reuseExistingData" in message for message in outcome), outcome


def test_a_teardown_redone_after_its_directory_went_finishes_without_a_pod(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("redone-teardown")
    # A base path that must exist: a volume's hostPath is then `Directory`, which a kubelet
    # waits for while it is missing.
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [base]}]})
    )
    setup.node_path("node-1", base).mkdir(parents=True)
    storage_class = setup.create_class("redone", parameters={"pathPattern": NAMESPACED})
    with provisioner_with_faults(setup, cluster):
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", NODE)
        volume = setup.wait_bound("data")
        pv = volume["metadata"]["name"]
        directory = setup.node_path("node-1", volume_path(volume))
        (directory / TENANT_FILE).write_text("old")

        def probe() -> None:
            setup.core.delete_persistent_volume(pv, dry_run="All")

        with refusing_policy(setup, "DELETE", f"oldObject.metadata.name != '{pv}'", probe) as lift:
            setup.core.delete_namespaced_pod("app", setup.namespace, grace_period_seconds=0)
            setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)
            # The teardown runs and removes the directory and our finalizer; the PV's DELETE is
            # refused.
            wait_for(lambda: not directory.exists() or None, 120, "the first teardown")
            wait_for(
                lambda: VOLUME_FINALIZER not in (_finalizers(setup, pv)) or None,
                60,
                "our finalizer to go",
            )
            # The same claim again: its path is the old volume's, so it waits for that PV.
            wait_for(lambda: _claim_gone(setup, "data") or None, 60, "the old claim to go")
            setup.create_claim("data", storage_class)
            setup.create_consumer("app", "data", NODE)
            time.sleep(2)  # retries of the refused DELETE (and, before the fix, their pods)
            lift()
            lifted = time.monotonic()
            wait_for(lambda: setup.volume(pv) is None or None, 30, f"PV {pv} to go")
            print(f"PV {pv} went {time.monotonic() - lifted:.1f}s after the policy was lifted")
        new_volume = setup.wait_bound("data", timeout=60)
        assert volume_path(new_volume) == volume_path(volume), "the same path again"
        written = write_tenant_file(setup, "data")
        time.sleep(5)  # a teardown pod left over for the old PV, were there one, has run by now
        assert written.exists(), "the new claim's directory was removed"


def test_a_teardown_redone_by_the_next_process_finishes_though_its_directory_went(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    """The teardown pod succeeded, then the PATCH that removes our finalizer (and says the
    directory went) failed and the process stopped: the next one sees a Released PV as any
    other. Its teardown pod waits for the missing `Directory` hostPath until its deadline;
    then a read-only look through the base path finds the directory gone, and the PV goes."""
    base = unique_base_path("redone-restart")
    config = {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [base]}], "cmdTimeoutSeconds": 10}
    setup = make_setup(ConfigFiles(config=config))
    setup.node_path("node-1", base).mkdir(parents=True)
    storage_class = setup.create_class("restart", parameters={"pathPattern": NAMESPACED})
    with provisioner_with_faults(setup, cluster) as (provisioner, faults):
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", NODE)
        volume = setup.wait_bound("data")
        pv = volume["metadata"]["name"]
        directory = setup.node_path("node-1", volume_path(volume))
        patches = faults.arm("PATCH", lambda path: path == f"{VOLUMES}/{pv}", 503, times=1000)
        setup.core.delete_namespaced_pod("app", setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)
        wait_for(lambda: not directory.exists() or None, 120, "the first teardown")
        patches.wait_answered(1, 60)
        # Stopped while its PATCHes still fail (leaving the context lifts the faults first).
        provisioner.stop()
        wait_for(
            lambda: not any(t.name == "provisioner-main" for t in threading.enumerate()) or None,
            60,
            "the provisioner to stop",
        )
    assert VOLUME_FINALIZER in _finalizers(setup, pv), "the PV still waits for its teardown"
    with provisioner_with_faults(setup, cluster):
        wait_for(lambda: setup.volume(pv) is None or None, 90, f"PV {pv} to go")


def _claim_gone(setup: ProvisionerSetup, name: str) -> bool:
    try:
        setup.claim(name)
    except ApiException as error:
        return bool(error.status == 404)
    return False


def _finalizers(setup: ProvisionerSetup, pv: str) -> list[str]:
    volume = setup.volume(pv)
    return list((volume or {}).get("metadata", {}).get("finalizers") or [])


def test_a_teardown_pod_that_starts_late_removes_nothing_another_volume_took(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("late-teardown")
    config = {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]}
    setup = make_setup(ConfigFiles(config=config))
    setup.start()
    storage_class = setup.create_class("late", parameters={"pathPattern": NAMESPACED})
    path = f"{base}/{setup.namespace}/data"
    # The teardown pod of an earlier volume at that path, as the provisioner builds it (with
    # the gate's permit for that volume), held Pending until the new volume is in use.
    bundle = load_config_bundle(
        json.dumps(config), DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT, DEFAULT_HELPER_POD_YAML
    )
    old = TeardownPlan(
        volume_name=f"pvc-{uuid.uuid4()}",
        path=path,
        node_name="node-1",
        volume_mode="Filesystem",
        size_bytes=0,
        delete_volume=True,
        remove_finalizer=True,
        base_path=base,
    )
    pod = build_helper_pod(
        "delete", old, bundle, setup.namespace, HELPER_SERVICE_ACCOUNT, permit=permit_for(old)
    )
    name = pod["metadata"]["name"]
    pod["spec"].pop("nodeName")
    pod["spec"]["nodeSelector"] = dict(NODE)
    pod["spec"]["schedulingGates"] = [{"name": "local-path-storage.io/late"}]
    created = call_json(setup.core.create_namespaced_pod, setup.namespace, manifest(pod))
    setup.create_claim("data", storage_class)
    setup.create_consumer("app", "data", NODE)
    written = write_tenant_file(setup, "data")
    assert str(written.parent).endswith(path), "the new volume took the old one's path"
    setup.core.patch_namespaced_pod(
        name, setup.namespace, [{"op": "remove", "path": "/spec/schedulingGates"}]
    )

    # Followed by a watch from its creation: the provisioner deletes a finished helper pod no
    # run of its own waits on, so a read could miss how it ended.
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        setup.core.list_namespaced_pod,
        setup.namespace,
        field_selector=f"metadata.name={name}",
        resource_version=created["metadata"]["resourceVersion"],
        timeout_seconds=120,
    )
    final: dict[str, Any] = {}
    for event in stream:
        status = event["raw_object"].get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            final = status
            break
    assert final, f"the late teardown pod {name} did not run"
    assert written.exists(), f"the late teardown pod ({final['phase']}) removed the new data"
    assert written.read_text() == "precious"
    assert final["phase"] == "Failed"
    [teardown] = final["initContainerStatuses"]
    message = teardown["state"]["terminated"].get("message") or ""
    new_volume = setup.wait_bound("data")["metadata"]["name"]
    assert f"its owner marker names {new_volume}, not {old.volume_name}" in message, message
