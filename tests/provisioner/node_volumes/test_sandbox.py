"""The bwrap command around a step: what it binds, where, and what it refuses (pure)."""

from __future__ import annotations

import pytest

from provisioner.node_volumes.sandbox import SYSTEM, Shell, View, confined_argv

STEP = ["/bin/sh", "-c", "true"]


def binds(argv: list[str]) -> list[tuple[str, str, str]]:
    """The (flag, source, target) of every bind, in order."""
    found = []
    for i, arg in enumerate(argv[: argv.index("--")]):
        if arg in ("--bind", "--ro-bind", "--ro-bind-try", "--bind-try"):
            found.append((arg, argv[i + 1], argv[i + 2]))
    return found


def test_the_step_runs_last_after_the_end_of_options() -> None:
    argv = confined_argv(STEP, View(read_write=("/data",)), SYSTEM)
    assert argv[0] == "bwrap"
    assert argv[argv.index("--") + 1 :] == STEP


def test_the_view_is_bound_at_its_own_path_and_nothing_else_of_the_node_is_writable() -> None:
    argv = confined_argv(STEP, View(read_write=("/data",), read_only=("/srv/ro",)), SYSTEM)
    found = binds(argv)
    assert [b for b in found if b[0] == "--bind"] == [("--bind", "/data", "/data")]
    assert ("--ro-bind", "/srv/ro", "/srv/ro") in found
    sources = {b[1] for b in found}
    assert {"/usr", "/bin", "/lib", "/etc/passwd", "/etc/group"} <= sources
    assert not sources & {"/", "/etc", "/var", "/var/lib/kubelet", "/run", "/root"}


def test_a_view_under_tmp_is_bound_after_tmp_s_own_tmpfs() -> None:
    argv = confined_argv(STEP, View(read_write=("/tmp/base",)), SYSTEM)
    assert argv.index("/tmp/base") > argv.index("--tmpfs")


def test_the_shell_directory_is_bound_read_only() -> None:
    found = binds(confined_argv(STEP, View(), Shell("/lps-shell")))
    assert ("--ro-bind", "/lps-shell", "/lps-shell") in found


def test_the_step_keeps_only_the_capabilities_it_needs_and_no_network() -> None:
    argv = confined_argv(STEP, View(), SYSTEM)
    options = argv[: argv.index("--")]
    assert options[options.index("--cap-drop") + 1] == "ALL"
    added = [options[i + 1] for i, arg in enumerate(options) if arg == "--cap-add"]
    assert set(added) == {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID"}
    for flag in ("--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc"):
        assert flag in options
    assert "--new-session" not in options, "the deadline kills the step's process group"


@pytest.mark.parametrize("path", ["data", "/data/../etc", "/data/", "//data", "/", ""])
def test_a_view_path_not_absolute_and_normal_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="view"):
        confined_argv(STEP, View(read_write=(path,)), SYSTEM)
    with pytest.raises(ValueError, match="view"):
        confined_argv(STEP, View(read_only=(path,)), SYSTEM)
