"""Per-claim stages of the burst and the lifted scenario's options (pure pieces of the bench)."""

import json
import math

from bench.burst import STAGES, ClaimMoments, served_volumes, stage_latencies
from bench.options import parse_options
from bench.report import LIFTED_FIGURES, build_report
from bench.runner import RunResults
from provisioner.helper_pods.batch_pod_shapes import BATCH_VOLUMES_ANNOTATION

UID_A = "0a8b2f4e-1111-4c2d-9e3f-000000000001"
UID_B = "0a8b2f4e-1111-4c2d-9e3f-000000000002"


def test_each_stage_spans_its_two_moments_and_skips_claims_that_missed_one() -> None:
    moments = [
        ClaimMoments(
            created=0.0, node_selected=1.0, helper_done=1.5, volume_created=2.0, bound=5.0
        ),
        ClaimMoments(
            created=0.0, node_selected=2.0, helper_done=None, volume_created=4.0, bound=None
        ),
    ]
    stages = stage_latencies(moments)
    assert list(stages) == list(STAGES)
    assert stages["created to node selected"].count == 2
    assert stages["created to node selected"].p99 == 2.0
    assert stages["node selected to helper done"].count == 1
    assert stages["node selected to helper done"].p50 == 0.5
    assert stages["helper done to PV created"].p50 == 0.5
    assert stages["node selected to PV created"].p50 == 1.0
    assert stages["node selected to PV created"].p99 == 2.0
    assert stages["PV created to Bound"].count == 1
    assert stages["PV created to Bound"].p50 == 3.0


def test_a_helper_pod_serves_the_volumes_its_name_carries() -> None:
    def pod(name: str) -> dict[str, object]:
        return {"metadata": {"name": name}}

    assert served_volumes(pod(f"helper-pod-create-pvc-{UID_A}")) == ("create", (UID_A,))
    assert served_volumes(pod(f"helper-pod-delete-pvc-{UID_B}")) == ("delete", (UID_B,))
    assert served_volumes(pod("unrelated")) == ("", ())
    batch = {
        "metadata": {
            "name": "helper-batch-create-0123456789abcdef0123",
            "annotations": {BATCH_VOLUMES_ANNOTATION: json.dumps([f"pvc-{UID_A}", f"pvc-{UID_B}"])},
        }
    }
    assert served_volumes(batch) == ("create", (UID_A, UID_B))


def test_the_lifted_scenario_runs_by_default_with_its_own_binder_limit() -> None:
    options = parse_options([])
    assert options.scenarios == frozenset({"burst", "lifted", "scale", "failover"})
    assert options.lifted_qps == 200
    assert parse_options(["--scenario", "burst"]).scenarios == frozenset({"burst"})
    assert parse_options(["--lifted-qps", "500"]).lifted_qps == 500


def test_lifted_rows_appear_only_when_the_scenario_ran() -> None:
    options = parse_options(["--scenario", "burst"])
    report = build_report(options, RunResults(), "python -m bench", 1.0)
    names = [row["figure"] for row in report["figures"]]
    assert not any("lifted" in name for name in names)
    goal = next(g for g in report["goals"] if g["goal"].startswith("lifted:"))
    assert goal["met"] is None and math.isnan(goal["value"])
    assert len({name for name, _, _ in LIFTED_FIGURES}) == len(LIFTED_FIGURES)
