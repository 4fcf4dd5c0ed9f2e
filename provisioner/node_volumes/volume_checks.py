"""Whether this node plugin may act on a volume's directory at all: pure.

Checked before any lock is taken or any process runs. The directory the PV's volume attribute
names must be the one its setup (or the gate's permit) names, lexically normal, and strictly
inside one of the base paths config.json gives this node; a setup's own base path must be that
very base path. So no PV, whatever it carries, leads the plugin outside its node's base paths.
A base path missing on the node is made only where config.json lets it be (`"create": true`).
"""

from __future__ import annotations

from collections.abc import Iterable

from provisioner.configuration.config import BasePathRules
from provisioner.csi.node_paths import is_normal_absolute, parts_below
from provisioner.objects.node_handoff import NodeCloneSource
from provisioner.provisioning.paths import is_strictly_inside


def path_refusal(
    volume_path: str, named_path: str, base_path: str | None, node_base_paths: Iterable[str]
) -> str | None:
    """None when `volume_path` (the PV's volume attribute) may be acted on, given the path the
    setup or permit names (`named_path`) and, for a setup, its base path; else why not."""
    if volume_path != named_path:
        return (
            f"the PV's directory {volume_path!r} is not the one its hand-off names ({named_path!r})"
        )
    if not is_normal_absolute(volume_path):
        return f"{volume_path!r} is not an absolute path without '.', '..', '//' or a trailing '/'"
    listed = list(node_base_paths)
    inside = [base for base in listed if parts_below(base, volume_path)]
    if not inside:
        return (
            f"{volume_path} is not inside a base path of this node ({', '.join(listed) or 'none'})"
        )
    if base_path is not None and base_path not in inside:
        return f"its setup names the base path {base_path!r}, not {' or '.join(inside)}"
    return None


def missing_base_path_refusal(base_path: str, rules: BasePathRules) -> str | None:
    """For a base path that is not on the node at all: None when the plugin makes it, as the
    kubelet makes a helper pod's base path (a `DirectoryOrCreate` hostPath, config.json's
    `"create": true`); else why the volume cannot be set up there (yet)."""
    if rules.mount_point:
        return (
            f"base path {base_path} does not exist on this node: config.json says a disk is"
            " mounted there (mountPoint): mount it; such a path is never made"
        )
    if not rules.create:
        return (
            f"base path {base_path} does not exist on this node and config.json does not let it"
            ' be made ("create": true): make it, or mount its disk there'
        )
    return None


def clone_source_refusal(
    volume_name: str,
    volume_path: str,
    source: NodeCloneSource,
    node_base_paths: Iterable[str],
) -> str | None:
    """For a clone's setup: None when its source's directory may be read at all, checked
    before any lock as the volume's own path is; else why not. The source must be another
    volume, its directory lexically normal and strictly inside the base path the setup names
    for it, one of this node's; and neither directory inside the other (a copy into its own
    source would never end, a source inside the new directory would be emptied with it)."""
    named = f"the clone's source {source.volume_name} ({source.path})"
    if source.volume_name == volume_name:
        return f"{named} is the volume itself"
    refusal = path_refusal(source.path, source.path, source.base_path, node_base_paths)
    if refusal is not None:
        return f"{named}: {refusal}"
    if source.path == volume_path or is_strictly_inside(volume_path, source.path):
        return f"{named} holds the new directory {volume_path}"
    if is_strictly_inside(source.path, volume_path):
        return f"{named} is inside the new directory {volume_path}"
    return None
