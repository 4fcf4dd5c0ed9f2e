"""Project quotas through real helper pods: on this machine's filesystem the setup finds none
and carries on; with a recorded xfs_quota stand-in and a mount table that says prjquota (no
kernel here has quota support), the setup's helper sets the hard limit of the claim's size."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
import yaml

from provisioner.capacity.quota import project_id_for
from provisioner.configuration.config import DEFAULT_HELPER_POD_YAML, load_config_bundle
from provisioner.helper_pods.pod_runner import PodRunner
from provisioner.helper_pods.pod_shapes import BASE_VIEW
from provisioner.helper_pods.resize import build_resize_helper_pod
from provisioner.kube.client import create_clients
from provisioner.provisioning.volume_decisions import TeardownPlan
from tests.provisioner.e2e.support import (
    HELPER_SERVICE_ACCOUNT,
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    volume_path,
)

pytestmark = pytest.mark.cluster
NODE = "node-1"

STAND_IN = """\
#!/bin/sh
printf '%s\\n' "$*" >> "$VOL_DIR/.xfs_quota-argv"
for arg in "$@"; do
  case "$arg" in
    "state -p")
      echo "Project quota state on $VOL_DIR (/dev/loop7)"
      echo "  Accounting: ON"
      echo "  Enforcement: ON" ;;
    "project -c"*)
      if [ -e "$VOL_DIR/.xfs_quota-project" ]; then
        echo "$VOL_DIR - project identifier is not set" \\
          "(inode=$(cat "$VOL_DIR/.xfs_quota-project"), tree=0)"
      fi
      echo "Processed 1 (/etc/projects and cmdline) paths for project 0" ;;
    "report -p -n -N") echo "#0 0 0 0 00 [--------]" ;;
    "project -s"*) echo "${arg##* }" > "$VOL_DIR/.xfs_quota-project" ;;
  esac
done
"""


def test_the_setup_helper_sets_a_hard_quota_where_project_quotas_are_enforced(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = f"/opt/quota-{uuid.uuid4().hex[:6]}"
    tools = f"{BASE_VIEW}/.tools"
    template = yaml.safe_load(DEFAULT_HELPER_POD_YAML)
    template["spec"]["containers"][0]["env"] = [
        {"name": "PATH", "value": f"{tools}:/usr/sbin:/usr/bin:/sbin:/bin"},
        {"name": "LPS_MOUNTINFO", "value": f"{tools}/mountinfo"},
    ]
    setup = make_setup(
        ConfigFiles(config=default_config(base), helper_pod=yaml.safe_dump(template))
    )
    host_tools = setup.node_path(NODE, f"{base}/.tools")
    host_tools.mkdir(parents=True)
    (host_tools / "xfs_quota").write_text(STAND_IN)
    (host_tools / "xfs_quota").chmod(0o755)
    (host_tools / "mountinfo").write_text(
        f"40 1 7:7 / {base} rw,relatime - xfs /dev/loop7 rw,attr2,inode64,prjquota\n"
    )
    setup.start()
    storage_class = setup.create_class("quota")
    setup.create_claim("limited", storage_class, size="2Gi")
    setup.create_consumer("limited", "limited", node_selector={"kubernetes.io/hostname": NODE})
    volume = setup.wait_bound("limited")
    directory = setup.node_path(NODE, volume_path(volume))
    project = project_id_for(volume["metadata"]["name"])
    calls = (directory / ".xfs_quota-argv").read_text().splitlines()
    assert calls == [
        f"-x -c state -p {volume_path(volume)}",
        f"-x -c project -c -d 0 -p {volume_path(volume)} 0 {volume_path(volume)}",
        f"-x -c report -p -n -N {volume_path(volume)}",
        f"-x -c project -s -p {volume_path(volume)} {project}"
        f" -c limit -p bhard={2 * 1024**3} {project} {volume_path(volume)}",
    ]


def test_without_project_quotas_the_setup_carries_on(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """The real mount table of the helper: no prjquota anywhere, so no quota and no failure."""
    base = f"/opt/noquota-{uuid.uuid4().hex[:6]}"
    setup = make_setup(ConfigFiles(config=default_config(base)))
    setup.start()
    storage_class = setup.create_class("plain")
    setup.create_claim("plain", storage_class)
    setup.create_consumer("plain", "plain", node_selector={"kubernetes.io/hostname": NODE})
    volume = setup.wait_bound("plain")
    assert setup.node_path(NODE, volume_path(volume)).is_dir()
    reasons = [e.get("reason") for e in setup.events("plain")]
    assert "ProvisioningFailed" not in json.dumps(reasons), reasons
    logs = setup.cluster.pod_log_path(setup.namespace, "x", "x").parent
    pattern = f"{setup.namespace}_helper-create-{volume['metadata']['name']}_*.log"
    said = "".join(path.read_text() for path in logs.glob(pattern))
    assert "no-quota " in said, f"the setup helper did not look for a quota: {said!r}"


def test_the_resize_entry_sets_the_new_limit_through_a_helper_pod(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """What expansion calls: `build_resize_helper_pod`, run to completion, says what it did."""
    base = f"/opt/resize-{uuid.uuid4().hex[:6]}"
    tools = f"{BASE_VIEW}/.tools"
    template = yaml.safe_load(DEFAULT_HELPER_POD_YAML)
    template["spec"]["containers"][0]["env"] = [
        {"name": "PATH", "value": f"{tools}:/usr/sbin:/usr/bin:/sbin:/bin"},
        {"name": "LPS_MOUNTINFO", "value": f"{tools}/mountinfo"},
    ]
    files = ConfigFiles(config=default_config(base), helper_pod=yaml.safe_dump(template))
    setup = make_setup(files)
    host_tools = setup.node_path(NODE, f"{base}/.tools")
    host_tools.mkdir(parents=True)
    (host_tools / "xfs_quota").write_text(STAND_IN.replace("$VOL_DIR/.xfs_quota-argv", "/dev/null"))
    (host_tools / "xfs_quota").chmod(0o755)
    (host_tools / "mountinfo").write_text(
        f"40 1 7:7 / {base} rw,relatime - xfs /dev/loop7 rw,attr2,inode64,prjquota\n"
    )
    setup.start()
    storage_class = setup.create_class("resize")
    setup.create_claim("grow", storage_class, size="1Gi")
    setup.create_consumer("grow", "grow", node_selector={"kubernetes.io/hostname": NODE})
    volume = setup.wait_bound("grow")
    target = TeardownPlan(
        volume_name=volume["metadata"]["name"],
        path=volume_path(volume),
        node_name=NODE,
        volume_mode="Filesystem",
        size_bytes=1024**3,
        delete_volume=False,
        remove_finalizer=False,
        base_path=base,
    )
    bundle = load_config_bundle(
        json.dumps(files.config), files.setup, files.teardown, files.helper_pod
    )
    manifest = build_resize_helper_pod(
        target, 3 * 1024**3, bundle, setup.namespace, HELPER_SERVICE_ACCOUNT
    )
    clients = create_clients(str(setup.cluster.kubeconfig))
    try:
        _, message = PodRunner(clients).run_for_message(manifest, 60)
    finally:
        clients.close()
    project = project_id_for(target.volume_name)
    assert message.strip() == f"quota {project} {3 * 1024**3}"
