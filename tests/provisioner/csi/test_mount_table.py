"""The mount table read as facts: where a target's mount comes from, and whether it is gone."""

from __future__ import annotations

from provisioner.csi.mount_table import (
    containing_mount,
    mount_at,
    parse_mountinfo,
    published_directory,
)

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:17 / /mnt/disk1 rw,relatime shared:2 - ext4 /dev/sdb1 rw
41 22 8:1 /opt/local-path-provisioner/pvc-a /pods/a/mount rw,nosuid,nodev - ext4 /dev/sda1 rw
42 22 8:17 /ns/pvc-b /pods/b/mount ro,nosuid,nodev - ext4 /dev/sdb1 rw
43 22 8:17 /pvc-c//deleted /pods/c/mount rw - ext4 /dev/sdb1 rw
44 22 8:1 /etc /pods/d/mount rw - ext4 /dev/sda1 rw
45 22 0:50 / /with\\040space rw - tmpfs tmpfs rw
46 45 0:51 / /with\\040space rw - tmpfs tmpfs rw
"""
BASES = ["/opt/local-path-provisioner", "/mnt/disk1"]
entries = parse_mountinfo(MOUNTINFO)


def test_escaped_paths_are_read_back_and_the_last_mount_at_a_point_is_the_visible_one() -> None:
    visible = mount_at(entries, "/with space")
    assert visible is not None
    assert visible.device == "0:51"
    assert mount_at(entries, "/nowhere") is None


def test_a_path_lies_on_the_mount_with_the_longest_point_above_it() -> None:
    assert containing_mount(entries, "/mnt/disk1/ns").device == "8:17"  # type: ignore[union-attr]
    assert containing_mount(entries, "/mnt/disk10").device == "8:1"  # type: ignore[union-attr]


def test_a_bind_mount_maps_back_to_its_directory_under_a_base_path() -> None:
    a = mount_at(entries, "/pods/a/mount")
    b = mount_at(entries, "/pods/b/mount")
    assert a is not None
    assert b is not None
    assert published_directory(entries, a, BASES) == (
        "/opt/local-path-provisioner",
        "/opt/local-path-provisioner/pvc-a",
    )
    assert published_directory(entries, b, BASES) == ("/mnt/disk1", "/mnt/disk1/ns/pvc-b")
    assert b.read_only
    assert not a.read_only


def test_a_removed_directory_still_maps_back_and_shows_as_deleted() -> None:
    c = mount_at(entries, "/pods/c/mount")
    assert c is not None
    assert c.root_deleted
    assert published_directory(entries, c, BASES) == ("/mnt/disk1", "/mnt/disk1/pvc-c")


def test_a_mount_from_outside_the_base_paths_is_not_this_drivers_volume() -> None:
    d = mount_at(entries, "/pods/d/mount")
    assert d is not None
    assert published_directory(entries, d, BASES) is None
    whole_disk = mount_at(entries, "/mnt/disk1")
    assert whole_disk is not None
    assert published_directory(entries, whole_disk, BASES) is None


def test_a_volume_of_a_disk_unmounted_from_its_base_path_maps_to_that_base_path() -> None:
    # /mnt/disk2 must be a mount point; its disk (8:33) was unmounted, a pod still binds pvc-e.
    table = parse_mountinfo(MOUNTINFO + "47 22 8:33 /pvc-e /pods/e/mount rw - ext4 /dev/sdc1 rw\n")
    e = mount_at(table, "/pods/e/mount")
    assert e is not None
    bases = [*BASES, "/mnt/disk2"]
    assert published_directory(table, e, bases) is None
    assert published_directory(table, e, bases, ["/mnt/disk2"]) == (
        "/mnt/disk2",
        "/mnt/disk2/pvc-e",
    )
    # Two such disks: which one held it cannot be told.
    assert published_directory(table, e, bases, ["/mnt/disk2", "/mnt/disk3"]) is None
