"""The informer caches, as one value the local-path decisions and the node scan read.

Why a module of its own: `local_path_watches` builds the informers and the loop runs them; the
local-path provisioner and the leader's node scan only read them, and take this value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.kube.informer import Informer
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord, VolumeRecord


@dataclass(frozen=True)
class Caches:
    """The informers, read (never written) to decide."""

    claims: Informer[ClaimRecord]
    volumes: Informer[VolumeRecord]
    classes: Informer[StorageClassRecord]
    nodes: Informer[NodeRecord]
    helper_pods: Informer[dict[str, Any]]
