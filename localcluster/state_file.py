"""The record a background cluster leaves for `python -m localcluster stop|status`.

Why: `start` returns while the cluster keeps running in a detached supervisor process; a later
command must find that supervisor and every component by PID (with its kernel start time, so a
reused PID is never signalled) to stop them, even if the supervisor itself has died.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from localcluster.binaries import cache_root


@dataclass(frozen=True)
class RecordedProcess:
    name: str
    pid: int
    start_time: int | None


@dataclass(frozen=True)
class ClusterState:
    name: str
    supervisor: RecordedProcess
    cluster_dir: str = ""
    kubeconfig: str = ""
    server: str = ""
    nodes: list[str] = field(default_factory=list)
    startup_seconds: float = 0.0
    components: list[RecordedProcess] = field(default_factory=list)
    ready: bool = False


def state_dir() -> Path:
    return cache_root() / "localcluster"


def state_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def supervisor_log_path(name: str) -> Path:
    return state_dir() / f"{name}.log"


def write_state(state: ClusterState) -> None:
    """Writes atomically, so a reader never sees half a file."""
    path = state_path(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")
    temporary.replace(path)


def read_state(name: str) -> ClusterState | None:
    try:
        data = json.loads(state_path(name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return ClusterState(
        name=data["name"],
        supervisor=RecordedProcess(**data["supervisor"]),
        cluster_dir=data["cluster_dir"],
        kubeconfig=data["kubeconfig"],
        server=data["server"],
        nodes=list(data["nodes"]),
        startup_seconds=float(data["startup_seconds"]),
        components=[RecordedProcess(**item) for item in data["components"]],
        ready=bool(data["ready"]),
    )


def remove_state(name: str) -> None:
    state_path(name).unlink(missing_ok=True)
