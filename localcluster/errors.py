"""The harness's own exceptions, so callers can catch "the cluster could not be had" in one place.

Every message is one line that says what failed and where to look (a log file, a command to
run), because it is what a test run or the CLI shows a person, with no stack trace.
"""

from __future__ import annotations

from pathlib import Path


class ClusterError(RuntimeError):
    """The local cluster could not be started, used or stopped."""


class MissingBinariesError(ClusterError):
    """A Go-built component binary is not in the cache."""

    def __init__(self, missing: list[Path], target: str = "cluster") -> None:
        names = ", ".join(path.name for path in missing)
        where = missing[0].parent if missing else Path()
        super().__init__(
            f"localcluster: missing {names} in {where}; "
            f"run `scripts/build-go-tools.sh {target}` to build them"
        )
        self.missing = missing


class PortInUseError(ClusterError):
    """A port the cluster wants is already taken by another process."""

    def __init__(self, port: int, purpose: str) -> None:
        super().__init__(
            f"localcluster: port 127.0.0.1:{port} for {purpose} is already in use; "
            "stop what holds it or let the harness pick free ports"
        )
        self.port = port


class ComponentFailedError(ClusterError):
    """A component exited early or never became ready."""

    def __init__(self, component: str, problem: str, log_path: Path) -> None:
        super().__init__(f"localcluster: {component} {problem}; see its log: {log_path}")
        self.component = component
        self.log_path = log_path
