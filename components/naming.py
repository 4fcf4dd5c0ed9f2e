"""Names and labels shared by the components, the runtime's flags and the tests.

Kubernetes names here are fixed rather than auto-named: the runtime finds its ConfigMap and
helper service account by name, and users find the namespace and classes by name.
"""

from __future__ import annotations

from provisioner.configuration import defaults
from provisioner.version import VERSION

CONFIG_NAMESPACE = "local-path-storage"
"""The Pulumi config namespace: the project name, so `pulumi config set --path nodePathMap...`
needs no prefix and Pulumi.yaml can declare typed defaults for the keys."""

DEFAULT_NAMESPACE = "local-path-storage-system"
"""Not rancher's `local-path-storage`: this stack goes up beside a running
rancher/local-path-provisioner (the migration path) instead of failing with AlreadyExists on
its namespace. Rancher's other names are namespaced (its ConfigMap, service account) or
distinct (ClusterRole `local-path-provisioner-role`); the stacks' class names avoid its
`local-path`."""
IMAGE_REPOSITORY = "local-path-storage/provisioner"
"""The provisioner image's name, as `make image` (scripts/build_image.py) tags it."""
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{VERSION}"
"""The image of this release: its tag is pyproject.toml's version, as `make image` writes it."""
DEFAULT_PROVISIONER_NAME = defaults.PROVISIONER_NAME

CONFIG_MAP_NAME = defaults.CONFIG_MAP_NAME
"""rancher's ConfigMap name and file names, so its users find config.json where they expect it;
in the installation's own namespace, so it never meets rancher's."""
METRICS_SERVICE_NAME = "local-path-storage-metrics"
"""The metrics Service (and its ServiceMonitor), when the stack asks for them."""
CONFIG_DIRECTORY = "/etc/config"
"""Where the ConfigMap is mounted (as a directory: kubelet's symlink swap makes updates
visible to the runtime's hot reload)."""
PROVISIONER_SERVICE_ACCOUNT = "local-path-storage-provisioner"
PROVISIONER_COMMAND = "local-path-storage-provisioner"
"""The image's entrypoint: the provisioner, and with `csi-node-plugin` the node plugin."""
HELPER_SERVICE_ACCOUNT = defaults.HELPER_SERVICE_ACCOUNT
"""Helper pods run under this account: no rights, no token mounted."""

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
DEFAULT_VOLUME_TYPE_ANNOTATION = "defaultVolumeType"

APP_NAME = "local-path-storage"
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"
"""Set to privileged on a namespace the stack creates: helper pods mount hostPath volumes."""

FIELD_OWNERSHIP_ANNOTATIONS = {"pulumi.com/patchForce": "true"}
"""On every object the stack declares: the provider's documented way to take back fields that
another field manager (a `kubectl edit`, a hand-made patch) changed out of band, so a drifted
stack is repaired by one `pulumi up` instead of failing on a server-side-apply conflict."""

FOREGROUND_DELETION_ANNOTATIONS = {"pulumi.com/deletionPropagationPolicy": "foreground"}
"""The kubernetes provider then deletes with foreground propagation and waits for the object
to be gone: a Deployment is gone only once its ReplicaSets and pods are (pods after their
graceful stop, which releases the Lease). The provider's default today, written down because
the Deployment's delete-before-replace depends on it."""


def cluster_scoped_name(namespace: str) -> str:
    """Name of the ClusterRole and ClusterRoleBinding: one pair per installation namespace, so
    two installations (say, a canary) in one cluster do not overwrite each other's."""
    return f"{namespace}:provisioner"


def selector_labels(instance: str) -> dict[str, str]:
    """Labels that select the provisioner's pods (immutable once the Deployment exists)."""
    return {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": instance}


def labels(instance: str, component: str) -> dict[str, str]:
    """Labels on every object of one installation: the recommended app.kubernetes.io set."""
    return {
        **selector_labels(instance),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": APP_NAME,
        "app.kubernetes.io/managed-by": "pulumi",
    }
