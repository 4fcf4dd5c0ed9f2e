"""The README's "Deploying with Pulumi" commands work verbatim, as a new user runs them: in a
copy of the checkout with no `.venv`, a fresh home directory (so `pulumi login --local` and
the passphrase file start from nothing), `pulumi` on PATH and the local cluster as the
kubeconfig. The dev stack they deploy binds a claim; the README's `pulumi destroy --yes`
then removes it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from localcluster import LocalCluster, wait_for
from scripts.pulumi_engine import ROOT, PulumiEngine
from tests.engine.support import (
    Tenant,
    api_get,
    shipped_stack_config,
    volume_location,
    wait_provisioner_ready,
)

MARKER = "<!-- The block below is run verbatim by tests/engine/test_readme_commands.py. -->"


def readme_block() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split(MARKER, 1)[1]
    match = re.match(r"\s*```sh\n(.*?)```", after, re.DOTALL)
    assert match is not None, "the README's deploy block follows its marker"
    return match.group(1)


def readme_guardrails_preview() -> str:
    """The first command of the README's guardrails section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Guardrails in every preview", 1)[1]
    match = re.search(r"```sh\n(pulumi preview [^\n]*?)\s*(#[^\n]*)?\n", section)
    assert match is not None, "the guardrails section starts with a pulumi preview"
    return match.group(1)


def checkout_copy(destination: Path) -> Path:
    """The repository's tracked files, as a clone would have them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def user_shell(engine: PulumiEngine, cluster: LocalCluster, home: Path) -> dict[str, str]:
    home.mkdir()
    keep = {key: os.environ[key] for key in ("PATH", "LANG", "TMPDIR") if key in os.environ}
    pip_cache = Path(os.environ.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip")
    return {
        **keep,
        **engine.environment(),
        "HOME": str(home),
        "KUBECONFIG": str(cluster.kubeconfig),
        # The user's download cache: the virtualenv is still made and installed from scratch.
        "PIP_CACHE_DIR": str(pip_cache),
    }


def run_shell(script: str, cwd: Path, env: dict[str, str]) -> str:
    completed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    return output


def test_readme_deploy_commands_work_verbatim(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path: Path
) -> None:
    checkout = checkout_copy(tmp_path / "local-path-storage")
    assert not (checkout / ".venv").exists()
    env = user_shell(pulumi_engine, cluster, tmp_path / "home")
    block = readme_block()
    dev = shipped_stack_config("dev")
    namespace = dev["local-path-storage:namespace"]
    class_name = dev["local-path-storage:storageClasses"][0]["name"]
    try:
        output = run_shell(block, checkout, env)
        assert "Finished installing dependencies" in output
        assert (tmp_path / "home" / ".config" / "local-path-storage" / "passphrase").stat().st_size
        wait_provisioner_ready(cluster, namespace)
        tenant = Tenant(cluster, class_name)
        tenant.claim_with_consumer("readme")
        _, path, on_disk = volume_location(cluster, tenant.wait_bound("readme"))
        assert path.startswith("/opt/local-path-provisioner/")
        assert on_disk.is_dir()
        tenant.delete_claim("readme")
        wait_for(
            lambda: None if on_disk.exists() else True, 60, "the released volume's directory to go"
        )
        # The guardrails section's preview, verbatim: the pack runs in the .venv that
        # `pulumi install` made, and the shipped dev stack passes it.
        guarded = run_shell(
            'export PULUMI_CONFIG_PASSPHRASE_FILE="$HOME/.config/local-path-storage/passphrase"\n'
            + readme_guardrails_preview()
            + "\n",
            checkout,
            env,
        )
        assert "Policy Packs run:" in guarded, guarded[-3000:]
        assert "local-path-storage|local|policy" in guarded, guarded[-3000:]
        assert "[mandatory]" not in guarded, guarded[-3000:]
    finally:
        # The README's removal command, in the same shell set-up.
        run_shell(
            'export PULUMI_CONFIG_PASSPHRASE_FILE="$HOME/.config/local-path-storage/passphrase"\n'
            "pulumi destroy --yes --stack dev\n",
            checkout,
            env,
        )
    assert api_get(cluster, f"/apis/storage.k8s.io/v1/storageclasses/{class_name}") is None
