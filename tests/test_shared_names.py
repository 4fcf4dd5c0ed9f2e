"""Names two parts must agree on without importing each other (docs/CONTRACTS.md)."""

import localcluster
from provisioner.core import helpers


def test_the_harness_runs_exactly_the_pods_the_provisioner_marks_as_helpers() -> None:
    assert (localcluster.HELPER_POD_LABEL, localcluster.HELPER_POD_LABEL_VALUE) == (
        helpers.HELPER_POD_LABEL,
        helpers.HELPER_POD_LABEL_VALUE,
    )
