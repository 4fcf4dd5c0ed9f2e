"""The Pulumi package: one component, LocalPathStorage, for every Pulumi language.

`pulumi package add <this repository>` runs the root `__main__.py` as a plugin, which calls
`host_provider()`: the Python SDK's component provider host infers the schema from the
annotations here and in package_args.py, and constructs LocalPathStorage for any SDK's
program. Its args are Inputs; they are resolved first and then parsed by the stack's own
`parse_settings`, so the one-line errors are the stack's (docs/pulumi-package.md).

This module keeps its annotations evaluated (no `from __future__ import annotations`): the
host reads them with `inspect.get_annotations`.
"""

from typing import Any

import pulumi
from pulumi.provider.experimental import component_provider_host

from components import naming
from components.deployment import ProvisionerDeployment
from components.package_args import LocalPathStorageArgs, settings_from_resolved_args
from components.storage_classes import StorageClasses
from provisioner.version import VERSION

TYPE_TOKEN = f"{naming.CONFIG_NAMESPACE}:index:LocalPathStorage"
PACKAGE_VERSION = VERSION
"""The schema's version, which the generated SDKs carry: the product's (pyproject.toml's)."""


class LocalPathStorage(pulumi.ComponentResource):
    """The local-path-storage provisioner with its namespace, RBAC, ConfigMap, Deployment and
    StorageClasses, from the same settings as a stack of this repository."""

    namespace: pulumi.Output[str]
    """The namespace the provisioner runs in."""
    provisioner_name: pulumi.Output[str]
    """The provisioner name its StorageClasses use."""
    config_map_name: pulumi.Output[str]
    """The ConfigMap holding config.json, the scripts and helperPod.yaml."""
    storage_class_names: pulumi.Output[list[str]]
    """The StorageClasses it serves."""

    def __init__(
        self, name: str, args: LocalPathStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        # Resources are declared once every arg is known: the graph (which objects, their
        # names) depends on the settings. Unknown args in a preview therefore show the
        # component alone; docs/pulumi-package.md has the plain "shape" args that lift this.
        built = pulumi.Output.from_input(dict(args)).apply(
            lambda resolved: self._build(name, resolved)
        )
        self.namespace = built.apply(lambda children: children[0].namespace)
        self.provisioner_name = built.apply(lambda children: children[0].provisioner_name)
        self.config_map_name = built.apply(lambda children: children[0].config_map_name)
        self.storage_class_names = built.apply(lambda children: children[1].class_names)
        self.register_outputs(
            {
                "namespace": self.namespace,
                "provisionerName": self.provisioner_name,
                "configMapName": self.config_map_name,
                "storageClassNames": self.storage_class_names,
            }
        )

    def _build(
        self, name: str, resolved: dict[str, Any]
    ) -> tuple[ProvisionerDeployment, StorageClasses]:
        settings = settings_from_resolved_args(resolved)
        for warning in settings.warnings:
            pulumi.log.warn(warning, resource=self)
        children = pulumi.ResourceOptions(parent=self)
        deployment = ProvisionerDeployment(name, settings.deployment, children)
        classes = StorageClasses(name, settings.storage_classes, children)
        return deployment, classes


def host_provider() -> None:
    """Serves the package to the engine (the root `__main__.py`, run as a plugin)."""
    component_provider_host(
        components=[LocalPathStorage], name=naming.CONFIG_NAMESPACE, version=PACKAGE_VERSION
    )
