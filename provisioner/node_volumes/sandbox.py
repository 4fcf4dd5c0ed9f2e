"""What a volume's step sees of its node, and the bubblewrap (`bwrap`) command that confines it
to that: pure.

A helper pod's container sees its volume's base path and its image, nothing else of the node.
The node plugin sees every base path of its node, the kubelet's directory (other pods' volumes)
and its own service account's token, and a step it ran as a plain process would see all of it
too: a setup script of config.json, or a bug in a fixed script, could reach what is not its
volume's. Run through `confined_argv`, a step sees the system's programs read-only, its View,
and an empty /tmp, /dev and its own /proc: nothing else of the node.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

BWRAP = "bwrap"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_SHELL = "/bin/sh"

SYSTEM_DIRECTORIES = ("/usr", "/bin", "/sbin", "/lib", "/lib64")
"""The system's programs and their libraries, read-only; `-try`, since a system may lack one
(/lib64, or /bin where it is a link into /usr on a merged-/usr system, which the bind keeps)."""

NAME_FILES = ("/etc/passwd", "/etc/group")
"""So that a VOL_USER or VOL_GROUP given by name chowns as on the node; nothing else of /etc
(no /etc/kubernetes, no credentials)."""

CAPABILITIES = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID")
"""What the steps need of root, and all they keep: chown (VOL_USER/VOL_GROUP), reaching and
removing a tenant's files whatever their modes (DAC_OVERRIDE), chmod of a directory not owned
by root (FOWNER) keeping its setgid bit (FSETID). bwrap run by root keeps every capability
otherwise, CAP_SYS_ADMIN among them, with which a step could mount its way out of its view;
CAP_DAC_READ_SEARCH is left out on purpose (open_by_handle_at reaches a file by its handle,
outside any mount namespace)."""


@dataclass(frozen=True)
class Shell:
    """What the steps' `/bin/sh` and their PATH are: the system's, or a directory's (a busybox
    with its applets, where the plugin's image has no shell)."""

    directory: str | None = None

    def argv(self, argv: Sequence[str]) -> list[str]:
        if self.directory is None or not argv or argv[0] != SYSTEM_SHELL:
            return list(argv)
        return [f"{self.directory}/sh", *argv[1:]]

    def path(self) -> str:
        system = os.environ.get("PATH", DEFAULT_PATH)
        return system if self.directory is None else f"{self.directory}:{system}"


SYSTEM = Shell()
"""The system's /bin/sh and the plugin's PATH."""


@dataclass(frozen=True)
class View:
    """What a confined step sees of the node besides the system's programs: host paths bound
    at their own path, read-write or read-only; nothing else of the node's filesystem."""

    read_write: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()


def view_error(path: str) -> str | None:
    """Why `path` cannot be bound into a step's view, or None. Absolute and in normal form, so
    that it is bound where its step's environment names it; never `/`, the whole node. (That
    it is a directory is the runner's check: it asks the filesystem.)"""
    if not posixpath.isabs(path) or posixpath.normpath(path) != path or path.startswith("//"):
        return f"a step's view path must be absolute and in normal form: {path!r}"
    if path == "/":
        return "a step's view may not be the whole node (/)"
    return None


def confined_argv(argv: Sequence[str], view: View, shell: Shell) -> list[str]:
    """bwrap's argv around `argv` (argv already through shell.argv). ValueError for a view
    path that `view_error` refuses."""
    for path in (*view.read_write, *view.read_only):
        if (error := view_error(path)) is not None:
            raise ValueError(error)
    binds: list[str] = []
    for directory in SYSTEM_DIRECTORIES:
        binds += ["--ro-bind-try", directory, directory]
    for name_file in NAME_FILES:
        binds += ["--ro-bind-try", name_file, name_file]
    if shell.directory is not None:
        binds += ["--ro-bind", shell.directory, shell.directory]
    # After /tmp's tmpfs, so that a view under /tmp is bound on top of it, not hidden by it.
    for path in view.read_only:
        binds += ["--ro-bind", path, path]
    for path in view.read_write:
        binds += ["--bind", path, path]
    return [
        BWRAP,
        # The step dies with the bwrap that runs it: the runner's kill of the step's process
        # group after its deadline reaches bwrap, and nothing of the step outlives it.
        "--die-with-parent",
        # Its own process, IPC and host name spaces: it sees, signals and renames none of the
        # node's. No --new-session: the runner already starts a session without a terminal,
        # and a new one would take the step out of the process group the deadline kills.
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        # No network. A helper pod has a pod network, but the node plugin's is the node's own
        # (hostNetwork), with what listens on the node's loopback; no step needs one to make
        # or remove a directory.
        "--unshare-net",
        "--cap-drop",
        "ALL",
        *(arg for cap in CAPABILITIES for arg in ("--cap-add", cap)),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        *binds,
        "--chdir",
        "/",
        "--",
        *argv,
    ]
