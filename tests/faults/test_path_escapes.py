"""Attempts to make the provisioner create or delete something outside its base paths.

Claims: hostile pathPatterns, annotations and labels feeding them, nodePath parameters not
configured, a claim name too long for a directory. Volumes: PVs forged with our provisioned-by
annotation whose path is outside the base paths, the base path itself, a sibling with the same
prefix, written with `..`, `.` or doubled slashes, another volume's directory, or on a node the
PV cannot be tied to. Each must be refused with an Event saying why, and a snapshot of every
node's directory taken before and after may differ only where a legitimate volume was made or
removed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from localcluster import wait_for
from localcluster.raw_api import call_json, manifest
from provisioner.configuration.config import DEFAULT_HELPER_POD_YAML, DEFAULT_NODE
from provisioner.helper_pods.pod_shapes import BASE_VIEW
from tests.faults.support import (
    HelperPodRecorder,
    changed_paths,
    create_claims_with_consumers,
    events_with_reason,
    helper_pods,
    node_relative,
    our_volumes,
    snapshot_nodes,
    unexpected_changes,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    volume_node,
    volume_path,
)
from tests.provisioner.e2e.test_quota import STAND_IN as QUOTA_STAND_IN

pytestmark = pytest.mark.cluster

SUB = '{{ index .PVC.Annotations "sub" }}'
SCOPED = "{{ .PVC.Namespace }}/{{ .PVC.Name }}/" + SUB
UNSAFE_CHARACTER_REFUSED = "control characters and backslashes are refused in volume paths"


@dataclass(frozen=True)
class ClaimEscape:
    parameters: Mapping[str, str]
    expected: str
    """A fragment of the ProvisioningFailed message."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    class_annotations: Mapping[str, str] = field(default_factory=dict)
    claim_name: str = ""


def claim_escapes(base: str) -> dict[str, ClaimEscape]:
    unsafe = {"allowUnsafePathPattern": "true"}
    return {
        "dotdot-annotation": ClaimEscape(
            {"pathPattern": SCOPED}, "has a '..' component", {"sub": "../../victim-ns/victim"}
        ),
        "bare-dotdot-annotation": ClaimEscape(
            {"pathPattern": SCOPED}, "has a '..' component", {"sub": ".."}
        ),
        "dot-annotation": ClaimEscape({"pathPattern": SCOPED}, "has a '.' component", {"sub": "."}),
        "absolute-annotation": ClaimEscape(
            {"pathPattern": SCOPED}, "has an empty component", {"sub": "/etc/passwd"}
        ),
        "missing-annotation": ClaimEscape(
            {"pathPattern": SCOPED + "/data"}, "has an empty component"
        ),
        "line-break-annotation": ClaimEscape(
            {"pathPattern": SCOPED}, UNSAFE_CHARACTER_REFUSED, {"sub": "a\nb"}
        ),
        "outside-own-namespace": ClaimEscape(
            {"pathPattern": SUB}, "is not inside", {"sub": "victim-ns/victim"}
        ),
        "other-namespace-by-label": ClaimEscape(
            {"pathPattern": '{{ index .PVC.Labels "team" }}/{{ .PVC.Name }}'},
            "is not inside",
            labels={"team": "victim-ns"},
        ),
        "namespace-directory-itself": ClaimEscape(
            {"pathPattern": "{{ .PVC.Namespace }}"}, "is not inside"
        ),
        "literal-dotdot-pattern": ClaimEscape(
            {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}/../../.."},
            "parameters.pathPattern: rendered path",
        ),
        "absolute-pattern": ClaimEscape(
            {"pathPattern": "/etc/{{ .PVC.Name }}"}, "parameters.pathPattern: rendered path"
        ),
        "dot-pattern": ClaimEscape({"pathPattern": "."}, "parameters.pathPattern"),
        "template-function": ClaimEscape(
            {"pathPattern": '{{ printf "../%s" .PVC.Name }}'}, "unsupported action"
        ),
        "unsafe-pattern-dotdot": ClaimEscape(
            {"pathPattern": SUB, **unsafe}, "has a '..' component", {"sub": "../etc"}
        ),
        "unsafe-pattern-absolute": ClaimEscape(
            {"pathPattern": SUB, **unsafe}, "is absolute", {"sub": "/etc"}
        ),
        "unsafe-class-annotation-dotdot": ClaimEscape(
            {"pathPattern": "{{ .PVC.Name }}/" + SUB},
            "has a '..' component",
            {"sub": "../../.."},
            class_annotations=unsafe,
        ),
        "node-path-not-configured": ClaimEscape(
            {"nodePath": "/etc"}, 'parameters.nodePath: "/etc" is not configured'
        ),
        "node-path-root": ClaimEscape({"nodePath": "/"}, "is the root directory"),
        "node-path-sibling-prefix": ClaimEscape(
            {"nodePath": f"{base}-evil"}, f'"{base}-evil" is not configured'
        ),
        "node-path-dotdot": ClaimEscape(
            {"nodePath": f"{base}/../../etc"}, "is not written in normalised form"
        ),
        "node-path-relative": ClaimEscape({"nodePath": "etc"}, "must be an absolute path"),
        "hostile-volume-type": ClaimEscape(
            {}, "is not a volume type", {"volumeType": "../../hostPath"}
        ),
        "hostile-user-pattern": ClaimEscape(
            {"userPattern": '{{ index .PVC.Annotations "user" }}'},
            "userPattern renders a NUL or line break",
            {"user": "root\nrm -rf /"},
        ),
        "hostile-perm-pattern": ClaimEscape(
            {"permPattern": "0777; rm -rf /"}, "is not an octal mode"
        ),
    }


# Claim names that would be path components the API does not allow in the first place.
API_REFUSED_CLAIM_NAMES = ("..", ".", "a..b", "-a", "a/b", "A", "a b")


def test_hostile_claims_are_refused_and_nothing_outside_the_base_path_is_touched(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("escape")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    cluster = setup.cluster
    before = snapshot_nodes(cluster)
    setup.start()
    cases = claim_escapes(base)
    for number, (case, escape) in enumerate(sorted(cases.items())):
        storage_class = setup.create_class(
            f"esc{number}",
            parameters=escape.parameters,
            annotations=escape.class_annotations,
        )
        setup.create_claim(
            case, storage_class, annotations=escape.annotations, labels=escape.labels
        )
        setup.create_consumer(case, case)
    control_class = setup.create_class("control")
    create_claims_with_consumers(setup, control_class, ["control"])
    for hostile_name in API_REFUSED_CLAIM_NAMES:
        with pytest.raises(ApiException) as refused:
            setup.create_claim(hostile_name, control_class)
        assert refused.value.status == 422, hostile_name

    wait_all_bound(setup, ["control"], timeout=120)
    refusals: dict[str, str] = {}

    def all_refused() -> bool | None:
        for case in cases:
            if case not in refusals:
                events = events_with_reason(setup, case, "ProvisioningFailed")
                if events:
                    refusals[case] = events[0]["message"]
        return True if len(refusals) == len(cases) else None

    try:
        wait_for(all_refused, 60, "every hostile claim to be refused", interval=0.5)
    except TimeoutError:
        pytest.fail(f"not refused: {sorted(set(cases) - set(refusals))}")
    wrong = {
        case: message for case, message in refusals.items() if cases[case].expected not in message
    }
    assert not wrong, f"refused without saying why: {wrong}"
    assert len(cases) >= 20

    time.sleep(2)  # a wrong helper would have run by now
    wait_no_helper_pods(setup, timeout=30)
    volumes = our_volumes(setup)
    assert [volume["spec"]["claimRef"]["name"] for volume in volumes] == ["control"]
    control = volumes[0]
    expected = [node_relative(volume_node(control), volume_path(control))]
    expected += [node_relative(node, base) for node in cluster.nodes]
    unexpected = unexpected_changes(changed_paths(before, snapshot_nodes(cluster)), expected)
    assert not unexpected, f"touched outside the expected paths: {unexpected[:20]}"


def test_a_claim_name_too_long_for_a_directory_is_reported_and_creates_nothing(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """The longest claim name the API allows (253) makes a folder name over 255 bytes: refused
    before any helper runs, with the limit in the message."""
    base = unique_base_path("longname")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    before = snapshot_nodes(setup.cluster)
    setup.start()
    storage_class = setup.create_class("longname")
    name = ("a" * 62 + ".") * 4 + "b"
    assert len(name) == 253
    create_claims_with_consumers(setup, storage_class, [name])
    event = wait_for(
        lambda: next(iter(events_with_reason(setup, name, "ProvisioningFailed")), None),
        60,
        "the refusal to be reported",
        interval=0.5,
    )
    assert "bytes; file systems allow 255" in event["message"], event["message"]
    assert setup.phase(name) == "Pending"
    setup.stop_all()
    assert not helper_pods(setup)
    expected = [node_relative(node, base) for node in setup.cluster.nodes]
    unexpected = unexpected_changes(changed_paths(before, snapshot_nodes(setup.cluster)), expected)
    assert not unexpected, f"touched outside the expected paths: {unexpected[:20]}"


def test_a_path_too_long_for_the_node_is_refused_naming_the_annotation_and_no_helper_runs(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    """An annotation of many short folders passed every component's check: its 200 KB path
    was decided, its helper pod never started (VOL_DIR over execve's limit), and the claim
    was retried as a helper failure, a pod each time, never told why. Now it is refused with
    a Warning naming the annotation, and no helper pod is made for it; a plain claim of the
    same class beside it is provisioned."""
    base = unique_base_path("longpath")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    setup.start()
    storage_class = setup.create_class("longpath", parameters={"pathPattern": SCOPED})
    recorder = record_helper_pods(setup)
    folders = "/".join("d" * 99 for _ in range(2000))
    setup.create_claim("long", storage_class, annotations={"sub": folders})
    setup.create_consumer("long", "long", {"kubernetes.io/hostname": "node-1"})
    setup.create_claim("plain", storage_class, annotations={"sub": "data"})
    setup.create_consumer("plain", "plain", {"kubernetes.io/hostname": "node-1"})

    setup.wait_bound("plain", timeout=120)
    event = wait_for(partial(first_refusal, setup, "long"), 60, "the refusal to be reported", 0.5)
    assert event["type"] == "Warning", event
    message = event["message"]
    assert "a node holds a volume path of at most 3839" in message, message
    assert f'renders the claim\'s annotation "sub" ({len(folders)} bytes)' in message, message
    assert "shorten that annotation" in message, message
    time.sleep(2)  # a helper for it would have been made by now
    assert setup.phase("long") == "Pending"
    long_volume = "pvc-" + setup.claim("long")["metadata"]["uid"]
    served = [pod for pod in recorder.stop() if long_volume in pod.volumes]
    assert not served, f"helper pods made for the refused claim: {served}"


def node_affinity(key: str, value: str) -> dict[str, Any]:
    expression = {"key": key, "operator": "In", "values": [value]}
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}}


@dataclass(frozen=True)
class ForgedVolume:
    source: Mapping[str, Any]
    """hostPath or local, as the PV spec spells it."""
    expected: str
    """A fragment of the VolumeFailedDelete message."""
    node: str = "node-1"
    affinity_key: str = "kubernetes.io/hostname"
    affinity: bool = True
    annotations: Mapping[str, str] = field(default_factory=dict)


def forged_volumes(base: str, live_path: str, live_node: str) -> dict[str, ForgedVolume]:
    not_inside = "is not clean and strictly inside a base path"
    return {
        "outside": ForgedVolume({"hostPath": {"path": "/etc/precious"}}, not_inside),
        "root": ForgedVolume({"hostPath": {"path": "/"}}, not_inside),
        "base-path-itself": ForgedVolume({"hostPath": {"path": base}}, not_inside),
        "sibling-prefix": ForgedVolume({"hostPath": {"path": f"{base}-evil/data"}}, not_inside),
        "sibling-prefix-itself": ForgedVolume({"hostPath": {"path": f"{base}-evil"}}, not_inside),
        "dot-component": ForgedVolume({"hostPath": {"path": f"{base}/./data"}}, not_inside),
        "leading-double-slash": ForgedVolume({"hostPath": {"path": f"/{base}/data"}}, not_inside),
        "inner-double-slash": ForgedVolume({"hostPath": {"path": f"{base}//data"}}, not_inside),
        "trailing-slash": ForgedVolume({"hostPath": {"path": f"{base}/data/"}}, not_inside),
        "local-outside": ForgedVolume({"local": {"path": "/etc/precious"}}, not_inside),
        "local-base-itself": ForgedVolume({"local": {"path": base}}, not_inside),
        "other-nodes-base-path": ForgedVolume(
            {"hostPath": {"path": f"{base}/data"}}, not_inside, node="node-3"
        ),
        "another-volumes-directory": ForgedVolume(
            {"hostPath": {"path": live_path}}, "is also used by", node=live_node
        ),
        "inside-another-volume": ForgedVolume(
            {"hostPath": {"path": f"{live_path}/inner"}}, "is also used by", node=live_node
        ),
        "no-node-affinity": ForgedVolume(
            {"hostPath": {"path": f"{base}/data"}}, "cannot find the volume's node", affinity=False
        ),
        "label-on-every-node": ForgedVolume(
            {"hostPath": {"path": f"{base}/data"}},
            "nodes carry type=kwok: cannot tell which holds the data",
            node="kwok",
            affinity_key="type",
        ),
        "recorded-node-disagrees": ForgedVolume(
            {"hostPath": {"path": f"{base}/data"}},
            "node node-1 no longer carries kubernetes.io/hostname=node-2",
            node="node-2",
            annotations={"local-path-storage.io/node": "node-1"},
        ),
    }


# The API itself refuses these (hostPath and local paths must not contain ".."): a forged PV
# written with backsteps never exists for the provisioner to act on.
API_REFUSED = {
    "dotdot-outside": {"hostPath": {"path": "/opt/faults-x/../../etc/precious"}},
    "dotdot-back-into-base": {"hostPath": {"path": "/opt/faults-x/data/../data"}},
    "local-dotdot": {"local": {"path": "/opt/faults-x/../etc"}},
}


def forge(setup: ProvisionerSetup, name: str, forged: ForgedVolume | Mapping[str, Any]) -> None:
    source = forged.source if isinstance(forged, ForgedVolume) else forged
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Delete",
        "storageClassName": "forged",
        "claimRef": {"namespace": setup.namespace, "name": f"ghost-{name}", "uid": "0"},
        **source,
    }
    if not isinstance(forged, ForgedVolume) or forged.affinity:
        key, node = ("kubernetes.io/hostname", "node-1")
        if isinstance(forged, ForgedVolume):
            key, node = forged.affinity_key, forged.node
        spec["nodeAffinity"] = node_affinity(key, node)
    annotations = {"pv.kubernetes.io/provisioned-by": setup.name}
    if isinstance(forged, ForgedVolume):
        annotations.update(forged.annotations)
    setup.core.create_persistent_volume(
        manifest({"metadata": {"name": name, "annotations": annotations}, "spec": spec})
    )


def test_forged_volumes_outside_the_base_paths_are_never_torn_down(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("forged")
    config = {
        "nodePathMap": [
            {"node": DEFAULT_NODE, "paths": [creatable(base)]},
            {"node": "node-3", "paths": [creatable(f"{base}-node3")]},
        ]
    }
    setup = make_setup(ConfigFiles(config=config))
    cluster = setup.cluster
    for node in cluster.nodes:
        for path in ("/etc/precious", f"{base}-evil/data", f"{base}/data", f"{base}-node3/data"):
            directory = setup.node_path(node, path)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "file").write_text("not yours")
    setup.start()
    control_class = setup.create_class("control")
    create_claims_with_consumers(setup, control_class, ["live"])
    wait_all_bound(setup, ["live"], timeout=120)
    live = our_volumes(setup)[0]
    live_node, live_path = volume_node(live), volume_path(live)
    (setup.node_path(live_node, live_path) / "file").write_text("live data")
    before = snapshot_nodes(cluster)

    for case, source in API_REFUSED.items():
        with pytest.raises(ApiException) as refused:
            forge(setup, f"forged-{setup.suffix}-{case}", source)
        assert refused.value.status == 422 and "'..'" in str(refused.value.body), case

    cases = forged_volumes(base, live_path, live_node)
    names = {case: f"forged-{setup.suffix}-{case}" for case in cases}
    try:
        for case, forged in cases.items():
            forge(setup, names[case], forged)
        refusals: dict[str, str] = {}

        def all_refused() -> bool | None:
            for case, name in names.items():
                if case not in refusals:
                    events = events_with_reason(setup, name, "VolumeFailedDelete")
                    if events:
                        refusals[case] = events[0]["message"]
            return True if len(refusals) == len(cases) else None

        try:
            wait_for(all_refused, 90, "every forged volume to be refused", interval=0.5)
        except TimeoutError:
            pytest.fail(f"not refused: {sorted(set(cases) - set(refusals))}")
        wrong = {
            case: message
            for case, message in refusals.items()
            if cases[case].expected not in message
        }
        assert not wrong, f"refused without saying why: {wrong}"
        assert len(cases) + len(API_REFUSED) >= 20

        time.sleep(2)  # a wrong teardown would have run by now
        assert not helper_pods(setup), "no teardown may be started for a forged volume"
        for case, name in names.items():
            volume = setup.volume(name)
            assert volume is not None and volume["status"]["phase"] == "Released", case
        changed = changed_paths(before, snapshot_nodes(cluster))
        assert not changed, f"forged volumes changed the nodes: {sorted(changed)[:20]}"
        assert (setup.node_path(live_node, live_path) / "file").read_text() == "live data"
    finally:
        for name in names.values():
            with contextlib.suppress(ApiException):
                setup.core.delete_persistent_volume(name)


def test_a_symlink_planted_in_a_retained_volume_does_not_lead_a_new_volume_outside(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """A namespace user owns what is inside their volumes. The claim `a` (pattern
    `<ns>/<name>/<annotation>`, Retain) gets `<ns>/a/d`; its pod plants `d/evil` -> the node's
    /etc (relative here, so the harness stays in the node's directory: a real pod would write
    the absolute `/etc`). The claim is deleted (the data is retained) and made again with the
    annotation `d/evil/x`: lexically inside its own `<ns>/a/`, on disk the node's /etc/x."""
    base = unique_base_path("symlink")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    setup.start()
    storage_class = setup.create_class(
        "symlink", reclaim_policy="Retain", parameters={"pathPattern": SCOPED}
    )
    setup.create_claim("a", storage_class, annotations={"sub": "d"})
    setup.create_consumer("a", "a", {"kubernetes.io/hostname": "node-1"})
    volume = setup.wait_bound("a")
    first = setup.node_path("node-1", volume_path(volume))
    depth = len(volume_path(volume).strip("/").split("/"))
    (first / "evil").symlink_to("/".join([".."] * depth) + "/etc")
    setup.node_path("node-1", "/etc").mkdir(exist_ok=True)
    before = snapshot_nodes(setup.cluster)
    setup.core.delete_namespaced_pod("a", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("a", setup.namespace)
    wait_for(
        lambda: True if "a" not in {c["metadata"]["name"] for c in our_claims(setup)} else None,
        60,
        "the first claim a to go",
    )

    setup.create_claim("a", storage_class, annotations={"sub": "d/evil/x"})
    setup.create_consumer("a-again", "a", {"kubernetes.io/hostname": "node-1"})

    def settled() -> bool | None:
        if setup.phase("a") == "Bound" or any(
            events_with_reason(setup, "a", reason)
            for reason in ("ProvisioningFailed", "WaitingForPath")
        ):
            return True
        return None

    # The retained volume still holds <ns>/a/d, so the claim may also be told to wait for it.
    wait_for(settled, 60, "the second claim a to be bound, refused or waiting", interval=0.5)
    wait_no_helper_pods(setup, timeout=60)
    changed = changed_paths(before, snapshot_nodes(setup.cluster))
    unexpected = unexpected_changes(changed, [node_relative("node-1", base)])
    escaped = setup.node_path("node-1", "/etc/x")
    if escaped.exists():
        escaped.rmdir()  # tidy the node for later tests before failing
        pytest.fail("setup created the node's /etc/x through the planted symlink")
    assert not unexpected, f"touched outside the base path: {unexpected}"


def our_claims(setup: ProvisionerSetup) -> list[dict[str, Any]]:
    return list(
        call_json(setup.core.list_namespaced_persistent_volume_claim, setup.namespace)["items"]
    )


# The helper container's mount table with each volume's hostPath bind-mounted at its own path,
# as the kernel writes it (a tab as \011, a backslash as \134), on XFS with project quotas.
QUOTA_MOUNT_LINE = "{n} 1500 7:7 {at} {at} rw,relatime - xfs /dev/loop7 rw,attr2,inode64,prjquota\n"


def test_a_tab_or_backslash_from_an_annotation_is_refused_before_any_helper(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """A claim annotation the pathPattern renders put a tab or a backslash in the path; the
    quota step, matching that path against the helper's mount table (which writes them as
    octal escapes) and reading it through `awk -v`, took it for `/`, said no-quota and exited 0:
    the volume got no hard limit on a filesystem that enforces one. Such a path is refused now
    with a Warning naming the character, and no helper runs. The kernel here lacks project
    quota support, so the helper template puts the recorded `xfs_quota` stand-in on its PATH
    and points LPS_MOUNTINFO at a recorded mount table; a plain claim beside them gets its
    quota through the same stand-in, so the setup would have reached it."""
    base = unique_base_path("quotaescape")
    tools = f"{BASE_VIEW}/.tools"
    template = yaml.safe_load(DEFAULT_HELPER_POD_YAML)
    template["spec"]["containers"][0]["env"] = [
        {"name": "PATH", "value": f"{tools}:/usr/sbin:/usr/bin:/sbin:/bin"},
        {"name": "LPS_MOUNTINFO", "value": f"{tools}/mountinfo"},
    ]
    setup = make_setup(
        ConfigFiles(
            config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]},
            helper_pod=yaml.safe_dump(template),
        )
    )
    hostile = {"tab": ("a\tb", "a\\011b"), "backslash": ("a\\b", "a\\134b")}
    written = {"plain": "plain", **{name: escaped for name, (_, escaped) in hostile.items()}}
    table = "1500 1400 0:52 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u\n"
    for number, (name, folder) in enumerate(written.items()):
        at = f"{base}/{setup.namespace}/{name}/{folder}"
        table += QUOTA_MOUNT_LINE.format(n=1501 + number, at=at)
    for node in setup.cluster.nodes:
        host_tools = setup.node_path(node, f"{base}/.tools")
        host_tools.mkdir(parents=True)
        (host_tools / "xfs_quota").write_text(QUOTA_STAND_IN)
        (host_tools / "xfs_quota").chmod(0o755)
        (host_tools / "mountinfo").write_text(table)
    before = snapshot_nodes(setup.cluster)
    setup.start()
    storage_class = setup.create_class("quotaescape", parameters={"pathPattern": SCOPED})
    for name, (folder, _) in {"plain": ("plain", ""), **hostile}.items():
        setup.create_claim(name, storage_class, annotations={"sub": folder})
        setup.create_consumer(name, name, {"kubernetes.io/hostname": "node-1"})

    plain = setup.wait_bound("plain", timeout=120)
    quota_calls = setup.node_path("node-1", volume_path(plain)) / ".xfs_quota-argv"
    assert "limit -p bhard=" in quota_calls.read_text(), "the stand-in set no quota"
    for name, (folder, _) in hostile.items():
        event = wait_for(
            partial(first_refusal, setup, name), 60, f"the claim {name} to be refused", 0.5
        )
        assert event["type"] == "Warning", event
        assert f"contains {folder[1]!r}: {UNSAFE_CHARACTER_REFUSED}" in event["message"], event
        assert setup.phase(name) == "Pending"
    setup.stop_all()
    assert not helper_pods(setup)
    expected = [node_relative("node-1", volume_path(plain))]
    expected += [node_relative(node, base) for node in setup.cluster.nodes]
    for node in setup.cluster.nodes:
        for name in hostile:
            claim_directory = setup.node_path(node, f"{base}/{setup.namespace}/{name}")
            assert not claim_directory.exists(), f"made for the refused claim {name} on {node}"
    unexpected = unexpected_changes(changed_paths(before, snapshot_nodes(setup.cluster)), expected)
    assert not unexpected, f"touched outside the expected paths: {unexpected[:20]}"


def first_refusal(setup: ProvisionerSetup, claim_name: str) -> dict[str, Any] | None:
    return next(iter(events_with_reason(setup, claim_name, "ProvisioningFailed")), None)
