"""The cluster's temporary directory, and the clean-up of ones whose owner was killed.

Why: a stopped cluster removes its directory, but a harness killed with SIGKILL cannot (its
components die with it through their parent-death signal; its files stay). Each directory
records its owner's PID and start time, and every new cluster removes the directories whose
owner is gone, so repeated runs on one machine do not pile up etcd data.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from localcluster.processes import is_same_process_alive, process_start_time

PREFIX = "lps-cluster-"
OWNER_FILE = "owner.json"


def pod_log_path(cluster_dir: Path, namespace: str, name: str, uid: str) -> Path:
    """Where the full output of one pod run by the harness is kept (every restart appended)."""
    return cluster_dir / "pod-logs" / f"{namespace}_{name}_{uid}.log"


def init_container_log_path(
    cluster_dir: Path, namespace: str, name: str, uid: str, container: str
) -> Path:
    """Where one init container's output is kept: apart from the main container's, as a
    kubelet keeps each container's log (its termination message is its own log tail)."""
    return cluster_dir / "pod-logs" / f"{namespace}_{name}_{uid}.init-{container}.log"


def make_cluster_dir(parent: Path | None) -> Path:
    """A new, empty cluster directory with an owner record."""
    directory = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    owner = {"pid": os.getpid(), "start_time": process_start_time(os.getpid())}
    (directory / OWNER_FILE).write_text(json.dumps(owner), encoding="utf-8")
    return directory


def remove_abandoned_cluster_dirs(parent: Path | None) -> list[Path]:
    """Removes cluster directories under `parent` whose owning process no longer runs."""
    removed = []
    for directory in Path(parent or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            owner = json.loads((directory / OWNER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not ours, or kept logs of a failed start: leave it
        if not is_same_process_alive(int(owner["pid"]), owner.get("start_time")):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed
