"""`python -m provisioner orphans` on the real cluster: planted directories and a planted symbolic
link under a base path, a live volume, and a PV whose directory went missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, NEVER_STARTS_IMAGE
from localcluster.raw_api import manifest
from provisioner.provisioning.annotations import STORAGE_PROVISIONER
from tests.provisioner.e2e.support import (
    CONFIGMAP,
    HELPER_SERVICE_ACCOUNT,
    REPO,
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    volume_path,
)

pytestmark = pytest.mark.cluster
NODE = "node-1"
TWO_DAYS = 2 * 86400


def orphans_cli(setup: ProvisionerSetup, *flags: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "provisioner",
            "orphans",
            "--kubeconfig",
            str(setup.cluster.kubeconfig),
            "--namespace",
            setup.namespace,
            "--configmap-name",
            CONFIGMAP,
            "--provisioner-name",
            setup.name,
            "--service-account-name",
            HELPER_SERVICE_ACCOUNT,
            "--node",
            NODE,
            *flags,
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    return done.returncode, done.stdout, done.stderr


def plant_old(path: Path) -> None:
    then = time.time() - TWO_DAYS
    os.utime(path, (then, then), follow_symlinks=False)


def by_path(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["path"]: entry for entry in document["orphans"]}


def test_orphans_are_listed_then_removed_and_nothing_else_is_touched(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/orphans-{uuid.uuid4().hex[:6]}"
    setup = make_setup(ConfigFiles(config=default_config(base)))
    setup.start()
    storage_class = setup.create_class("orphans", reclaim_policy="Retain")
    volumes = {}
    for claim in ("live", "lost"):
        setup.create_claim(claim, storage_class)
        setup.create_consumer(claim, claim, node_selector={"kubernetes.io/hostname": NODE})
        volumes[claim] = setup.wait_bound(claim)
    live = setup.node_path(NODE, volume_path(volumes["live"]))
    (live / "tenant-dir").mkdir()
    (live / "tenant-link").symlink_to("/")
    plant_old(live)
    lost = setup.node_path(NODE, volume_path(volumes["lost"]))
    lost.rmdir()

    host_base = setup.node_path(NODE, base)
    old = host_base / "old-orphan"
    (old / "deep").mkdir(parents=True)
    (old / "deep" / "data.bin").write_bytes(b"x" * 100)
    plant_old(old)
    young = host_base / "young-orphan"
    young.mkdir()
    outside = setup.node_path(NODE, "/srv/not-ours")
    outside.mkdir(parents=True)
    (outside / "precious.txt").write_text("keep")
    (outside / "old-dir").mkdir()
    plant_old(outside / "old-dir")
    link = host_base / "planted-link"
    link.symlink_to(outside)
    plant_old(link)
    stray = host_base / "stray-file"
    stray.write_text("?")
    plant_old(stray)

    code, out, err = orphans_cli(setup, "--output", "json")
    assert code == 1, err
    document = json.loads(out)
    listed = by_path(document)
    assert set(listed) == {
        f"{base}/old-orphan",
        f"{base}/young-orphan",
        f"{base}/planted-link",
        f"{base}/stray-file",
    }, "a live volume, its content or a link's target was listed"
    assert listed[f"{base}/planted-link"]["kind"] == "symlink"
    assert listed[f"{base}/old-orphan"]["kind"] == "directory"
    assert listed[f"{base}/old-orphan"]["ageSeconds"] >= TWO_DAYS - 60
    assert listed[f"{base}/young-orphan"]["ageSeconds"] < 600
    assert document["missing"] == [
        {
            "volume": volumes["lost"]["metadata"]["name"],
            "node": NODE,
            "path": volume_path(volumes["lost"]),
        }
    ]
    assert document["problems"] == []
    assert old.is_dir(), "listing removed something"

    code, out, err = orphans_cli(setup)
    assert code == 1, err
    assert "old-orphan" in out and "missing: PV" in out and "NODE" in out

    code, out, err = orphans_cli(setup, "--delete", "--older-than", "1h", "--output", "json")
    assert code == 1, err  # the young one, the link, the file and the missing PV remain
    states = {path: entry["state"] for path, entry in by_path(json.loads(out)).items()}
    assert states[f"{base}/old-orphan"] == "removed"
    assert states[f"{base}/young-orphan"].startswith("kept: younger")
    assert states[f"{base}/planted-link"].startswith("kept: a symlink")
    assert not old.exists()
    assert young.is_dir()
    assert link.is_symlink()
    assert (outside / "precious.txt").read_text() == "keep"
    assert (outside / "old-dir").is_dir()
    assert (live / "tenant-dir").is_dir() and (live / "tenant-link").is_symlink()

    code, _, err = orphans_cli(setup, "--delete", "--older-than", "1m")
    assert code == 2
    assert "--older-than must be at least 10m" in err


def test_on_a_shared_path_owners_on_other_nodes_are_neither_reported_nor_removed(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """The shared path is listed on node-1 only; an in-flight setup scheduled to another node
    and a foreign PV pinned to another node still own their directories, and so does a claim
    of ours waiting for its volume (no provisioner runs: its setup may have made the
    directory before the PV was saved). All two days old, so only ownership keeps them."""
    base = f"/shared-{uuid.uuid4().hex[:6]}"
    setup = make_setup(ConfigFiles(config={"sharedFileSystemPath": base}))
    other = next(node for node in setup.cluster.nodes if node != NODE)
    setup.core.create_namespaced_pod(
        setup.namespace,
        manifest(
            {
                "metadata": {
                    "name": "setup-in-flight",
                    "labels": {HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE},
                },
                "spec": {
                    "nodeName": other,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "setup",
                            "image": NEVER_STARTS_IMAGE,
                            "env": [{"name": "VOL_DIR", "value": f"{base}/in-flight"}],
                        }
                    ],
                },
            }
        ),
    )
    foreign_name = f"foreign-{setup.suffix}"
    setup.core.create_persistent_volume(
        manifest(
            {
                "metadata": {"name": foreign_name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"{base}/foreign"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": [other],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        ),
    )
    storage_class = setup.create_class("waiting", binding_mode="Immediate")
    setup.create_claim("waiting", storage_class, access_modes=["ReadWriteMany"])
    claim = eventually(
        lambda: (
            setup.claim("waiting") if STORAGE_PROVISIONER in setup.annotations("waiting") else None
        ),
        30,
        "the claim handed to the provisioner",
    )
    waiting = f"pvc-{claim['metadata']['uid']}_{setup.namespace}_waiting"
    try:
        host_base = setup.node_path(NODE, base)
        for name in ("in-flight", "foreign", "stale", waiting):
            (host_base / name / "data").mkdir(parents=True)
            plant_old(host_base / name)

        code, out, err = orphans_cli(setup, "--delete", "--older-than", "1h", "--output", "json")
        assert code == 0, err
        states = {path: entry["state"] for path, entry in by_path(json.loads(out)).items()}
        assert states == {f"{base}/stale": "removed"}, "an owned directory was reported"
        assert (host_base / "in-flight" / "data").is_dir()
        assert (host_base / "foreign" / "data").is_dir()
        assert (host_base / waiting / "data").is_dir()
        assert not (host_base / "stale").exists()
    finally:
        setup.core.delete_persistent_volume(foreign_name)
