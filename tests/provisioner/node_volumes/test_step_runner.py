"""The steps' shell: the system's, or a directory's (the DaemonSet's copy of the helper image's
busybox, since the plugin's image has none)."""

from __future__ import annotations

from pathlib import Path

from provisioner.node_volumes.sandbox import View
from provisioner.node_volumes.step_runner import SYSTEM, Shell, run_step
from provisioner.node_volumes.volume_steps import NodeStep


def test_a_shell_directory_takes_the_place_of_bin_sh_and_comes_first_on_the_path() -> None:
    shell = Shell("/lps-shell")
    assert shell.argv(["/bin/sh", "-c", "true"]) == ["/lps-shell/sh", "-c", "true"]
    assert shell.argv(["/usr/bin/env", "/bin/sh"]) == ["/usr/bin/env", "/bin/sh"]
    assert shell.path().startswith("/lps-shell:")
    assert SYSTEM.argv(["/bin/sh", "-c", "true"]) == ["/bin/sh", "-c", "true"]


def test_a_step_runs_with_the_directory_s_shell_and_tools(tmp_path: Path) -> None:
    directory = tmp_path / "shell"
    directory.mkdir()
    used = tmp_path / "used"
    (directory / "sh").write_text(f'#!/bin/sh\necho sh >> "{used}"\nexec /bin/sh "$@"\n')
    (directory / "hello").write_text("#!/bin/sh\necho hello from the directory\n")
    for tool in ("sh", "hello"):
        (directory / tool).chmod(0o755)
    step = NodeStep("create", ("/bin/sh", "-c", "hello"), {}, View(read_write=(str(tmp_path),)))
    result = run_step(step, 10, Shell(str(directory)))
    assert result.ok, result.tail
    assert result.tail == "hello from the directory"
    assert used.read_text() == "sh\n"
    assert not run_step(step, 10, SYSTEM).ok, "the system's PATH has no `hello`"
