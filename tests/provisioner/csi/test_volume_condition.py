"""A volume's condition, in the order a user would fix its problems."""

from __future__ import annotations

import dataclasses

from provisioner.csi.volume_condition import VolumeFacts, condition_of

HEALTHY = VolumeFacts(
    directory="/mnt/disk1/pvc-1",
    base_path="/mnt/disk1",
    directory_present=True,
    base_path_must_be_mount_point=True,
    base_path_is_mount_point=True,
    bytes_available=1 << 30,
    inodes_total=1000,
    inodes_available=10,
)


def test_a_present_directory_on_a_mounted_disk_with_room_is_normal() -> None:
    assert not condition_of(HEALTHY).abnormal


def test_an_unmounted_disk_comes_first_and_says_to_mount_it() -> None:
    facts = dataclasses.replace(HEALTHY, base_path_is_mount_point=False, directory_present=False)
    condition = condition_of(facts)
    assert condition.abnormal
    assert "not mounted" in condition.message
    assert "mount it" in condition.message


def test_a_base_path_that_needs_no_mount_is_not_judged_by_it() -> None:
    facts = dataclasses.replace(
        HEALTHY, base_path_must_be_mount_point=False, base_path_is_mount_point=False
    )
    assert not condition_of(facts).abnormal


def test_a_missing_directory_says_the_data_is_gone_and_what_to_do() -> None:
    condition = condition_of(dataclasses.replace(HEALTHY, directory_present=False))
    assert condition.abnormal
    assert "/mnt/disk1/pvc-1 is missing" in condition.message
    assert "restore" in condition.message


def test_a_full_disk_or_one_out_of_inodes_is_abnormal() -> None:
    full = condition_of(dataclasses.replace(HEALTHY, bytes_available=0))
    assert full.abnormal
    assert "full" in full.message
    no_inodes = condition_of(dataclasses.replace(HEALTHY, inodes_available=0))
    assert no_inodes.abnormal
    assert "inodes" in no_inodes.message
    # A filesystem without an inode count (btrfs reports 0 of 0) is not out of them.
    assert not condition_of(
        dataclasses.replace(HEALTHY, inodes_total=0, inodes_available=0)
    ).abnormal
