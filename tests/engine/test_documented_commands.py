"""The install page's commands (docs/install.md, "2. The stack", which README.md's quick start
repeats word for word) work verbatim, as a new user runs them: in a copy of the checkout with no
`.venv`, a fresh home directory (so `pulumi login --local` and the passphrase file start from
nothing), `pulumi` on PATH and the local cluster as the kubeconfig. The dev stack they deploy
binds a claim; the security page's policy-pack preview passes it, docs/upgrading.md's blocks
upgrade and roll it back, and `pulumi destroy --yes` then removes it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from components.deployment import DEPLOYMENT_NAME
from localcluster import PROVISIONER_IMAGE_REPOSITORY, LocalCluster, wait_for
from scripts import build_image
from scripts.pulumi_engine import ROOT, PulumiEngine
from tests.engine.shell_recipes import marked_blocks, run_shell
from tests.engine.support import (
    Tenant,
    api_get,
    shipped_stack_config,
    volume_location,
    wait_provisioner_ready,
)

MARKER = "<!-- The block below is run verbatim by tests/engine/test_documented_commands.py. -->"


def install_block() -> str:
    (block,) = marked_blocks(ROOT / "docs" / "install.md", MARKER)
    return block


def policy_pack_preview() -> str:
    """The first command of the security page's policy pack section."""
    page = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    section = page.split("## The policy pack", 1)[1]
    match = re.search(r"```sh\n(pulumi preview [^\n]*?)\s*(#[^\n]*)?\n", section)
    assert match is not None, "the policy pack section starts with a pulumi preview"
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
        **engine.environment(temp_dir=home / "tmp"),
        "HOME": str(home),
        "KUBECONFIG": str(cluster.kubeconfig),
        # The user's download cache: the virtualenv is still made and installed from scratch.
        "PIP_CACHE_DIR": str(pip_cache),
    }


def test_install_commands_work_verbatim(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path: Path
) -> None:
    checkout = checkout_copy(tmp_path / "local-path-storage")
    assert not (checkout / ".venv").exists()
    env = user_shell(pulumi_engine, cluster, tmp_path / "home")
    block = install_block()
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
        # The policy pack section's preview, verbatim: the pack runs in the .venv that
        # `pulumi install` made, and the shipped dev stack passes it.
        guarded = run_shell(
            'export PULUMI_CONFIG_PASSPHRASE_FILE="$HOME/.config/local-path-storage/passphrase"\n'
            + policy_pack_preview()
            + "\n",
            checkout,
            env,
        )
        assert "Policy Packs run:" in guarded, guarded[-3000:]
        assert "local-path-storage|local|policy" in guarded, guarded[-3000:]
        assert "[mandatory]" not in guarded, guarded[-3000:]
        upgrade_and_roll_back_as_documented(cluster, checkout, env, namespace, class_name)
    finally:
        # The install page's removal command, in the same shell set-up.
        run_shell(
            'export PULUMI_CONFIG_PASSPHRASE_FILE="$HOME/.config/local-path-storage/passphrase"\n'
            "pulumi destroy --yes --stack dev\n",
            checkout,
            env,
        )
    assert api_get(cluster, f"/apis/storage.k8s.io/v1/storageclasses/{class_name}") is None


def deployment_image(cluster: LocalCluster, namespace: str) -> str:
    deployment = api_get(
        cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/{DEPLOYMENT_NAME}"
    )
    assert deployment is not None
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


def wait_rolled_out(cluster: LocalCluster, namespace: str, image: str) -> None:
    """The Deployment names `image` and its one Ready pod runs it."""
    assert deployment_image(cluster, namespace) == image
    (pod,) = wait_provisioner_ready(cluster, namespace)
    assert pod["spec"]["containers"][0]["image"] == image


def upgrade_and_roll_back_as_documented(
    cluster: LocalCluster, checkout: Path, env: dict[str, str], namespace: str, class_name: str
) -> None:
    """docs/upgrading.md's two blocks, verbatim, on the stack the install page's block deployed: the
    upgrade to an image by digest (the current build's, which the local cluster runs for any
    reference of its repository) and the rollback to the image the upgrade noted. A volume
    bound before stays bound with its directory throughout."""
    upgrade, rollback = marked_blocks(ROOT / "docs" / "upgrading.md", MARKER)
    previous = deployment_image(cluster, namespace)
    new_image = f"{PROVISIONER_IMAGE_REPOSITORY}@{build_image.image().digest}"
    assert new_image != previous
    tenant = Tenant(cluster, class_name)
    tenant.claim_with_consumer("kept")
    _, _, on_disk = volume_location(cluster, tenant.wait_bound("kept"))

    output = run_shell(upgrade, checkout, {**env, "NEW_IMAGE": new_image})
    assert "image" in output, output[-3000:]
    assert (checkout / "previous-image.txt").read_text(encoding="utf-8").strip() == previous
    wait_rolled_out(cluster, namespace, new_image)
    assert on_disk.is_dir()

    run_shell(rollback, checkout, env)
    wait_rolled_out(cluster, namespace, previous)
    assert tenant.wait_bound("kept", timeout=5)
    assert on_disk.is_dir()
