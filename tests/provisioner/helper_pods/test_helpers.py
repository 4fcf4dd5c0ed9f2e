"""helperPod.yaml validation and the helper pod built for an action (its outcome is read by
provisioner.helper_pods.pod_outcomes, tested in tests/provisioner/kube)."""

import copy
import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.capacity.quota import quota_environment
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigError,
    load_config_bundle,
)
from provisioner.configuration.pod_template import parse_helper_template, validate_helper_template
from provisioner.helper_pods.pod_shapes import (
    BASE_VIEW,
    FINISH_SCRIPT,
    GUARD_SCRIPT,
    HELPER_GRACE_SECONDS,
    HELPER_POD_LABEL,
    HELPER_POD_LABEL_VALUE,
    PREPARE_CONTAINER,
    PREPARE_SCRIPT,
    REMOVING_STEPS,
    build_helper_pod,
    helper_pod_name,
    helper_steps,
)
from provisioner.provisioning.volume_decisions import TeardownPlan
from tests.provisioner.removal_permits import permit_for

HINT = "remove it, or start the provisioner with --allow-unsafe-helper-template"
DEFAULT = yaml.safe_load(DEFAULT_HELPER_POD_YAML)


def with_(path: str, value: Any) -> dict[str, Any]:
    """The default template with one field set, path like spec.containers.0.securityContext."""
    template: dict[str, Any] = copy.deepcopy(DEFAULT)
    *parents, last = path.split(".")
    node: Any = template
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[last] = value
    return template


C = "spec.containers.0"
UNSAFE_TEMPLATES: list[tuple[dict[str, Any], str]] = [
    (
        with_("spec.containers", [DEFAULT["spec"]["containers"][0]] * 2),
        "spec.containers: must hold exactly one container, not 2",
    ),
    (
        with_("spec.initContainers", [{"name": "i", "image": "x"}]),
        f"spec.initContainers: must not be set: the provisioner adds what it needs; {HINT}",
    ),
    (
        with_("spec.ephemeralContainers", [{"name": "e", "image": "x"}]),
        f"spec.ephemeralContainers: must not be set: the provisioner adds what it needs; {HINT}",
    ),
    (
        with_("spec.volumes", [{"name": "root", "hostPath": {"path": "/"}}]),
        f"spec.volumes: must not be set: the provisioner adds what it needs; {HINT}",
    ),
    (
        with_("spec.hostNetwork", True),
        f"spec.hostNetwork: must not be true: it opens the host's namespaces; {HINT}",
    ),
    (
        with_("spec.hostPID", True),
        f"spec.hostPID: must not be true: it opens the host's namespaces; {HINT}",
    ),
    (
        with_("spec.hostIPC", True),
        f"spec.hostIPC: must not be true: it opens the host's namespaces; {HINT}",
    ),
    (
        with_("spec.nodeName", "n1"),
        f"spec.nodeName: must not be set: the provisioner chooses it; {HINT}",
    ),
    (
        with_("spec.serviceAccountName", "admin"),
        f"spec.serviceAccountName: must not be set: the provisioner chooses it; {HINT}",
    ),
    (
        with_("spec.serviceAccount", "admin"),
        f"spec.serviceAccount: must not be set: the provisioner chooses it; {HINT}",
    ),
    (
        with_(f"{C}.volumeMounts", [{"name": "x", "mountPath": "/x"}]),
        f"spec.containers[0].volumeMounts: must not be set; {HINT}",
    ),
    (
        with_(f"{C}.volumeDevices", [{"name": "x", "devicePath": "/dev/x"}]),
        f"spec.containers[0].volumeDevices: must not be set; {HINT}",
    ),
    (
        with_(f"{C}.envFrom", [{"secretRef": {"name": "s"}}]),
        f"spec.containers[0].envFrom: must not be set; {HINT}",
    ),
    (
        with_(
            f"{C}.env",
            [
                {"name": "A", "value": "1"},
                {"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            ],
        ),
        f"spec.containers[0].env[1].valueFrom: must not read secrets; {HINT}",
    ),
    (
        with_(f"{C}.lifecycle", {"postStart": {"exec": {"command": ["sh"]}}}),
        f"spec.containers[0].lifecycle: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.livenessProbe", {"exec": {"command": ["true"]}}),
        f"spec.containers[0].livenessProbe: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.readinessProbe", {"exec": {"command": ["true"]}}),
        f"spec.containers[0].readinessProbe: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.startupProbe", {"exec": {"command": ["true"]}}),
        f"spec.containers[0].startupProbe: must not be set: the helper is one command; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.privileged", True),
        f"spec.containers[0].securityContext.privileged: must not be true: root"
        f" on the node; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.capabilities", {"add": ["SYS_ADMIN"]}),
        f"spec.containers[0].securityContext.capabilities.add: must not add capabilities; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.allowPrivilegeEscalation", True),
        f"spec.containers[0].securityContext.allowPrivilegeEscalation: must not be true; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.runAsUser", 0),
        f"spec.containers[0].securityContext.runAsUser: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_(f"{C}.securityContext.runAsGroup", 0),
        f"spec.containers[0].securityContext.runAsGroup: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_("spec.securityContext.runAsUser", 0),
        f"spec.securityContext.runAsUser: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_("spec.securityContext.runAsGroup", 0),
        f"spec.securityContext.runAsGroup: must not be 0 (root) explicitly; {HINT}",
    ),
    (
        with_("spec.securityContext.sysctls", [{"name": "kernel.shm_rmid_forced", "value": "1"}]),
        f"spec.securityContext.sysctls: must not be set; {HINT}",
    ),
]


@pytest.mark.parametrize(("template", "expected"), UNSAFE_TEMPLATES)
def test_unsafe_templates_are_refused_unless_allowed(
    template: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_helper_template(yaml.safe_dump(template))
    assert str(caught.value) == f"helperPod.yaml: {expected}"
    assert caught.value.source == "helperPod.yaml"
    validate_helper_template(template, allow_unsafe=True)


BROKEN_TEMPLATES: list[tuple[str, str]] = [
    (
        "spec: [",
        "helperPod.yaml: is not valid YAML at line 1: expected the node"
        " content, but found '<stream end>'",
    ),
    (
        "- just a list",
        "helperPod.yaml: must be a Pod manifest (a YAML mapping with spec.containers)",
    ),
    ("kind: Deployment\nspec: {}", "helperPod.yaml: kind: must be a v1 Pod"),
    ("metadata: {name: x}", "helperPod.yaml: spec: is required: a Pod spec with one container"),
    ("spec: {containers: []}", "helperPod.yaml: spec.containers: must list the helper container"),
    (
        "spec: {containers: [{name: x}]}",
        "helperPod.yaml: spec.containers[0].image: is required: an image with /bin/sh",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BROKEN_TEMPLATES)
def test_broken_templates_are_refused_even_when_unsafe_is_allowed(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_helper_template(text, allow_unsafe=True)
    assert str(caught.value) == expected


def test_hardening_fields_are_welcome() -> None:
    template = with_(
        f"{C}.securityContext",
        {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    )
    template["spec"]["securityContext"] = {"fsGroup": 2000, "runAsNonRoot": True}
    template["spec"]["containers"][0]["env"] = [{"name": "TZ", "value": "UTC"}]
    template["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64Mi"}}
    validate_helper_template(template)
    # and they reach the helper pod unchanged
    pod = build(bundle=dataclasses.replace(BUNDLE, helper_pod_template=template))
    container = pod["spec"]["containers"][0]
    assert container["securityContext"] == template["spec"]["containers"][0]["securityContext"]
    assert pod["spec"]["securityContext"] == {"fsGroup": 2000, "runAsNonRoot": True}
    assert container["resources"] == {"limits": {"memory": "64Mi"}}
    assert {"name": "TZ", "value": "UTC"} in container["env"]


BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths":'
    ' [{"path": "/opt/lp", "create": true}]}],'
    ' "cmdTimeoutSeconds": 90}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)
TARGET = TeardownPlan(
    volume_name="pvc-1111",
    path="/opt/lp/ns/claim",
    node_name="node-1",
    volume_mode="Filesystem",
    size_bytes=1024,
    delete_volume=True,
    remove_finalizer=True,
    vol_user="1000",
    vol_group="2000",
    vol_perm="0750",
    base_path="/opt/lp",
)


def build(action: Any = "create", target: Any = TARGET, bundle: Any = BUNDLE, **kw: Any) -> Any:
    if action in REMOVING_STEPS:
        kw.setdefault("permit", permit_for(target))
    return build_helper_pod(action, target, bundle, "lps", "helper-sa", **kw)


def test_helper_pod_forces_what_the_template_may_not_choose() -> None:
    pod = build()
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"] == {
        "name": "helper-create-pvc-1111",
        "namespace": "lps",
        "labels": {
            HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE,
            "local-path-storage.io/helper-action": "create",
            "local-path-storage.io/volume": "pvc-1111",
        },
    }
    assert spec["nodeName"] == "node-1"
    assert spec["serviceAccountName"] == "helper-sa"
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 90
    assert spec["priorityClassName"] == "system-node-critical"  # kept from the template
    # The setup code writes only VOL_DIR; it sees the base path read-only, for the guard. Never
    # the volume's parent: a hostPath is resolved on the host, so a parent reached through a
    # planted symlink would mount whatever it points at. VOL_DIR is nested, so `prepare` makes
    # it first, in the same pod, and the setup mounts it as a subPath of the base path (which
    # the kubelet resolves when the setup starts, inside the base path only).
    assert spec["volumes"] == [
        {"name": "base", "hostPath": {"path": "/opt/lp", "type": "DirectoryOrCreate"}},
    ]
    assert container["volumeMounts"] == [
        {"name": "base", "mountPath": BASE_VIEW, "readOnly": True},
        {"name": "base", "mountPath": "/opt/lp/ns/claim", "subPath": "ns/claim"},
    ]
    [prepare] = spec["initContainers"]
    assert prepare["name"] == PREPARE_CONTAINER
    assert prepare["command"] == ["/bin/sh", "-c", PREPARE_SCRIPT, "prepare"]
    assert prepare["volumeMounts"] == [{"name": "base", "mountPath": "/opt/lp"}]
    # The validated script in force, inline (never the ConfigMap's current file), called by the
    # guard in rancher's shape.
    assert container["command"] == ["/bin/sh", "-c", GUARD_SCRIPT, "setup"]
    assert container["args"] == [
        "-p",
        "/opt/lp/ns/claim",
        "-s",
        "1024",
        "-m",
        "Filesystem",
        "-a",
        "create",
    ]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "VOL_DIR": "/opt/lp/ns/claim",
        "VOL_MODE": "Filesystem",
        "VOL_SIZE_BYTES": "1024",
        "VOL_USER": "1000",
        "VOL_GROUP": "2000",
        "VOL_PERM": "0750",
        "LPS_BASE": "/opt/lp",
        "LPS_BASE_VIEW": BASE_VIEW,
        "LPS_SCRIPT": DEFAULT_SETUP_SCRIPT,
        # After a setup that succeeded, the guard sets a project quota where one is enforced.
        **quota_environment("pvc-1111", 1024),
    }
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["image"] == "busybox:1.37.0"


def test_teardown_runs_the_teardown_script() -> None:
    pod = build("delete")
    assert pod["metadata"]["name"] == "helper-delete-pvc-1111"
    # The teardown code runs first, in an init container (see the test below for the rest).
    container = pod["spec"]["initContainers"][0]
    assert container["command"] == ["/bin/sh", "-c", GUARD_SCRIPT, "teardown"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LPS_SCRIPT"] == DEFAULT_TEARDOWN_SCRIPT


def test_one_teardown_pod_runs_the_teardown_code_then_the_fixed_finish_apart_from_it() -> None:
    """One pod per released volume instead of two: the teardown code in an init container
    with only VOL_DIR read-write, then `finish` in the main container with the base path
    read-write, which a kubelet starts only once the teardown succeeded."""
    pod = build("delete")
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["teardown"]
    assert [c["name"] for c in spec["containers"]] == ["finish"]
    teardown, finish = spec["initContainers"][0], spec["containers"][0]
    assert spec["volumes"] == [
        {"name": "base", "hostPath": {"path": "/opt/lp", "type": "DirectoryOrCreate"}},
        {"name": "data", "hostPath": {"path": "/opt/lp/ns/claim", "type": "DirectoryOrCreate"}},
    ]
    assert teardown["volumeMounts"] == [
        {"name": "base", "mountPath": BASE_VIEW, "readOnly": True},
        {"name": "data", "mountPath": "/opt/lp/ns/claim"},
    ]
    assert finish["volumeMounts"] == [{"name": "base", "mountPath": "/opt/lp"}]
    assert finish["command"] == ["/bin/sh", "-c", FINISH_SCRIPT, "finish"]
    assert finish["args"] == []
    finish_env = {e["name"]: e["value"] for e in finish["env"]}
    assert (finish_env["VOL_DIR"], finish_env["LPS_BASE"]) == ("/opt/lp/ns/claim", "/opt/lp")
    assert "LPS_SCRIPT" not in finish_env
    for container in (teardown, finish):
        assert container["image"] == "busybox:1.37.0"
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # The pod as a whole still gets what every helper is forced to be.
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["activeDeadlineSeconds"] == 90


def test_steps_make_and_remove_the_directory_with_fixed_scripts() -> None:
    assert helper_steps("create", TARGET, BUNDLE.config) == ("prepare", "create")
    flat = TeardownPlan(
        "pvc-4", "/opt/lp/pvc-4_ns_c", "n", "Filesystem", 0, True, False, base_path="/opt/lp"
    )
    assert helper_steps("create", flat, BUNDLE.config) == ("create",)
    assert helper_steps("delete", flat, BUNDLE.config) == ("delete",)
    for step, script in (("prepare", PREPARE_SCRIPT), ("finish", FINISH_SCRIPT)):
        pod = build(step)
        container = pod["spec"]["containers"][0]
        assert pod["metadata"]["name"] == f"helper-{step}-pvc-1111"
        assert container["command"] == ["/bin/sh", "-c", script, step]
        assert container["volumeMounts"] == [{"name": "base", "mountPath": "/opt/lp"}]
        assert "LPS_SCRIPT" not in {e["name"] for e in container["env"]}
    # Without a prepare step the kubelet makes the one directory in the base path.
    volumes = build("create", target=flat)["spec"]["volumes"]
    assert volumes[1]["hostPath"] == {"path": "/opt/lp/pvc-4_ns_c", "type": "DirectoryOrCreate"}


def test_configured_commands_replace_the_scripts() -> None:
    bundle = load_config_bundle(
        json.dumps(
            {
                "sharedFileSystemPath": "/nfs",
                "setupCommand": "/bin/lp-setup",
                "teardownCommand": "/bin/lp-teardown",
            }
        ),
        "",
        "",
        DEFAULT_HELPER_POD_YAML,
    )
    pod = build("delete", bundle=bundle)
    container = pod["spec"]["initContainers"][0]
    # The command gets no more reach than a script: VOL_DIR read-write, behind the guard.
    assert container["command"] == ["/bin/sh", "-c", GUARD_SCRIPT, "teardown"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LPS_COMMAND"] == "/bin/lp-teardown"
    assert "LPS_SCRIPT" not in env
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["base", "data"]
    assert container["volumeMounts"][0]["readOnly"] is True


def test_template_env_survives_but_cannot_override_ours() -> None:
    template = with_(
        f"{C}.env", [{"name": "TZ", "value": "UTC"}, {"name": "VOL_DIR", "value": "/"}]
    )
    bundle = type(BUNDLE)(BUNDLE.config, "x", "x", template)
    env = build(bundle=bundle)["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "TZ", "value": "UTC"}
    assert [e["value"] for e in env if e["name"] == "VOL_DIR"] == ["/opt/lp/ns/claim"]


def test_a_helper_is_given_a_short_grace_unless_its_template_sets_one() -> None:
    """A kubelet ends a pod past its deadline with TERM, then KILL after the grace, which the
    helper's `sh` (the container's first process, deaf to TERM) always waits out."""
    assert build()["spec"]["terminationGracePeriodSeconds"] == HELPER_GRACE_SECONDS
    template = with_("spec.terminationGracePeriodSeconds", 20)
    bundle = type(BUNDLE)(BUNDLE.config, "x", "x", template)
    assert build(bundle=bundle)["spec"]["terminationGracePeriodSeconds"] == 20


def test_shared_path_helper_is_left_to_the_scheduler() -> None:
    shared = TeardownPlan(
        "pvc-2", "/nfs/pvc-2_ns_c", None, "Filesystem", 0, True, False, base_path="/nfs"
    )
    assert "nodeName" not in build(target=shared)["spec"]


def test_template_is_not_mutated() -> None:
    before = copy.deepcopy(BUNDLE.helper_pod_template)
    build()
    assert before == BUNDLE.helper_pod_template


@pytest.mark.parametrize(
    ("path", "base"),
    [
        ("relative/x", "relative"),
        ("/opt/lp", "/opt/lp"),
        ("/opt/lpx/a", "/opt/lp"),
        ("/opt/lp/a", ""),
    ],
)
def test_helper_refuses_a_path_not_strictly_inside_its_base(path: str, base: str) -> None:
    target = TeardownPlan("pvc-3", path, "n", "Filesystem", 0, True, False, base_path=base)
    with pytest.raises(ValueError, match="not strictly inside its base path"):
        build(target=target)


def test_helper_pod_names_are_short_and_deterministic() -> None:
    assert helper_pod_name("create", "pvc-0b5c3f3e-7f0e-4d39-9b52-3f7d2e3c9a11") == (
        "helper-create-pvc-0b5c3f3e-7f0e-4d39-9b52-3f7d2e3c9a11"
    )
    long_name = "imported-" + "x" * 200
    name = helper_pod_name("delete", long_name)
    assert len(name) <= 63
    assert name == helper_pod_name("delete", long_name)
    assert name != helper_pod_name("delete", long_name + "y")


@pytest.mark.parametrize(
    ("path", "value", "key"),
    [
        ("spec.runtimeClassName", "kata-unsafe", "spec.runtimeClassName"),
        ("spec.hostUsers", True, "spec.hostUsers"),
        ("spec.shareProcessNamespace", True, "spec.shareProcessNamespace"),
        ("spec.hostAliases", [{"ip": "1.2.3.4"}], "spec.hostAliases"),
        (f"{C}.securityContext.seLinuxOptions", {"type": "spc_t"}, "seLinuxOptions"),
        (f"{C}.securityContext.procMount", "Unmasked", "procMount"),
        ("spec.securityContext.seLinuxOptions", {"type": "spc_t"}, "seLinuxOptions"),
        (f"{C}.ports", [{"containerPort": 80}], "spec.containers[0].ports"),
        (f"{C}.stdin", True, "spec.containers[0].stdin"),
    ],
)
def test_fields_not_on_the_allow_list_are_refused(path: str, value: Any, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_helper_template(with_(path, value))
    assert key in str(caught.value)
    assert "is not allowed in a helper template" in str(caught.value)
    assert str(caught.value).endswith(HINT)
    validate_helper_template(with_(path, value), allow_unsafe=True)


@pytest.mark.parametrize(
    "path",
    [
        f"{C}.securityContext.seccompProfile",
        f"{C}.securityContext.appArmorProfile",
        "spec.securityContext.seccompProfile",
        "spec.securityContext.appArmorProfile",
    ],
)
def test_unconfined_profiles_are_refused(path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_helper_template(with_(path, {"type": "Unconfined"}))
    assert f"{path.replace('containers.0', 'containers[0]')}.type: must be RuntimeDefault" in str(
        caught.value
    )
    validate_helper_template(with_(path, {"type": "RuntimeDefault"}))


def test_legacy_profile_annotations_are_refused() -> None:
    template = with_(
        "metadata.annotations",
        {"container.apparmor.security.beta.kubernetes.io/helper-pod": "unconfined"},
    )
    with pytest.raises(ConfigError, match="must not be set"):
        validate_helper_template(template)


def run_guard(mounted: Path, base: Path, view: Path, script: str) -> tuple[int, str]:
    """The guard as the helper runs it: VOL_DIR is `mounted`, the base path `base`, seen
    read-only at `view`."""
    done = subprocess.run(
        ["/bin/sh", "-c", GUARD_SCRIPT, "setup", "-p", str(mounted)],
        env={
            "PATH": os.environ["PATH"],
            "VOL_DIR": str(mounted),
            "LPS_BASE": str(base),
            "LPS_BASE_VIEW": str(view),
            "LPS_SCRIPT": script,
        },
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_guard_runs_the_code_only_on_the_real_directory(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "victim").mkdir(parents=True)
    (base / "own").mkdir()
    script = 'echo "ran $0 $*"'
    # The mount is the directory itself (here: the same path, as a bind mount would be).
    assert run_guard(base / "own", base, base, script) == (0, f"ran setup -p {base}/own\n")
    # A link in the base path redirected the host mount: refused before the code runs.
    (base / "evil").symlink_to("victim")
    code, output = run_guard(base / "evil", base, base, script)
    assert code == 1
    assert f"its real path is {base}/victim" in output
    assert "ran" not in output
    # What is mounted at VOL_DIR is another directory than the one seen in the base path.
    mount = tmp_path / "mount"
    (mount / "own").mkdir(parents=True)
    code, output = run_guard(mount / "own", mount, base, script)
    assert code == 1
    assert "the directory mounted at it is another one" in output
    assert "ran" not in output


MOUNTED_BUNDLE = load_config_bundle(
    '{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths":'
    ' [{"path": "/opt/lp", "mountPoint": true}]}]}',
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


def test_a_teardown_under_a_declared_mount_point_checks_its_filesystem_is_mounted() -> None:
    """The guard checks the base path, as this pod mounts it (read-only at BASE_VIEW), is the
    root of a mounted filesystem before the teardown code runs; a plain base path has no such
    check."""
    mounted = build("delete", bundle=MOUNTED_BUNDLE)["spec"]["initContainers"][0]
    assert {"name": "LPS_MOUNT_POINT", "value": BASE_VIEW} in mounted["env"]
    plain = build("delete")["spec"]["initContainers"][0]
    assert "LPS_MOUNT_POINT" not in {e["name"] for e in plain["env"]}


def test_the_guard_removes_nothing_through_a_mount_point_with_no_disk(tmp_path: Path) -> None:
    """Under an empty mount point (its disk not mounted), VOL_DIR may be a directory on the root
    filesystem: removing it would let the PV go while the data waits on the disk. The guard
    refuses before the teardown code runs, as `prepare` does before a setup."""
    base = tmp_path / "base"
    (base / "own").mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("1500 1400 0:52 / / rw,relatime - overlay overlay rw\n")
    done = subprocess.run(
        ["/bin/sh", "-c", GUARD_SCRIPT, "teardown", "-p", str(base / "own")],
        env={
            "PATH": os.environ["PATH"],
            "VOL_DIR": str(base / "own"),
            "LPS_BASE": str(base),
            "LPS_BASE_VIEW": str(base),
            "LPS_SCRIPT": 'echo "ran $0"; rm -rf "$VOL_DIR"/*',
            "LPS_MOUNT_POINT": str(base),
            "LPS_MOUNTINFO": str(mountinfo),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert f"its base path {base} is declared a mount point" in done.stderr
    assert "no filesystem is mounted there on this node: mount it" in done.stderr
    assert "ran" not in done.stdout
    assert (base / "own").is_dir()
