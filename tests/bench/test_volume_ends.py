"""A volume's helper run ends with its own container in ours' shared pods (pure bench pieces)."""

import json

from bench.burst import helper_runs, volumes_done
from bench.timeline import ObjectTimeline
from provisioner.helper_pods.batch_pod_shapes import BATCH_VOLUMES_ANNOTATION

UID_A = "0a8b2f4e-1111-4c2d-9e3f-000000000001"
UID_B = "0a8b2f4e-1111-4c2d-9e3f-000000000002"
BATCH = "helper-batch-create-0123456789abcdef0123"


def batch_pod(*ended: str) -> dict[str, object]:
    return {
        "metadata": {
            "name": BATCH,
            "annotations": {BATCH_VOLUMES_ANNOTATION: json.dumps([f"pvc-{UID_A}", f"pvc-{UID_B}"])},
        },
        "status": {
            "initContainerStatuses": [
                {"name": "stage", "state": {"terminated": {"exitCode": 0}}},
                *({"name": name, "state": {"terminated": {"exitCode": 0}}} for name in ended),
            ]
        },
    }


def test_a_shared_pod_shows_each_volume_done_as_its_own_container_ends() -> None:
    assert volumes_done(batch_pod()) == []
    assert volumes_done(batch_pod("setup-0")) == [UID_A]
    assert volumes_done(batch_pod("setup-0", "setup-1")) == [UID_A, UID_B]
    assert volumes_done({"metadata": {"name": f"helper-pod-create-pvc-{UID_A}"}}) == []


def test_a_volume_s_run_ends_with_its_own_container_else_with_its_pod() -> None:
    timeline = ObjectTimeline(
        api=None,  # type: ignore[arg-type]  # never started: fed by hand
        path="/pods",
        milestones={"finished": lambda pod: bool(pod.get("finished"))},
        keep=lambda pod: ("create", (UID_A, UID_B)),
        parts_done=volumes_done,
    )
    timeline._record(batch_pod(), 10.0)
    timeline._record(batch_pod("setup-0"), 12.0)
    timeline._record({**batch_pod("setup-0", "setup-1"), "finished": True}, 15.0)
    assert helper_runs(timeline, "create") == {UID_A: (10.0, 12.0), UID_B: (10.0, 15.0)}
    assert helper_runs(timeline, "delete") == {}
