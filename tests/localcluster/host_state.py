"""What the host looks like outside any cluster directory, to compare before and after.

Why: stopping a cluster with real nodes must undo every host change; a test can only show
that by listing what could have changed (sysctls, mounts, links and addresses, iptables,
cgroups, /run and /var/log) before the start and after the stop.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from localcluster.host_changes import cgroup_hierarchies

# Counters the kernel moves on its own, whatever a cluster does.
_VOLATILE_SYSCTLS = re.compile(
    r"^(fs\.(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota\.)|kernel\.random\."
    r"|kernel\.ns_last_pid|kernel\.pty\.nr|net\.netfilter\.nf_conntrack_count)"
)
_COUNTERS = re.compile(r"\[\d+:\d+\]")


def _run(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


@dataclass(frozen=True)
class HostState:
    sysctls: frozenset[str]
    mounts: frozenset[str]
    links: frozenset[str]
    addresses: frozenset[str]
    iptables: tuple[str, ...]
    cgroups: frozenset[str]
    run: frozenset[str]
    var_log: frozenset[str]
    loops: frozenset[str]
    """The loop devices backed by a real node's file (its btrfs disk)."""

    def differences(self, other: HostState) -> dict[str, tuple[list[str], list[str]]]:
        """For each listing that differs: (only in self, only in other)."""
        changed: dict[str, tuple[list[str], list[str]]] = {}
        for name in self.__dataclass_fields__:
            mine, theirs = set(getattr(self, name)), set(getattr(other, name))
            if mine != theirs:
                changed[name] = (sorted(mine - theirs), sorted(theirs - mine))
        return changed


def host_state() -> HostState:
    sysctls = [
        line
        for line in _run("sysctl", "-a").splitlines()
        if line and not _VOLATILE_SYSCTLS.match(line)
    ]
    mounts = [
        " ".join(line.split()[1:3]) for line in Path("/proc/self/mounts").read_text().splitlines()
    ]
    links = [line.split()[0] for line in _run("ip", "-br", "link").splitlines()]
    addresses = _run("ip", "-br", "addr").splitlines()
    iptables = tuple(
        _COUNTERS.sub("", line)
        for line in _run("iptables-save").splitlines()
        if line and not line.startswith("#")
    )
    cgroups = [
        f"{hierarchy.name}/{child.name}"
        for hierarchy in cgroup_hierarchies()
        for child in hierarchy.iterdir()
        if child.is_dir()
    ]
    return HostState(
        sysctls=frozenset(sysctls),
        mounts=frozenset(mounts),
        links=frozenset(links),
        addresses=frozenset(addresses),
        iptables=iptables,
        cgroups=frozenset(cgroups),
        run=frozenset(path.name for path in Path("/run").iterdir()),
        var_log=frozenset(path.name for path in Path("/var/log").iterdir()),
        loops=frozenset(
            line for line in _run("losetup", "-a").splitlines() if "/real-nodes/" in line
        ),
    )
