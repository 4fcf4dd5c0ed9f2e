"""Helper pods that fail: a setup script failing its first try for some claims, and a helper
image that never starts.

A failing script must be reported with its exit code and log tail and retried until the claim
binds; an image that never starts must be reported (ImagePullBackOff) and retried with backoff
a bounded number of times, then given up. Either way no helper pod and no directory may be
left for a claim that has no volume.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from localcluster import NEVER_STARTS_IMAGE, wait_for
from provisioner.configuration.config import DEFAULT_HELPER_POD_YAML
from tests.faults.support import (
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    claims_by_name,
    create_claims_with_consumers,
    event_count,
    events_with_reason,
    helper_pods,
    metric,
    node_directories,
    our_volumes,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

# Fails the first attempt for claims named flaky-*: the marker beside the volume directory (the
# only host path a helper sees) remembers that the first try happened.
FLAKY_SETUP = """#!/bin/sh
set -eu
case "$VOL_DIR" in
  *_flaky-*)
    marker="$VOL_DIR/.first-try.tried"
    if [ ! -e "$marker" ]; then
      touch "$marker"
      echo "first try for $VOL_DIR fails on purpose" >&2
      exit 3
    fi
    ;;
esac
chmod 0777 "$VOL_DIR"
"""


def test_a_setup_failing_its_first_try_is_reported_and_retried_until_bound(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("flaky")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=FLAKY_SETUP))
    replica = setup.start()
    storage_class = setup.create_class("flaky")
    flaky = [f"flaky-{number}" for number in range(5)]
    steady = [f"steady-{number:02d}" for number in range(20)]
    create_claims_with_consumers(setup, storage_class, flaky + steady)

    wait_all_bound(setup, flaky + steady, timeout=300)
    wait_no_helper_pods(setup, timeout=60)
    volumes = assert_each_claim_bound_once(setup, flaky + steady)
    assert_no_orphan_directories(setup.cluster, [base], volumes)
    for name in flaky:
        failed = events_with_reason(setup, name, "ProvisioningFailed")
        assert failed, f"{name}: its failed first try was not reported"
        message = failed[0]["message"]
        assert "exit code 3" in message, message
        assert "fails on purpose" in message, "the log tail explains the failure"
        assert event_count(events_with_reason(setup, name, "ProvisioningSucceeded")) == 1
    for name in steady:
        assert not events_with_reason(setup, name, "ProvisioningFailed"), name
    metrics = replica.metrics()
    assert metric(metrics, "workqueue_retries_total") >= len(flaky)
    assert metric(metrics, "controller_persistentvolumeclaim_provision_failed_total") == len(flaky)
    assert metric(metrics, "controller_persistentvolumeclaim_provision_total") == 25
    markers = sorted(
        path.parent.name.split("_")[-1]
        for node_dir in node_directories(setup.cluster).values()
        for path in (node_dir / base.lstrip("/")).glob("*/.first-try.tried")
    )
    assert markers == flaky, "each flaky claim failed exactly its first try"


def never_starting_helper() -> str:
    template = re.sub(r"image: \S+", f"image: {NEVER_STARTS_IMAGE}", DEFAULT_HELPER_POD_YAML)
    assert NEVER_STARTS_IMAGE in template.split(), template
    return template


def test_a_helper_image_that_never_starts_is_reported_backed_off_and_given_up(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("noimage")
    files = ConfigFiles(config=default_config(base), helper_pod=never_starting_helper())
    setup = make_setup(files)
    # Three attempts per claim (two retries), then the claim waits for its next change.
    replica = setup.start("--provisioning-retry-count", "2")
    storage_class = setup.create_class("noimage")
    names = ["stuck-a", "stuck-b"]
    create_claims_with_consumers(setup, storage_class, names)

    def gave_up() -> bool | None:
        return True if replica.log().count("giving up on claim") >= len(names) else None

    wait_for(gave_up, 240, "the provisioner to give up on both claims", interval=1.0)
    for name in names:
        failed = events_with_reason(setup, name, "ProvisioningFailed")
        assert failed, f"{name}: no ProvisioningFailed event"
        assert all("ImagePullBackOff" in event["message"] for event in failed), failed
        assert NEVER_STARTS_IMAGE in failed[0]["message"], "the event names the image"
        assert event_count(failed) == 3, f"{name}: three attempts, each reported"
    retries = re.findall(r"claim \S+ failed \(attempt (\d)\), retrying with backoff", replica.log())
    assert sorted(retries) == ["1", "1", "2", "2"], retries
    metrics = replica.metrics()
    assert metric(metrics, "controller_persistentvolumeclaim_provision_failed_total") == 6
    assert metric(metrics, "local_path_helper_pod_duration_seconds_count", outcome="failed") == 6

    wait_no_helper_pods(setup, timeout=30)
    time.sleep(5)  # given up: no further attempt may start
    assert not helper_pods(setup)
    assert not our_volumes(setup)
    claims = claims_by_name(setup)
    assert all(claims[name]["status"]["phase"] == "Pending" for name in names)
    assert_no_orphan_directories(setup.cluster, [base], [])

    # Stopped while a helper is stuck: the graceful stop must not leave that pod behind.
    create_claims_with_consumers(setup, storage_class, ["stuck-at-stop"])
    wait_for(lambda: helper_pods(setup) or None, 60, "a helper pod for the new claim")
    assert replica.stop() == 0
    assert not helper_pods(setup), "a helper pod outlived the provisioner's graceful stop"
