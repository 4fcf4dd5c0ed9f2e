"""What the node plugin runs to make and remove a CSI volume's directory: pure.

The same fixed scripts and the same setup and teardown code, with the same environment, as a
helper pod's containers get (`pod_shapes.step_command`, the one source of both), run on the
node as plain processes instead. Two differences, both forced by where they run:

- the guard sees the base path at its own path (the node plugin mounts every base path of its
  node at the path it has on the node), not at a pod's read-only BASE_VIEW;
- `prepare` always runs first. A helper pod may skip it for a directory named for its volume
  directly in its base path, because there the kubelet makes the directory (a hostPath
  `DirectoryOrCreate`); on the node nobody else makes it, and `prepare` makes it one component
  at a time without following a link, and writes the owner marker.

A teardown runs the teardown code, then `finish` only if that succeeded, both with the owner
check of the gate's permit as the PV carries it (`NodeRemoval`). A setup that failed runs
`finish` with the gate's permit for that clean-up, which the controller wrote in the setup
(`failed_setup_clean_up`); without one the directory stays for the retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.pod_shapes import (
    HelperStep,
    owner_check_environment,
    step_command,
)
from provisioner.node_volumes.sandbox import View
from provisioner.objects.node_handoff import NodeRemoval, VolumeSetup
from provisioner.provisioning.paths import is_strictly_inside
from provisioner.provisioning.removal_gate import OwnerCheck

NodeAction = Literal["create", "delete"]


@dataclass(frozen=True)
class VolumeTarget:
    """A CSI volume as the steps see it (a pod_shapes.HelperTarget): its PV's name, its node
    and what its `VolumeSetup` says."""

    volume_name: str
    node_name: str | None
    path: str
    base_path: str
    volume_mode: str
    size_bytes: int
    vol_user: str = ""
    vol_group: str = ""
    vol_perm: str = ""
    reuse_existing_data: bool = False

    @staticmethod
    def of(volume_name: str, node_name: str, setup: VolumeSetup) -> VolumeTarget:
        return VolumeTarget(
            volume_name=volume_name,
            node_name=node_name,
            path=setup.path,
            base_path=setup.base_path,
            volume_mode=setup.volume_mode,
            size_bytes=setup.size_bytes,
            vol_user=setup.vol_user,
            vol_group=setup.vol_group,
            vol_perm=setup.vol_perm,
            reuse_existing_data=setup.reuse_existing_data,
        )


@dataclass(frozen=True)
class NodeStep:
    """One process: its step's name, its argv, its whole environment and what it sees of the
    node (nothing by default)."""

    name: HelperStep
    argv: tuple[str, ...]
    env: Mapping[str, str]
    view: View = field(default_factory=View)


def node_steps(
    action: NodeAction,
    target: VolumeTarget,
    bundle: ConfigBundle,
    *,
    removal: NodeRemoval | None = None,
) -> tuple[NodeStep, ...]:
    """The steps of `action`, in order, each to run only if the one before it succeeded. A
    `delete` is built only with the permit for this very volume and path (ValueError else)."""
    if not target.base_path or not is_strictly_inside(target.path, target.base_path):
        raise ValueError(
            f"volume path {target.path!r} is not strictly inside its base path {target.base_path!r}"
        )
    if action == "create":
        return (_step("prepare", target, bundle, {}), _step("create", target, bundle, {}))
    if removal is None or removal.volume_name != target.volume_name or removal.path != target.path:
        raise ValueError(
            f"the teardown of volume {target.volume_name} removes {target.path}: it is built"
            " only with the removal gate's permit for that volume and path"
        )
    check = owner_check_environment(
        OwnerCheck(owner=removal.owner, made_only=removal.made_only, absent_ok=removal.absent_ok)
    )
    return (_step("delete", target, bundle, check), _step("finish", target, bundle, check))


def subvolume_steps(
    target: VolumeTarget, bundle: ConfigBundle, *, node_made: bool
) -> tuple[NodeStep, NodeStep]:
    """A volume whose directory is a btrfs subvolume the plugin makes itself (volume_layout):
    `prepare` as `node_steps` has it, told whether the plugin made the directory just now
    (`node_made`: the owner marker then says made, as a `mkdir` of `prepare` would have it),
    then `create`. `parents_step` comes before the subvolume is made."""
    prepare, create = node_steps("create", target, bundle)
    if node_made:
        prepare = NodeStep(
            prepare.name, prepare.argv, {**prepare.env, NODE_MADE: "yes"}, prepare.view
        )
    return prepare, create


def parents_step(target: VolumeTarget, bundle: ConfigBundle) -> NodeStep:
    """`prepare` making and checking every parent of the volume's directory, not the directory
    itself, one component at a time without following a link (the plugin makes the last
    component as a subvolume through its parent's descriptor; `subvolume_steps` follows)."""
    prepare, _ = node_steps("create", target, bundle)
    return NodeStep(prepare.name, prepare.argv, {**prepare.env, PARENTS_ONLY: "yes"}, prepare.view)


NODE_MADE = "LPS_NODE_MADE"
PARENTS_ONLY = "LPS_PARENTS_ONLY"
"""The environment of `prepare`'s two node-only modes (pod_shapes.PREPARE_SCRIPT)."""


def failed_setup_clean_up(
    target: VolumeTarget, bundle: ConfigBundle, clean_up: NodeRemoval | None
) -> tuple[NodeStep, ...]:
    """After a setup that failed, `finish` with the gate's permit for that clean-up (written
    by the controller in the setup, `VolumeSetup.clean_up`): it removes the directory only
    while it is empty and its owner marker says what the permit asks (made by this volume).
    () without a permit covering this volume and path: the directory stays, and a retry uses
    it (the gate gives none to a class that hands existing data over)."""
    if clean_up is None or (clean_up.volume_name, clean_up.path) != (
        target.volume_name,
        target.path,
    ):
        return ()
    check = owner_check_environment(
        OwnerCheck(owner=clean_up.owner, made_only=clean_up.made_only, absent_ok=clean_up.absent_ok)
    )
    return (_step("finish", target, bundle, check),)


def _step(
    step: HelperStep, target: VolumeTarget, bundle: ConfigBundle, removal: Mapping[str, str]
) -> NodeStep:
    command, args, env = step_command(
        step, target, bundle, removal=removal, base_view=target.base_path
    )
    # The base path read-write, as a helper pod's container has it, and nothing else of the
    # node: every step, a teardown's and `finish` too, acts only inside it.
    return NodeStep(step, (*command, *args), env, View(read_write=(target.base_path,)))


GNU_CP = "/bin/cp"
"""GNU cp (coreutils) by its own path: a step's PATH starts with the shell directory, whose
busybox `cp` has neither `--reflink` nor `--sparse` (see clone_step.py for why both). /bin/cp,
where Debian's coreutils package puts it: the image has it there (no merged /usr), and on a
merged-/usr node /bin leads to /usr/bin, which the step's view binds too."""


def clone_step(source_path: str, target_path: str) -> NodeStep:
    """The copy of a clone's source into its new directory, as the helper pod's `clone`
    container makes it (clone_step.py: `cp -a`, links kept as links and never followed,
    owners, modes, times, hard links; extents shared where the filesystem can; holes kept).
    `<source>/.` into `<target>/`: the source's contents, dot files too, and its own modes on
    the new directory, as `cp -a -T` does in the pod.

    It sees only the two directories, as the pod's `clone` container does: the source's
    contents are hostile, and its consumer keeps running during the copy, free to swap a
    directory for a symbolic link under cp; whatever such a link leads to resolves inside
    the step's view, where nothing but the source (read-only) and the new directory is."""
    return NodeStep(
        "clone",
        (GNU_CP, "-a", "--reflink=auto", "--sparse=auto", f"{source_path}/.", f"{target_path}/"),
        {},
        View(read_write=(target_path,), read_only=(source_path,)),
    )


def snapshot_removal_step(area: str, snapshot_path: str) -> NodeStep:
    """The removal of a copied snapshot (its owner check done, under its lock, with the gate's
    permit), named `finish` as the step that removes a volume's directory is. It sees only the
    base path's snapshot area: the copy holds a tenant's data, links included, and whatever a
    link there leads to resolves inside the view, where nothing but snapshots is. (A btrfs
    snapshot goes by the kernel's SNAP_DESTROY instead.)"""
    return NodeStep("finish", ("rm", "-rf", snapshot_path), {}, View(read_write=(area,)))
