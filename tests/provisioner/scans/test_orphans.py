"""Orphans: the pure rules, and the listing and removal scripts run by /bin/sh on a real tree."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from provisioner.configuration.config import parse_config_json
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord, VolumeRecord
from provisioner.scans.node_scripts import LIST_SCRIPT, REMOVE_SCRIPT
from provisioner.scans.orphans import (
    EntryKind,
    ListedEntry,
    ListingError,
    NodeListing,
    Owner,
    base_paths_by_node,
    claim_owners,
    find_missing,
    find_orphans,
    helper_pod_owners,
    owned_relative_paths,
    parse_listing,
    removable_orphans,
    still_orphan,
    volume_owners,
)

NAME = "lps.io/local-path"


def listing(*entries: tuple[str, EntryKind, int], missing: tuple[str, ...] = ()) -> NodeListing:
    return NodeListing(
        "n1",
        "/data",
        10_000,
        tuple(ListedEntry(p, k, m) for p, k, m in entries),
        missing,
    )


def test_an_entry_related_to_any_owner_on_the_node_is_no_orphan() -> None:
    owners = [
        Owner("/data/ns/live", frozenset({"n1"})),
        Owner("/data/elsewhere", frozenset({"n2"})),
        Owner("/data/shared", None),
    ]
    found = find_orphans(
        listing(
            ("/data/ns", "directory", 0),  # holds a volume
            ("/data/ns/live/x", "directory", 0),  # inside one
            ("/data/shared", "directory", 0),
            ("/data/elsewhere", "directory", 9_000),  # owned on another node only
            ("/data/link", "symlink", 0),
        ),
        owners,
    )
    assert [(o.path, o.kind, o.age_seconds) for o in found] == [
        ("/data/elsewhere", "directory", 1_000),
        ("/data/link", "symlink", 10_000),
    ]
    assert [o.path for o in removable_orphans(found, 5_000)] == []
    assert [o.path for o in removable_orphans(found, 1_000)] == ["/data/elsewhere"]
    assert not still_orphan(found[0], [Owner("/data/elsewhere/new", frozenset({"n1"}))])
    assert still_orphan(found[0], owners)


def test_volumes_own_their_path_on_their_node_or_everywhere_when_unknown() -> None:
    nodes = {"n1": NodeRecord("n1")}
    volumes = [
        VolumeRecord(
            "pv-a",
            annotations={"pv.kubernetes.io/provisioned-by": NAME},
            path="/data/a",
            affinity=(("kubernetes.io/hostname", ("n1",)),),
        ),
        VolumeRecord("pv-b", path="/data/b", affinity=(("kubernetes.io/hostname", ("gone",)),)),
        VolumeRecord("pv-c", path="/shared/c"),
        VolumeRecord("pv-d"),
    ]
    owners = volume_owners(volumes, nodes, NAME)
    assert [(o.path, o.nodes, o.ours) for o in owners] == [
        ("/data/a", frozenset({"n1"}), True),
        ("/data/b", None, False),
        ("/shared/c", None, False),
    ]
    assert owned_relative_paths(owners, "n2", "/data") == ["b"]
    missing = find_missing(listing(missing=("/data/a",)), owners)
    assert [(m.volume_name, m.path) for m in missing] == [("pv-a", "/data/a")]


def test_helper_pods_in_flight_hold_their_volume_directory() -> None:
    pod = {
        "spec": {
            "nodeName": "n1",
            "containers": [{"env": [{"name": "VOL_DIR", "value": "/data/new/"}]}],
        }
    }
    assert helper_pod_owners([pod, {"spec": {}}]) == [Owner("/data/new", frozenset({"n1"}))]


def test_on_a_shared_path_every_owner_holds_its_path_whatever_node_it_names() -> None:
    """A shared path is listed on one node only: an in-flight setup scheduled to another node
    and a foreign PV pinned to another node still own their directories there."""
    nodes = {"n1": NodeRecord("n1"), "n2": NodeRecord("n2")}
    foreign = VolumeRecord(
        "pv-foreign", path="/shared/foreign", affinity=(("kubernetes.io/hostname", ("n2",)),)
    )
    setup_pod = {
        "spec": {
            "nodeName": "n2",
            "containers": [{"env": [{"name": "VOL_DIR", "value": "/shared/in-flight"}]}],
        }
    }
    owners = volume_owners([foreign], nodes, NAME) + helper_pod_owners([setup_pod])
    assert [o.nodes for o in owners] == [frozenset({"n2"}), frozenset({"n2"})]
    entries = (
        ListedEntry("/shared/foreign", "directory", 0),
        ListedEntry("/shared/in-flight/data", "directory", 0),
        ListedEntry("/shared/stale", "directory", 0),
    )
    shared = NodeListing("n1", "/shared", 10_000, entries, (), shared=True)
    assert owned_relative_paths(owners, "n1", "/shared", shared=True) == ["foreign", "in-flight"]
    found = find_orphans(shared, owners)
    assert [(o.path, o.shared) for o in found] == [("/shared/stale", True)]
    assert [o.path for o in removable_orphans(found, 600)] == ["/shared/stale"]
    assert not still_orphan(found[0], [Owner("/shared/stale", frozenset({"n2"}))])
    node_local = NodeListing("n1", "/shared", 10_000, entries, ())
    assert len(find_orphans(node_local, owners)) == 3, "a node-local path keeps node owners"


def test_claims_waiting_for_their_volume_hold_the_path_their_provisioning_uses() -> None:
    """A setup done and its PV not saved (a leader stopped in between): the claim still names
    its directory, on its node, or on every node for a shared path."""
    config = parse_config_json(
        '{"storageClassConfigs": {'
        '"local": {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",'
        ' "paths": ["/data"]}]},'
        ' "nfs": {"sharedFileSystemPath": "/shared"}}}'
    )
    classes = {
        "local": StorageClassRecord("local", NAME, binding_mode="WaitForFirstConsumer"),
        "nfs": StorageClassRecord("nfs", NAME),
    }
    ours = {"volume.kubernetes.io/storage-provisioner": NAME}

    def claim(
        name: str, storage_class: str, node: str | None = None, bound: str = ""
    ) -> ClaimRecord:
        return ClaimRecord(
            f"uid-{name}",
            "ns",
            name,
            annotations=ours,
            storage_class_name=storage_class,
            selected_node=node,
            access_modes=("ReadWriteOnce",),
            requested_storage="1Gi",
            volume_name=bound,
        )

    claims = [
        claim("local", "local", "n2"),
        claim("files", "nfs"),
        claim("unscheduled", "local"),  # no node yet: no directory yet
        claim("bound", "local", "n2", bound="pv-bound"),
        ClaimRecord("uid-x", "ns", "foreign", storage_class_name="local", selected_node="n2"),
    ]
    nodes = {"n1": NodeRecord("n1"), "n2": NodeRecord("n2")}
    owners = claim_owners(claims, classes, config, nodes, NAME)
    assert [(o.path, o.nodes, o.volume_name) for o in owners] == [
        ("/data/pvc-uid-local_ns_local", frozenset({"n2"}), "pvc-uid-local"),
        ("/shared/pvc-uid-files_ns_files", None, "pvc-uid-files"),
    ]
    entries = (
        ListedEntry("/shared/pvc-uid-files_ns_files", "directory", 0),
        ListedEntry("/shared/stale", "directory", 0),
    )
    shared = NodeListing("n1", "/shared", 10_000, entries, (), shared=True)
    assert [o.path for o in find_orphans(shared, owners)] == ["/shared/stale"]


def test_base_paths_by_node_follow_every_class_and_the_default_entry() -> None:
    config = parse_config_json(
        '{"storageClassConfigs": {'
        '"a": {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/d"]},'
        ' {"node": "n2", "paths": ["/e", "/d"]}]},'
        ' "b": {"sharedFileSystemPath": "/shared"}}}'
    )
    assert base_paths_by_node(config, ["n2", "n1"]) == {"n1": ["/d", "/shared"], "n2": ["/e", "/d"]}


def test_a_listing_must_be_complete_and_stay_inside_its_base_path() -> None:
    parsed = parse_listing(
        "n1",
        "/data",
        "now 100\ndirectory 40 a b\nsymlink 50 l\nmissing ns/v\nskipped 2\ntruncated\nend\n",
    )
    assert parsed.now == 100 and parsed.truncated and parsed.skipped == 2
    assert parsed.entries == (
        ListedEntry("/data/a b", "directory", 40),
        ListedEntry("/data/l", "symlink", 50),
    )
    assert parsed.missing == ("/data/ns/v",)
    for bad in ("now 1\ndirectory 1 a\n", "now 1\ndirectory 1 ../etc\nend", "now 1\nweird\nend"):
        with pytest.raises(ListingError):
            parse_listing("n1", "/data", bad)


def run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", "-c", script, "step"],
        check=False,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_listing_never_looks_into_owned_paths_nor_through_links(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "ns" / "live" / "tenant").mkdir(parents=True)
    (base / "ns" / "stale").mkdir()
    (base / "pvc-live").mkdir()
    (base / ".hidden").mkdir()
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    (base / "link").symlink_to(outside)
    result = tmp_path / "result"
    done = run(
        LIST_SCRIPT,
        {
            "LPS_BASE": str(base),
            "LPS_OWNED": "ns/live\npvc-live\npvc-gone",
            "LPS_RESULT": str(result),
            "LPS_BUDGET": "3900",
        },
    )
    assert done.returncode == 0, done.stderr
    parsed = parse_listing("n1", str(base), result.read_text())
    assert sorted((e.path, e.kind) for e in parsed.entries) == [
        (f"{base}/.hidden", "directory"),
        (f"{base}/link", "symlink"),
        (f"{base}/ns/stale", "directory"),
    ]
    assert parsed.missing == (f"{base}/pvc-gone",)
    assert abs(parsed.now - time.time()) < 60


def test_the_listing_says_when_it_was_cut_short(tmp_path: Path) -> None:
    base = tmp_path / "base"
    for number in range(50):
        (base / f"orphan-{number:03d}").mkdir(parents=True)
    result = tmp_path / "result"
    env = {"LPS_BASE": str(base), "LPS_RESULT": str(result), "LPS_BUDGET": "300"}
    assert run(LIST_SCRIPT, env).returncode == 0
    parsed = parse_listing("n1", str(base), result.read_text())
    assert parsed.truncated and 0 < len(parsed.entries) < 50


def test_removal_keeps_young_directories_and_never_goes_through_a_link(tmp_path: Path) -> None:
    base = tmp_path / "base"
    old = base / "old"
    (old / "deep").mkdir(parents=True)
    then = time.time() - 7200
    os.utime(old, (then, then))
    young = base / "young"
    young.mkdir()
    outside = tmp_path / "outside"
    (outside / "victim").mkdir(parents=True)
    os.utime(outside / "victim", (then, then))
    (base / "link").symlink_to(outside)

    def remove(path: Path) -> subprocess.CompletedProcess[str]:
        return run(
            REMOVE_SCRIPT, {"LPS_BASE": str(base), "VOL_DIR": str(path), "LPS_MIN_AGE": "3600"}
        )

    assert remove(old).returncode == 0 and not old.exists()
    refused = remove(young)
    assert refused.returncode == 1 and "changed" in refused.stderr and young.is_dir()
    through = remove(base / "link" / "victim")
    assert through.returncode == 1 and "symbolic link" in through.stderr
    assert (outside / "victim").is_dir()
    assert remove(base / "never-there").returncode == 0
