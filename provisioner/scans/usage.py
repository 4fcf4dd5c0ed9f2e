"""Measured usage, where no quota enforces a volume's size: a helper per node sums each volume's
blocks (`du -skx`: never following a symbolic link, never crossing into another filesystem)
and the provisioner compares them with the PV's capacity. Pure: the script, its batches and
what its output means; node_scan.py runs it.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.configuration.config import ConfigBundle
from provisioner.helper_pods.pod_shapes import BASE_VOLUME, HELPER_ACTION_LABEL, helper_pod_frame
from provisioner.objects.records import VolumeRecord, quantity_to_bytes
from provisioner.provisioning.paths import is_strictly_inside
from provisioner.scans.node_scripts import RESULT_PATH

BATCH_SIZE = 200
"""Volumes per helper: each answer line (`INDEX KIB`) is at most 19 bytes, and the kubelet
keeps 4096 bytes of a termination message."""

# LPS_VOLUMES: paths relative to LPS_BASE (mounted read-only at its own path), one per line.
# Prints `INDEX KIB` per volume, or `INDEX -` when it is not a plain directory reached without
# a symbolic link; then `end`.
USAGE_SCRIPT = """\
set -u
NL='
'
out="$LPS_RESULT"
: > "$out"
index=0
rest="${LPS_VOLUMES:-}"
while [ -n "$rest" ]; do
  rel="${rest%%"$NL"*}"
  if [ "$rel" = "$rest" ]; then rest=""; else rest="${rest#*"$NL"}"; fi
  dir="$LPS_BASE"
  path="$rel"
  size=-
  while [ -n "$path" ]; do
    part="${path%%/*}"
    if [ "$part" = "$path" ]; then path=""; else path="${path#*/}"; fi
    dir="$dir/$part"
    if [ -L "$dir" ] || [ ! -d "$dir" ]; then dir=""; break; fi
  done
  if [ -n "$dir" ]; then
    size="$(du -skx -- "$dir" 2>/dev/null | awk 'END { print $1 }')"
    size="${size:--}"
  fi
  echo "$index $size" >> "$out"
  index=$((index + 1))
done
echo end >> "$out"
"""


@dataclass(frozen=True, slots=True)
class MeasuredVolume:
    volume_name: str
    node: str
    storage_class: str
    path: str
    capacity_bytes: int | None
    used_bytes: int | None
    """None: not found as a plain directory."""

    @property
    def outgrown(self) -> bool:
        return (
            self.used_bytes is not None
            and self.capacity_bytes is not None
            and self.used_bytes > self.capacity_bytes
        )


def capacity_bytes(volume: VolumeRecord) -> int | None:
    try:
        return quantity_to_bytes(volume.capacity) if volume.capacity else None
    except ValueError:
        return None


def batches(
    volumes: Sequence[VolumeRecord], base_path: str, size: int = BATCH_SIZE
) -> list[list[VolumeRecord]]:
    """Our volumes inside base_path, in batches one helper answers for."""
    inside = sorted(
        (v for v in volumes if v.path and is_strictly_inside(v.path, base_path)),
        key=lambda v: v.name,
    )
    return [inside[i : i + size] for i in range(0, len(inside), size)]


def parse_usage(text: str, node: str, batch: Sequence[VolumeRecord]) -> list[MeasuredVolume] | None:
    """None when the answer is incomplete or does not match the batch."""
    lines = [line for line in text.split("\n") if line]
    if not lines or lines[-1] != "end" or len(lines) != len(batch) + 1:
        return None
    measured = []
    for number, (line, volume) in enumerate(zip(lines[:-1], batch, strict=True)):
        index, _, kib = line.partition(" ")
        if index != str(number) or not (kib == "-" or kib.isdigit()):
            return None
        measured.append(
            MeasuredVolume(
                volume_name=volume.name,
                node=node,
                storage_class=volume.storage_class_name,
                path=volume.path or "",
                capacity_bytes=capacity_bytes(volume),
                used_bytes=None if kib == "-" else int(kib) * 1024,
            )
        )
    return measured


def build_usage_pod(
    bundle: ConfigBundle,
    namespace: str,
    service_account: str,
    *,
    node: str,
    base_path: str,
    batch: Iterable[VolumeRecord],
) -> dict[str, Any]:
    relative = [posixpath.relpath(v.path or "", base_path) for v in batch]
    digest = hashlib.sha256("\x00".join([node, base_path, *relative]).encode()).hexdigest()[:16]
    pod = helper_pod_frame(
        bundle,
        namespace,
        service_account,
        name=f"helper-usage-{digest}",
        labels={HELPER_ACTION_LABEL: "usage"},
        node_name=node,
    )
    spec = pod["spec"]
    spec["volumes"] = [
        {"name": BASE_VOLUME, "hostPath": {"path": base_path, "type": "Directory"}},
    ]
    container = spec["containers"][0]
    container["volumeMounts"] = [{"name": BASE_VOLUME, "mountPath": base_path, "readOnly": True}]
    container["command"], container["args"] = ["/bin/sh", "-c", USAGE_SCRIPT, "usage"], []
    env = {"LPS_BASE": base_path, "LPS_VOLUMES": "\n".join(relative), "LPS_RESULT": RESULT_PATH}
    kept = [e for e in container.get("env") or () if e.get("name") not in env]
    container["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]
    container["terminationMessagePath"] = RESULT_PATH
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return pod


def outgrown_message(volume: MeasuredVolume) -> str:
    return (
        f"volume {volume.volume_name} on {volume.node} uses {volume.used_bytes} bytes, more than"
        f" its capacity of {volume.capacity_bytes} bytes (no quota enforces it on this"
        " filesystem): free space in it, or move the data to a larger claim"
    )


def by_node(
    volumes: Iterable[VolumeRecord], node_of: Mapping[str, str | None]
) -> dict[str, list[VolumeRecord]]:
    grouped: dict[str, list[VolumeRecord]] = {}
    for volume in volumes:
        node = node_of.get(volume.name)
        if node:
            grouped.setdefault(node, []).append(volume)
    return grouped
