"""The StorageClasses a provisioner serves.

Kubernetes refuses updates to a class's parameters, provisioner, reclaimPolicy and
volumeBindingMode. Declaring them replace-on-change makes `pulumi preview` show a
replacement instead of an update that fails at apply time; since the name is fixed, the old
class must go before the new one is created. Existing volumes keep working across the swap:
a PersistentVolume holds everything it needs, and claims refer to the class only by name.

An adopted class (stack config `adopt`: rancher's) is imported, then updated in place (labels,
annotations); it is never deleted by the stack, so destroying it or ending the adoption leaves
the class that rancher's volumes name. A difference in an immutable field would be a
replacement: with the class kept on delete, its creation fails on the existing name instead.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as kubernetes

from components import naming, snapshot_classes
from components.args import SnapshotClassArgs, StorageClassesArgs, TopologyTerm
from components.node_plugin import driver_name
from components.plain_args import refuse_outputs

IMMUTABLE_FIELDS = ("parameters", "provisioner", "reclaimPolicy", "volumeBindingMode")
"""StorageClass fields Kubernetes refuses to update in place."""


def _topology_term(term: TopologyTerm) -> kubernetes.core.v1.TopologySelectorTermArgsDict:
    return {
        "match_label_expressions": [
            {"key": expression.key, "values": list(expression.values)} for expression in term
        ]
    }


def _class_options(parent: pulumi.Resource, name: str, adopted: bool) -> pulumi.ResourceOptions:
    if adopted:
        # Once in the stack's state, the import option is a no-op on later updates.
        return pulumi.ResourceOptions(
            parent=parent,
            import_=name,
            retain_on_delete=True,
            replace_on_changes=list(IMMUTABLE_FIELDS),
        )
    return pulumi.ResourceOptions(
        parent=parent, replace_on_changes=list(IMMUTABLE_FIELDS), delete_before_replace=True
    )


class VolumeSnapshotClass(pulumi.CustomResource):
    """A snapshot.storage.k8s.io/v1 VolumeSnapshotClass: the SDK's CustomResource takes only a
    spec, and this kind's fields (driver, deletionPolicy) are top-level."""

    def __init__(self, name: str, body: dict[str, object], opts: pulumi.ResourceOptions) -> None:
        super().__init__(
            f"kubernetes:{snapshot_classes.API_VERSION}:{snapshot_classes.KIND}", name, body, opts
        )


class StorageClasses(pulumi.ComponentResource):
    """One StorageClass per entry of the stack config's storageClasses."""

    class_names: pulumi.Output[list[str]]
    """The names of the classes, in stack-config order."""

    def __init__(
        self,
        name: str,
        args: StorageClassesArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        refuse_outputs(args)
        super().__init__("local-path-storage:index:StorageClasses", name, None, opts)
        names = []
        for storage_class in args.classes:
            resource = kubernetes.storage.v1.StorageClass(
                f"{name}-{storage_class.name}",
                metadata={
                    "name": storage_class.name,
                    "labels": {**args.common_labels, **naming.labels(name, "storageclass")},
                    "annotations": {
                        **storage_class.all_annotations(),
                        **naming.FIELD_OWNERSHIP_ANNOTATIONS,
                    },
                },
                provisioner=args.provisioner_name,
                reclaim_policy=storage_class.reclaim_policy,
                volume_binding_mode=storage_class.volume_binding_mode,
                parameters=storage_class.all_parameters(),
                # The runtime grants an expansion when the volume's path has room.
                allow_volume_expansion=storage_class.allow_volume_expansion,
                allowed_topologies=[_topology_term(t) for t in storage_class.allowed_topologies]
                or None,
                mount_options=list(storage_class.mount_options) or None,
                opts=_class_options(self, storage_class.name, storage_class.name in args.adopted),
            )
            names.append(resource.metadata.name)
        self._snapshot_classes(name, args)
        self.class_names = pulumi.Output.all(*names).apply(lambda values: [str(v) for v in values])
        self.register_outputs({"class_names": self.class_names})

    def _snapshot_classes(self, name: str, args: StorageClassesArgs) -> None:
        """The csi classes' VolumeSnapshotClasses. Applying to a cluster, the stack first reads
        the VolumeSnapshotClass CRD: a cluster without the snapshot API fails preview on that
        read (naming the CRD), before anything is changed, instead of failing the update
        halfway. Rendering, there is no cluster to ask."""
        wanted: dict[str, SnapshotClassArgs] = {
            c.name: c.snapshot_class for c in args.classes if c.snapshot_class is not None
        }
        if not wanted:
            return
        depends_on: list[pulumi.Resource] = []
        if args.look_up_snapshot_crd:
            depends_on.append(
                kubernetes.apiextensions.v1.CustomResourceDefinition.get(
                    f"{name}-volumesnapshotclass-crd",
                    snapshot_classes.CRD_NAME,
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        driver = driver_name(args.provisioner_name)
        labels = {**args.common_labels, **naming.labels(name, "snapshotclass")}
        for class_name, snapshot_class in wanted.items():
            VolumeSnapshotClass(
                f"{name}-{class_name}-snapshotclass",
                snapshot_classes.volume_snapshot_class(
                    snapshot_class,
                    driver,
                    labels,
                    naming.FIELD_OWNERSHIP_ANNOTATIONS,
                ),
                pulumi.ResourceOptions(parent=self, depends_on=depends_on),
            )
