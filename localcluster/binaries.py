"""Where the Go-built component binaries live, by the versions pinned in versions.env.

Why: nothing is downloaded at test time; scripts/build-go-tools.sh builds each component once
into a cache keyed by version, and the harness must use exactly those pinned builds (and say
how to get them when they are missing, instead of skipping tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from localcluster.errors import ClusterError, MissingBinariesError

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
VERSIONS_FILE = REPOSITORY_ROOT / "versions.env"


def cache_root() -> Path:
    """The project's cache directory: $LPS_CACHE_DIR, else ~/.cache/local-path-storage."""
    configured = os.environ.get("LPS_CACHE_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "local-path-storage"


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """KEY=VALUE lines of versions.env (comments and blank lines ignored)."""
    versions: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ClusterError(
            f"localcluster: cannot read pinned versions from {path}: {error}"
        ) from error
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or "=" not in stripped:
            continue
        key, _, value = stripped.partition("=")
        versions[key.strip()] = value.strip().strip('"')
    return versions


@dataclass(frozen=True)
class ClusterBinaries:
    """Absolute paths of the five executables a local cluster runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path


def locate_binaries(bin_dir: Path | None = None) -> ClusterBinaries:
    """The pinned binaries, or MissingBinariesError naming every one that is absent."""
    directory = bin_dir or cache_root() / "bin"
    versions = read_versions()
    kubernetes = versions.get("KUBERNETES_VERSION", "")
    binaries = ClusterBinaries(
        etcd=directory / f"etcd-{versions.get('ETCD_VERSION', '')}",
        kube_apiserver=directory / f"kube-apiserver-{kubernetes}",
        kube_controller_manager=directory / f"kube-controller-manager-{kubernetes}",
        kube_scheduler=directory / f"kube-scheduler-{kubernetes}",
        kwok=directory / f"kwok-{versions.get('KWOK_VERSION', '')}",
    )
    candidates = [
        binaries.etcd,
        binaries.kube_apiserver,
        binaries.kube_controller_manager,
        binaries.kube_scheduler,
        binaries.kwok,
    ]
    missing = [path for path in candidates if not os.access(path, os.X_OK)]
    if missing:
        raise MissingBinariesError(missing)
    return binaries
