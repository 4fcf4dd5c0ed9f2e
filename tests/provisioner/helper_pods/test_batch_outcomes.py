"""Each volume's outcome read from a batch pod as last seen (statuses in a kubelet's shape)."""

from __future__ import annotations

from typing import Any

from provisioner.helper_pods.batch_outcomes import (
    VolumeOutcome,
    batch_outcomes,
    settled_before_the_end,
)

NAMES = ["pvc-0", "pvc-1", "pvc-2"]


def terminated(exit_code: int, message: str = "", reason: str = "") -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": exit_code, "reason": reason or "Completed"}
    if message:
        state["message"] = message
    return {"terminated": state}


def pod(
    inits: list[dict[str, Any] | None],
    main: dict[str, Any] | None = None,
    *,
    action: str = "create",
    phase: str = "Succeeded",
) -> dict[str, Any]:
    prefix = "setup" if action == "create" else "teardown"
    return {
        "status": {
            "phase": phase,
            "initContainerStatuses": [
                {
                    "name": f"{prefix}-{i}",
                    "state": state or {"waiting": {"reason": "PodInitializing"}},
                }
                for i, state in enumerate(inits)
            ],
            "containerStatuses": [
                {"name": "finish", "state": main or {"waiting": {"reason": "PodInitializing"}}}
            ],
        }
    }


def test_each_setup_has_the_outcome_its_wrapper_reported() -> None:
    seen = pod(
        [
            terminated(0, "lps-exit 0\nmade it\n"),
            terminated(0, "lps-exit 3\nno room for it\n"),
            terminated(0, "lps-exit 124\ntimed out after 90s\n"),
        ],
        terminated(0, "lps-finish soo\n"),
    )
    assert batch_outcomes("create", seen, NAMES, unfinished="?") == [
        VolumeOutcome("pvc-0", True, "setup-0", 0, "Completed", "made it\n"),
        VolumeOutcome("pvc-1", False, "setup-1", 3, "Error", "no room for it\n"),
        VolumeOutcome("pvc-2", False, "setup-2", 124, "DeadlineExceeded", "timed out after 90s\n"),
    ]


def test_a_teardown_succeeds_only_once_its_finish_did() -> None:
    seen = pod(
        [
            terminated(0, "lps-exit 0\n"),
            terminated(0, "lps-exit 0\n"),
            terminated(0, "lps-exit 2\nrm: busy\n"),
        ],
        terminated(0, "lps-finish ofs\n1 1 refusing /a/b: the teardown left 2 entries in it \n"),
        action="delete",
    )
    outcomes = batch_outcomes("delete", seen, NAMES, unfinished="?")
    assert outcomes[0] == VolumeOutcome("pvc-0", True, "finish", 0, "Completed")
    assert outcomes[1] == VolumeOutcome(
        "pvc-1", False, "finish", 1, "Error", "refusing /a/b: the teardown left 2 entries in it "
    )
    assert outcomes[2] == VolumeOutcome("pvc-2", False, "teardown-2", 2, "Error", "rm: busy\n")


def test_volumes_the_pod_never_got_to_fail_with_why() -> None:
    """The pod's deadline killed the second volume's container; the third never started and
    the finish step never ran, so no teardown counts as done."""
    seen = pod(
        [
            terminated(0, "lps-exit 0\n"),
            terminated(137, "", reason="Error"),
            None,
        ],
        action="delete",
        phase="Failed",
    )
    outcomes = batch_outcomes("delete", seen, NAMES, unfinished="the pod ended first")
    assert outcomes == [
        VolumeOutcome("pvc-0", False, "finish", None, "NotRun", "the pod ended first"),
        VolumeOutcome("pvc-1", False, "teardown-1", 137, "Error", ""),
        VolumeOutcome("pvc-2", False, "teardown-2", None, "NotRun", "the pod ended first"),
    ]


def test_a_container_that_reported_nothing_fails_its_volume() -> None:
    seen = pod([terminated(0, "whatever"), terminated(0, "lps-exit x")])
    outcomes = batch_outcomes("create", seen, NAMES[:2], unfinished="?")
    assert [o.reason for o in outcomes] == ["NoOutcome", "NoOutcome"]
    assert not any(o.succeeded for o in outcomes)


def test_a_pod_with_no_status_yet_has_no_outcome_for_any_volume() -> None:
    outcomes = batch_outcomes("create", {}, NAMES, unfinished="it could not start")
    assert [(o.succeeded, o.reason, o.message) for o in outcomes] == [
        (False, "NotRun", "it could not start")
    ] * 3


def test_a_failed_finish_whose_line_was_cut_off_still_fails_its_volume() -> None:
    seen = pod(
        [terminated(0, "lps-exit 0\n"), terminated(0, "lps-exit 0\n")],
        terminated(0, "lps-finish of\n"),
        action="delete",
    )
    outcomes = batch_outcomes("delete", seen, NAMES[:2], unfinished="?")
    assert outcomes[0].succeeded
    assert outcomes[1] == VolumeOutcome(
        "pvc-1", False, "finish", None, "Error", "its output did not fit in the message"
    )


def test_a_running_pod_has_settled_only_the_setups_whose_own_container_reported_success() -> None:
    """Those may get their PVs while the pod goes on; a failed one waits for its finish step,
    a still-running or cut-off one for the pod's end."""
    running = {"running": {"startedAt": "2026-11-25T06:00:00Z"}}
    seen = pod(
        [terminated(0, "lps-exit 0\nmade it\n"), terminated(0, "lps-exit 1\nno\n"), running],
        phase="Pending",
    )
    assert settled_before_the_end("create", seen, NAMES) == [
        VolumeOutcome("pvc-0", True, "setup-0", 0, "Completed", "made it\n")
    ]
    cut_off = pod([terminated(137, "", "Error"), terminated(0, "no outcome line")], phase="Pending")
    assert settled_before_the_end("create", cut_off, NAMES) == []
    assert settled_before_the_end("create", {}, NAMES) == []


def test_no_teardown_is_settled_before_its_pod_s_finish_step() -> None:
    seen = pod([terminated(0, "lps-exit 0\n")] * 3, action="delete", phase="Pending")
    assert settled_before_the_end("delete", seen, NAMES) == []
