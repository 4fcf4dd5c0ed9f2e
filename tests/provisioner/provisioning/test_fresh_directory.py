"""A new volume never gets an existing directory with someone's data (see
provisioner/provisioning/fresh_directory.py): the fixed `prepare` script run by /bin/sh on a real
tree, the steps that decide when it runs, and the class parameter that opts in."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from provisioner.configuration.class_parameters import (
    reuse_existing_data,
    validate_storage_class_parameters,
)
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigError,
    load_config_bundle,
    parse_config_json,
)
from provisioner.helper_pods.pod_shapes import (
    FINISH_SCRIPT,
    GUARD_SCRIPT,
    PREPARE_SCRIPT,
    build_helper_pod,
    helper_steps,
)
from provisioner.objects.snapshot_handoff import SNAPSHOT_AREA
from provisioner.provisioning.fresh_directory import OWNERS_DIR
from provisioner.provisioning.paths import PathPatternError, check_volume_path, is_named_for_volume
from provisioner.provisioning.volume_decisions import TeardownPlan
from provisioner.scans.node_scripts import LIST_SCRIPT
from tests.provisioner.helper_pods.test_helper_scripts import make_base, run_script

REUSE = {"LPS_REUSE_EXISTING_DATA": "true"}


def retained(base: Path) -> Path:
    """An earlier claim's directory, left with its data when its Retain PV was deleted."""
    volume = base / "team" / "db"
    volume.mkdir(parents=True)
    (volume / "secret.txt").write_text("the old team's data")
    return volume


def marker(base: Path, volume: Path) -> Path:
    return base / OWNERS_DIR / hashlib.sha256(str(volume).encode()).hexdigest()


def test_prepare_refuses_an_existing_directory_with_data_and_leaves_it_alone(
    tmp_path: Path,
) -> None:
    base = make_base(tmp_path)
    volume = retained(base)
    done = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-new")
    assert done.returncode == 1
    assert f"refusing {volume}: it already exists with data" in done.stderr
    assert "reuseExistingData" in done.stderr
    assert [p.name for p in volume.iterdir()] == ["secret.txt"]
    assert (volume / "secret.txt").read_text() == "the old team's data"
    assert not marker(base, volume).exists()


def test_the_class_may_opt_in_to_reuse_the_data(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = retained(base)
    done = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-new", extra_env=REUSE)
    assert done.returncode == 0, done.stderr
    assert (volume / "secret.txt").read_text() == "the old team's data"
    # Marked as found and reused, not made: no give-back or clean-up removes it.
    assert marker(base, volume).read_text() == "pvc-new reused\n"


def test_a_retry_of_the_same_volume_gets_what_its_earlier_attempt_made(tmp_path: Path) -> None:
    """The provisioner died after the setup (which left a file) and before the PV was saved."""
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    first = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-1")
    assert first.returncode == 0, first.stderr
    (volume / "made-by-setup").write_text("x")
    again = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-1")
    assert again.returncode == 0, again.stderr
    assert "earlier attempt" in again.stdout
    other = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-2")
    assert other.returncode == 1, "another claim of the same path is refused"


def test_an_empty_directory_is_taken_unless_a_marker_names_another_volume(
    tmp_path: Path,
) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    volume.mkdir(parents=True)
    done = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-1")
    assert done.returncode == 0, done.stderr
    # pvc-1's prepare made its marker; its directory is still empty, yet another claim
    # racing for that path is refused.
    raced = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-2")
    assert raced.returncode == 1
    assert marker(base, volume).read_text() == "pvc-1 reused\n"


def test_a_forged_marker_in_the_volume_counts_for_nothing(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = retained(base)
    (volume / OWNERS_DIR).mkdir()
    (volume / OWNERS_DIR / "anything").write_text("pvc-new\n")
    done = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-new")
    assert done.returncode == 1


def test_finish_forgets_the_marker_with_the_directory(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    assert run_script(PREPARE_SCRIPT, base, volume).returncode == 0
    assert marker(base, volume).exists()
    done = run_script(FINISH_SCRIPT, base, volume)
    assert done.returncode == 0, done.stderr
    assert not volume.exists()
    assert not marker(base, volume).exists()
    kept = base / "team" / "kept"
    assert run_script(PREPARE_SCRIPT, base, kept).returncode == 0
    (kept / "data").write_text("x")
    assert run_script(FINISH_SCRIPT, base, kept).returncode == 1
    assert marker(base, kept).exists(), "the directory is still there: so is its marker"


def test_the_orphan_listing_never_reports_the_owners_directory(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    (base / OWNERS_DIR).mkdir()
    result = tmp_path / "result"
    env = {
        "PATH": "/usr/bin:/bin",
        "LPS_BASE": str(base),
        "LPS_RESULT": str(result),
        "LPS_BUDGET": "3900",
        "LPS_OWNERS_DIR": OWNERS_DIR,
    }
    done = subprocess.run(
        ["/bin/sh", "-c", LIST_SCRIPT, "list"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert OWNERS_DIR not in result.read_text()


def test_the_orphan_listing_never_reports_the_snapshot_area(tmp_path: Path) -> None:
    """Snapshots live beside the volumes in their base path: `orphans --delete` must not take
    them for leftovers."""
    base = make_base(tmp_path)
    (base / SNAPSHOT_AREA / ("a" * 32)).mkdir(parents=True)
    (base / "stray").mkdir()
    result = tmp_path / "result"
    env = {
        "PATH": "/usr/bin:/bin",
        "LPS_BASE": str(base),
        "LPS_RESULT": str(result),
        "LPS_BUDGET": "3900",
        "LPS_OWNERS_DIR": OWNERS_DIR,
        "LPS_SNAPSHOT_AREA": SNAPSHOT_AREA,
    }
    done = subprocess.run(
        ["/bin/sh", "-c", LIST_SCRIPT, "list"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    listed = result.read_text()
    assert SNAPSHOT_AREA not in listed
    assert "stray" in listed


BUNDLE = load_config_bundle(
    json.dumps(
        {
            "nodePathMap": [
                {
                    "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                    "paths": [{"path": "/b", "create": True}],
                }
            ]
        }
    ),
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    DEFAULT_HELPER_POD_YAML,
)


def plan(path: str, volume_name: str = "pvc-1") -> TeardownPlan:
    return TeardownPlan(volume_name, path, "n", "Filesystem", 0, True, False, base_path="/b")


def test_only_a_folder_named_for_its_volume_skips_prepare() -> None:
    assert helper_steps("create", plan("/b/pvc-1_ns_c"), BUNDLE.config) == ("create",)
    assert helper_steps("create", plan("/b/pvc-1"), BUNDLE.config) == ("create",)
    # An unsafe pattern such as {{ .PVC.Name }}: another claim's directory could be there.
    assert helper_steps("create", plan("/b/claim"), BUNDLE.config) == ("prepare", "create")
    assert helper_steps("create", plan("/b/pvc-10_ns_c"), BUNDLE.config) == ("prepare", "create")
    assert helper_steps("create", plan("/b/ns/pvc-1"), BUNDLE.config) == ("prepare", "create")
    assert not is_named_for_volume("/b/ns/pvc-1_x", "/b", "pvc-1")


def prepare_env(target: object) -> dict[str, str]:
    pod = build_helper_pod("prepare", target, BUNDLE, "ns", "sa")  # type: ignore[arg-type]
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_prepare_is_told_the_volume_and_the_classes_choice() -> None:
    env = prepare_env(plan("/b/ns/c"))
    assert env["LPS_VOLUME"] == "pvc-1"
    assert "LPS_REUSE_EXISTING_DATA" not in env

    class Reusing:
        volume_name, path, node_name, volume_mode = "pvc-1", "/b/ns/c", "n", "Filesystem"
        size_bytes, vol_user, vol_group, vol_perm, base_path = 0, "", "", "", "/b"
        reuse_existing_data = True

    assert prepare_env(Reusing())["LPS_REUSE_EXISTING_DATA"] == "true"


def test_the_parameter_is_a_boolean_defaulting_to_false() -> None:
    config = parse_config_json(json.dumps({"nodePathMap": [{"node": "n", "paths": ["/b"]}]}))
    assert reuse_existing_data({}) is False
    assert reuse_existing_data({"reuseExistingData": "true"}) is True
    validate_storage_class_parameters("c", {"reuseExistingData": "false"}, {}, config)
    with pytest.raises(ConfigError) as caught:
        validate_storage_class_parameters("c", {"reuseExistingData": "yes"}, {}, config)
    assert str(caught.value) == (
        'parameters.reuseExistingData: "yes" is not a boolean: write true or false'
    )


def test_no_volume_can_be_the_owners_directory() -> None:
    with pytest.raises(PathPatternError, match=OWNERS_DIR):
        check_volume_path("/b", f"{OWNERS_DIR}/x", None)


# The clean-up after a claim that went while its setup failed: `finish` alone, and only for the
# directory whose owner marker says that volume made it (its removal permit's owner check).
OWN_ATTEMPT = {
    "LPS_REMOVAL_OWNER": "pvc-gone",
    "LPS_REMOVAL_MADE_ONLY": "true",
    "LPS_REMOVAL_ABSENT_OK": "",
}


def test_the_clean_up_removes_the_empty_directory_its_own_attempt_made(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    made = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-gone")
    assert made.returncode == 0, made.stderr
    done = run_script(FINISH_SCRIPT, base, volume, extra_env=OWN_ATTEMPT)
    assert done.returncode == 0, done.stderr
    assert not volume.exists()
    assert not marker(base, volume).exists()


def test_the_clean_up_leaves_a_directory_prepare_refused(tmp_path: Path) -> None:
    """The claim's `prepare` refused a retained directory (someone's data), then the claim went:
    the clean-up must not touch it, even were it empty."""
    base = make_base(tmp_path)
    volume = retained(base)
    refused = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-gone")
    assert refused.returncode == 1
    done = run_script(FINISH_SCRIPT, base, volume, extra_env=OWN_ATTEMPT)
    assert done.returncode == 1
    assert "no owner marker says pvc-gone made it" in done.stderr
    assert (volume / "secret.txt").read_text() == "the old team's data"
    (volume / "secret.txt").unlink()
    again = run_script(FINISH_SCRIPT, base, volume, extra_env=OWN_ATTEMPT)
    assert again.returncode == 1
    assert volume.is_dir()


def test_the_clean_up_leaves_a_directory_another_volume_owns(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    assert run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-other").returncode == 0
    done = run_script(FINISH_SCRIPT, base, volume, extra_env=OWN_ATTEMPT)
    assert done.returncode == 1
    assert volume.is_dir()
    assert marker(base, volume).read_text() == "pvc-other\n"


# The owner check a removal's permit puts before anything is removed (removal_gate.OwnerCheck),
# in `finish` and, through the read-only base path, in the guard before a teardown's code.
GIVE_BACK = {
    "LPS_REMOVAL_OWNER": "pvc-new",
    "LPS_REMOVAL_MADE_ONLY": "true",
    "LPS_REMOVAL_ABSENT_OK": "",
}


def test_a_give_back_leaves_data_prepare_found_and_reused(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = retained(base)
    reused = run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-new", extra_env=REUSE)
    assert reused.returncode == 0, reused.stderr
    (volume / "secret.txt").unlink()  # as a teardown would empty it, were it let
    done = run_script(FINISH_SCRIPT, base, volume, volume_name="pvc-new", extra_env=GIVE_BACK)
    assert done.returncode == 1
    assert "pvc-new did not make it, it found and reused it" in done.stderr
    assert volume.is_dir()
    assert marker(base, volume).read_text() == "pvc-new reused\n"


def test_a_give_back_removes_what_its_attempt_made(tmp_path: Path) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    assert run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-new").returncode == 0
    done = run_script(FINISH_SCRIPT, base, volume, volume_name="pvc-new", extra_env=GIVE_BACK)
    assert done.returncode == 0, done.stderr
    assert not volume.exists()
    assert not marker(base, volume).exists()


def guarded_teardown(base: Path, volume: Path, owner: str) -> subprocess.CompletedProcess[str]:
    """The guard as a teardown pod runs it (the base path seen as itself), before a teardown
    that empties the directory."""
    env = {
        "PATH": "/usr/bin:/bin",
        "LPS_BASE": str(base),
        "LPS_BASE_VIEW": str(base),
        "VOL_DIR": str(volume),
        "LPS_SCRIPT": 'rm -rf "$VOL_DIR"/*',
        "LPS_REMOVAL_OWNER": owner,
        "LPS_REMOVAL_ABSENT_OK": "true",
    }
    return subprocess.run(
        ["/bin/sh", "-c", GUARD_SCRIPT, "teardown"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_late_teardown_removes_nothing_from_another_volume_s_directory(tmp_path: Path) -> None:
    """pvc-old's teardown pod starts late: its path now holds pvc-new's directory and data."""
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    assert run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-new").returncode == 0
    (volume / "data.txt").write_text("pvc-new's")
    done = guarded_teardown(base, volume, "pvc-old")
    assert done.returncode == 1
    assert "its owner marker names pvc-new, not pvc-old" in done.stderr
    assert (volume / "data.txt").read_text() == "pvc-new's"


@pytest.mark.parametrize("marked", [True, False], ids=["own-marker", "no-marker"])
def test_a_teardown_empties_its_own_or_an_unmarked_directory(tmp_path: Path, marked: bool) -> None:
    base = make_base(tmp_path)
    volume = base / "team" / "db"
    if marked:
        assert run_script(PREPARE_SCRIPT, base, volume, volume_name="pvc-old").returncode == 0
    else:
        volume.mkdir(parents=True)
    (volume / "data.txt").write_text("pvc-old's")
    done = guarded_teardown(base, volume, "pvc-old")
    assert done.returncode == 0, done.stderr
    assert list(volume.iterdir()) == []
