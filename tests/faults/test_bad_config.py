"""Invalid configurations pushed as hot reloads to a running provisioner.

Each must be refused with an InvalidConfig Warning on the ConfigMap and a log line, both naming
the key at fault, while the last valid configuration stays in force: a claim made after all of
them still lands under the good base path. The variants are spread over four provisioners (each
half of the config.json ones, each half of the helperPod.yaml ones) because the event recorder,
like client-go's, lets one object have 25 events before rate-limiting it. An invalid config at
start-up keeps the process up, not ready and idle until the ConfigMap is fixed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from localcluster import wait_for
from localcluster.raw_api import call_json
from provisioner.configuration.config import DEFAULT_HELPER_POD_YAML, DEFAULT_NODE, MAX_SCRIPT_BYTES
from tests.faults.support import (
    assert_no_orphan_directories,
    create_claims_with_consumers,
    lease_holder,
    metric,
    our_volumes,
    purge,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import (
    CONFIGMAP,
    ConfigFiles,
    ProvisionerProcess,
    ProvisionerSetup,
    default_config,
    volume_node,
    volume_path,
)

pytestmark = pytest.mark.cluster

ELSEWHERE = "/opt/faults-never-used"


@dataclass
class RawConfigFiles(ConfigFiles):
    """ConfigFiles whose config.json is given as text (to be not even JSON)."""

    config_text: str = ""

    def as_keys(self) -> dict[str, str]:
        keys = super().as_keys()
        keys["config.json"] = self.config_text or keys["config.json"]
        return keys


def paths(*given: Any, node: str = DEFAULT_NODE) -> dict[str, Any]:
    return {"nodePathMap": [{"node": node, "paths": list(given)}]}


# (what is wrong, config.json as a dict or as text, a fragment the refusal must contain)
CONFIG_JSON_VARIANTS: list[tuple[str, dict[str, Any] | str, str]] = [
    ("not JSON", '{"nodePathMap": [', "config.json: is not valid JSON"),
    ("not an object", "[]", "config.json: must be a JSON object"),
    ("relative path", paths("opt/data"), 'nodePathMap[0].paths[0]: "opt/data" must be an'),
    ("root path", paths("/"), 'nodePathMap[0].paths[0]: "/" is the root directory'),
    ("dotdot path", paths("/opt/x/../etc"), 'nodePathMap[0].paths[0]: "/opt/x/../etc" is not'),
    ("double slash", paths("/opt//x"), 'nodePathMap[0].paths[0]: "/opt//x" is not written'),
    ("empty path", paths(""), "nodePathMap[0].paths[0]: must not be empty"),
    ("NUL in path", paths("/opt/a\u0000b"), 'nodePathMap[0].paths[0]: "/opt/a\\u0000b" must'),
    ("path not a string", paths(7), "nodePathMap[0].paths[0]: must be a string"),
    (
        "paths not a list",
        {"nodePathMap": [{"node": DEFAULT_NODE, "paths": ELSEWHERE}]},
        "nodePathMap[0].paths: must be a list",
    ),
    (
        "duplicate path",
        paths(ELSEWHERE, ELSEWHERE),
        "nodePathMap[0].paths[1]: duplicate path",
    ),
    (
        "duplicate node",
        {"nodePathMap": [paths(ELSEWHERE)["nodePathMap"][0]] * 2},
        "nodePathMap[1].node: duplicate node",
    ),
    ("empty node", paths(ELSEWHERE, node=""), "nodePathMap[0].node: must name a node"),
    ("unknown key", {"nodePathMaps": paths(ELSEWHERE)["nodePathMap"]}, "nodePathMaps: unknown"),
    (
        "unknown entry key",
        {"nodePathMap": [{"node": DEFAULT_NODE, "path": [ELSEWHERE]}]},
        "nodePathMap[0].path: unknown key",
    ),
    (
        "key given twice",
        '{"nodePathMap": [], "nodePathMap": [{"node": "x", "paths": ["/opt/faults-x"]}]}',
        "nodePathMap: is given more than once",
    ),
    (
        "key given twice in another case",
        {**paths(ELSEWHERE), "NodePathMap": []},
        "NodePathMap: is nodePathMap given a second time",
    ),
    (
        "shared path next to a node map",
        {**paths(ELSEWHERE), "sharedFileSystemPath": "/opt/faults-shared"},
        "sharedFileSystemPath: cannot be combined",
    ),
    (
        "top-level map next to class configs",
        {**paths(ELSEWHERE), "storageClassConfigs": {"x": paths(ELSEWHERE)}},
        "nodePathMap: must be unset when storageClassConfigs is set",
    ),
    (
        "class config without storage",
        {"storageClassConfigs": {"x": {}}},
        'storageClassConfigs["x"]: set either nodePathMap or sharedFileSystemPath',
    ),
    ("no storage at all", {}, "config.json: no storage configured"),
    (
        "one directory shared and a node path",
        {
            "storageClassConfigs": {
                "a": {"sharedFileSystemPath": ELSEWHERE},
                "b": paths(ELSEWHERE),
            }
        },
        'storageClassConfigs["b"].nodePathMap[0].paths[0]: "/opt/faults-never-used" is also',
    ),
    (
        "zero timeout",
        {**paths(ELSEWHERE), "cmdTimeoutSeconds": 0},
        "cmdTimeoutSeconds: must be a positive number of seconds",
    ),
    (
        "timeout as text",
        {**paths(ELSEWHERE), "cmdTimeoutSeconds": "120"},
        "cmdTimeoutSeconds: must be a whole number",
    ),
    (
        "setup command with arguments",
        {**paths(ELSEWHERE), "setupCommand": "/bin/sh -c 'rm -rf /'"},
        "setupCommand: ",
    ),
]


def helper_pod(extra_spec: str = "", extra_container: str = "", image: str = "busybox") -> str:
    return (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: helper-pod\nspec:\n"
        f"{extra_spec}"
        f"  containers:\n  - name: helper-pod\n    image: {image}\n{extra_container}"
    )


# (what is wrong, files that differ from the good ones, a fragment the refusal must contain)
TEMPLATE_VARIANTS: list[tuple[str, Mapping[str, str], str]] = [
    ("not YAML", {"helper_pod": "spec: [\n"}, "helperPod.yaml: is not valid YAML at line"),
    ("not a mapping", {"helper_pod": "- a\n- b\n"}, "helperPod.yaml: must be a Pod manifest"),
    (
        "not a Pod",
        {"helper_pod": DEFAULT_HELPER_POD_YAML.replace("kind: Pod", "kind: Deployment")},
        "helperPod.yaml: kind: must be a v1 Pod",
    ),
    ("no spec", {"helper_pod": "apiVersion: v1\nkind: Pod\n"}, "helperPod.yaml: spec: is required"),
    (
        "no containers",
        {"helper_pod": "apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n"},
        "helperPod.yaml: spec.containers: must list the helper container",
    ),
    (
        "no image",
        {"helper_pod": helper_pod(image='""')},
        "helperPod.yaml: spec.containers[0].image: is required",
    ),
    (
        "two containers",
        {"helper_pod": helper_pod(extra_container="  - name: sidecar\n    image: busybox\n")},
        "helperPod.yaml: spec.containers: must hold exactly one container, not 2",
    ),
    (
        "init container",
        {"helper_pod": helper_pod("  initContainers:\n  - name: i\n    image: busybox\n")},
        "helperPod.yaml: spec.initContainers: must not be set",
    ),
    (
        "own volumes",
        {"helper_pod": helper_pod("  volumes:\n  - name: root\n    hostPath: {path: /}\n")},
        "helperPod.yaml: spec.volumes: must not be set",
    ),
    (
        "host network",
        {"helper_pod": helper_pod("  hostNetwork: true\n")},
        "helperPod.yaml: spec.hostNetwork: must not be true",
    ),
    (
        "host PID",
        {"helper_pod": helper_pod("  hostPID: true\n")},
        "helperPod.yaml: spec.hostPID: must not be true",
    ),
    (
        "node name",
        {"helper_pod": helper_pod("  nodeName: node-1\n")},
        "helperPod.yaml: spec.nodeName: must not be set",
    ),
    (
        "service account",
        {"helper_pod": helper_pod("  serviceAccountName: admin\n")},
        "helperPod.yaml: spec.serviceAccountName: must not be set",
    ),
    (
        "volume mounts",
        {
            "helper_pod": helper_pod(
                extra_container="    volumeMounts:\n    - {name: x, mountPath: /x}\n"
            )
        },
        "helperPod.yaml: spec.containers[0].volumeMounts: must not be set",
    ),
    (
        "env from a secret",
        {"helper_pod": helper_pod(extra_container="    envFrom:\n    - secretRef: {name: s}\n")},
        "helperPod.yaml: spec.containers[0].envFrom: must not be set",
    ),
    (
        "env value from a secret",
        {
            "helper_pod": helper_pod(
                extra_container="    env:\n    - name: T\n"
                "      valueFrom: {secretKeyRef: {name: s, key: k}}\n"
            )
        },
        "helperPod.yaml: spec.containers[0].env[0].valueFrom: must not read secrets",
    ),
    (
        "lifecycle hook",
        {
            "helper_pod": helper_pod(
                extra_container="    lifecycle:\n      preStop: {exec: {command: [sh]}}\n"
            )
        },
        "helperPod.yaml: spec.containers[0].lifecycle: must not be set",
    ),
    (
        "probe",
        {"helper_pod": helper_pod(extra_container="    livenessProbe: {exec: {command: [sh]}}\n")},
        "helperPod.yaml: spec.containers[0].livenessProbe: must not be set",
    ),
    (
        "privileged",
        {"helper_pod": helper_pod(extra_container="    securityContext: {privileged: true}\n")},
        "helperPod.yaml: spec.containers[0].securityContext.privileged: must not be true",
    ),
    (
        "added capabilities",
        {
            "helper_pod": helper_pod(
                extra_container="    securityContext: {capabilities: {add: [SYS_ADMIN]}}\n"
            )
        },
        "helperPod.yaml: spec.containers[0].securityContext.capabilities.add: must not add",
    ),
    (
        "privilege escalation",
        {
            "helper_pod": helper_pod(
                extra_container="    securityContext: {allowPrivilegeEscalation: true}\n"
            )
        },
        "helperPod.yaml: spec.containers[0].securityContext.allowPrivilegeEscalation: must not",
    ),
    (
        "root user",
        {"helper_pod": helper_pod("  securityContext: {runAsUser: 0}\n")},
        "helperPod.yaml: spec.securityContext.runAsUser: must not be 0",
    ),
    (
        "sysctls",
        {"helper_pod": helper_pod("  securityContext: {sysctls: [{name: a, value: b}]}\n")},
        "helperPod.yaml: spec.securityContext.sysctls: must not be set",
    ),
    (
        "unknown API version",
        {"helper_pod": DEFAULT_HELPER_POD_YAML.replace("apiVersion: v1", "apiVersion: v2")},
        "helperPod.yaml: kind: must be a v1 Pod",
    ),
    (
        "no image key",
        {"helper_pod": "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: x\n"},
        "helperPod.yaml: spec.containers[0].image: is required",
    ),
]


def invalid_config_events(setup: ProvisionerSetup) -> dict[str, tuple[int, str]]:
    """InvalidConfig events on the setup's ConfigMap: name -> (count, message)."""
    listed = call_json(
        setup.core.list_namespaced_event,
        setup.namespace,
        field_selector=f"involvedObject.name={CONFIGMAP},reason=InvalidConfig",
    )
    return {
        event["metadata"]["name"]: (int(event.get("count") or 1), event["message"])
        for event in listed["items"]
    }


KEPT_LAST_VALID = "refused the new configuration, the last valid one stays in force"


def push_and_expect_refusal(
    setup: ProvisionerSetup,
    replica: ProvisionerProcess,
    files: ConfigFiles,
    fragment: str,
    expected_start: str = KEPT_LAST_VALID,
) -> str:
    """Pushes the files; returns the refusal's event message (new event or a higher count)."""
    before = invalid_config_events(setup)
    setup.update_config(files)

    def refused() -> str | None:
        for name, (count, message) in invalid_config_events(setup).items():
            if fragment in message and before.get(name, (0, ""))[0] < count:
                return message
        return None

    message = wait_for(refused, 20, f"an InvalidConfig event containing {fragment!r}", 0.2)
    assert message.startswith(expected_start), message
    logged = [line for line in replica.log().splitlines() if "refused new configuration" in line]
    assert any(fragment in line for line in logged), f"no log line containing {fragment!r}"
    return message


def bind_one(setup: ProvisionerSetup, storage_class: str, name: str) -> dict[str, Any]:
    create_claims_with_consumers(setup, storage_class, [name])
    wait_all_bound(setup, [name], timeout=120)
    return setup.wait_bound(name)


def check_the_good_config_is_still_in_force(
    setup: ProvisionerSetup, replica: ProvisionerProcess, storage_class: str, good_base: str
) -> None:
    volume = bind_one(setup, storage_class, "after-all-refusals")
    path = volume_path(volume)
    assert path.startswith(good_base + "/"), f"{path} is not under the last good {good_base}"
    wait_no_helper_pods(setup, timeout=60)
    assert_no_orphan_directories(setup.cluster, [good_base, ELSEWHERE], our_volumes(setup))
    assert replica.alive()
    assert metric(replica.metrics(), "local_path_config_reload_total", result="success") == 0


@pytest.mark.parametrize("half", [0, 1], ids=["first-half", "second-half"])
def test_invalid_config_json_hot_reloads_are_refused_and_the_last_good_one_stays(
    make_setup: Callable[..., ProvisionerSetup], half: int
) -> None:
    assert len(CONFIG_JSON_VARIANTS) >= 20
    good_base = unique_base_path("goodconfig")
    setup = make_setup(ConfigFiles(config=default_config(good_base)))
    replica = setup.start()
    storage_class = setup.create_class("goodconfig")
    bind_one(setup, storage_class, "before-any-refusal")

    variants = CONFIG_JSON_VARIANTS[half::2]
    messages = []
    for what, config, fragment in variants:
        if isinstance(config, str):
            files: ConfigFiles = RawConfigFiles(config_text=config)
        else:
            files = ConfigFiles(config=config)
        message = push_and_expect_refusal(setup, replica, files, fragment)
        messages.append(f"{what}: {message}")
    print("\n".join(messages))
    invalid = metric(replica.metrics(), "local_path_config_reload_total", result="invalid")
    assert invalid >= len(variants)
    on_disk = (setup.config_dir / "config.json").read_text()
    last = variants[-1][1]
    assert (on_disk if isinstance(last, str) else json.loads(on_disk)) == last
    check_the_good_config_is_still_in_force(setup, replica, storage_class, good_base)


@pytest.mark.parametrize("half", [0, 1], ids=["first-half", "second-half"])
def test_invalid_helper_templates_are_refused_and_the_last_good_one_stays(
    make_setup: Callable[..., ProvisionerSetup], half: int
) -> None:
    assert len(TEMPLATE_VARIANTS) >= 20
    good_base = unique_base_path("goodtemplate")
    setup = make_setup(ConfigFiles(config=default_config(good_base)))
    replica = setup.start()
    storage_class = setup.create_class("goodtemplate")
    bind_one(setup, storage_class, "before-any-refusal")

    messages = []
    for what, changes, fragment in TEMPLATE_VARIANTS[half::2]:
        files = ConfigFiles(config=default_config(good_base), **changes)
        message = push_and_expect_refusal(setup, replica, files, fragment)
        messages.append(f"{what}: {message}")
    print("\n".join(messages))
    check_the_good_config_is_still_in_force(setup, replica, storage_class, good_base)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"setup": ""}, "setup: the setup script is empty"),
        (
            {"setup": "#!/bin/sh\necho refused script ran\n", "helper_pod": "- not a pod\n"},
            "helperPod.yaml",
        ),
        (
            {"setup": "#" * (MAX_SCRIPT_BYTES + 1)},
            f"setup: the setup script is {MAX_SCRIPT_BYTES + 1} bytes, over the",
        ),
    ],
    ids=["empty-setup", "new-setup-in-a-refused-bundle", "setup-over-a-helper-pods-limit"],
)
def test_a_refused_setup_script_is_not_what_helper_pods_run(
    make_setup: Callable[..., ProvisionerSetup], changes: Mapping[str, str], fragment: str
) -> None:
    good_base = unique_base_path("goodscript")
    setup = make_setup(ConfigFiles(config=default_config(good_base)))
    replica = setup.start()
    storage_class = setup.create_class("goodscript")
    push_and_expect_refusal(
        setup, replica, ConfigFiles(config=default_config(good_base), **changes), fragment
    )
    volume = bind_one(setup, storage_class, "after-refusal")
    directory = setup.node_path(volume_node(volume), volume_path(volume))
    assert directory.is_dir(), "the last valid setup script did not run: the refused one did"


def wait_not_ready_saying(replica: ProvisionerProcess, fragment: str) -> str:
    def not_ready() -> str | None:
        assert replica.alive(), f"the provisioner exited:\n{replica.log()[-3000:]}"
        status, body = replica.probe("/readyz")
        return body if status == 503 and fragment in body else None

    return wait_for(not_ready, 30, f"/readyz to answer 503 naming {fragment!r}", 0.2)


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (ConfigFiles(config=paths("opt/relative")), "nodePathMap[0].paths[0]"),
        (
            ConfigFiles(helper_pod=helper_pod("  hostNetwork: true\n")),
            "helperPod.yaml: spec.hostNetwork: must not be true",
        ),
    ],
    ids=["config-json", "helper-template"],
)
def test_an_invalid_config_at_start_up_waits_not_ready_until_it_is_fixed(
    make_setup: Callable[..., ProvisionerSetup], bad: ConfigFiles, fragment: str
) -> None:
    good_base = unique_base_path("startfixed")
    setup = make_setup(bad)
    replica = setup.start(wait_ready=False)
    body = wait_not_ready_saying(replica, fragment)
    assert f"ConfigMap {setup.namespace}/{CONFIGMAP}" in body
    assert replica.probe("/healthz")[0] == 200, "a waiting replica must not be restarted"

    def warned() -> str | None:
        messages = [message for _, message in invalid_config_events(setup).values()]
        return next((message for message in messages if fragment in message), None)

    message = wait_for(warned, 20, f"an InvalidConfig event containing {fragment!r}", 0.2)
    assert message.startswith("no valid configuration at start-up, not provisioning")

    # Without a valid config it neither leads nor works: a claim waits, no PV is made.
    storage_class = setup.create_class("startfixed")
    create_claims_with_consumers(setup, storage_class, ["made-while-invalid"])
    time.sleep(3)
    assert setup.phase("made-while-invalid") == "Pending"
    assert not our_volumes(setup)
    assert lease_holder(setup) == ""

    # A second bad version is refused too, still naming its key; then the fix starts it.
    push_and_expect_refusal(
        setup,
        replica,
        ConfigFiles(config=paths("/")),
        'nodePathMap[0].paths[0]: "/" is the root',
        expected_start="refused the new configuration, still not provisioning",
    )
    assert replica.probe("/readyz")[0] == 503
    fixed = ConfigFiles(config=default_config(good_base))
    try:
        setup.update_config(fixed)
        setup.wait_ready(replica, timeout=30)
        volume = setup.wait_bound("made-while-invalid", timeout=120)
        assert volume_path(volume).startswith(good_base + "/")
        assert metric(replica.metrics(), "local_path_config_reload_total", result="success") == 1
        assert replica.alive()
    finally:
        setup.stop_all()
        purge(setup, fixed)
