"""Names two parts must agree on without importing each other (docs/CONTRACTS.md)."""

import localcluster
from components import naming
from provisioner.helper_pods import pod_shapes as helpers
from provisioner.scans import orphans_cli


def test_the_harness_runs_exactly_the_pods_the_provisioner_marks_as_helpers() -> None:
    assert (localcluster.HELPER_POD_LABEL, localcluster.HELPER_POD_LABEL_VALUE) == (
        helpers.HELPER_POD_LABEL,
        helpers.HELPER_POD_LABEL_VALUE,
    )


def test_the_orphans_command_looks_where_the_stacks_install_by_default() -> None:
    assert orphans_cli.DEFAULT_STACK_NAMESPACE == naming.DEFAULT_NAMESPACE
    assert orphans_cli.parse_orphan_options([], environ={}).namespace == naming.DEFAULT_NAMESPACE


def test_the_harness_runs_the_image_the_stack_deploys() -> None:
    """The harness cannot import the components' names (it stands in for any cluster)."""
    assert localcluster.image_table.PROVISIONER_IMAGE_REPOSITORY == naming.IMAGE_REPOSITORY
