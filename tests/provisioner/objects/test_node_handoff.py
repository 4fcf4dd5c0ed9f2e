"""What a CSI volume's PV carries for its node plugin, read back as written, and a permit the
node must not act on refused with the reason."""

import pytest

from provisioner.objects.node_handoff import (
    HandoffError,
    NodeRemoval,
    VolumeSetup,
    node_label_value,
    node_selector,
    removal_refusal,
)

REMOVAL = NodeRemoval(
    volume_name="pvc-1",
    path="/opt/lp/pvc-1",
    owner="pvc-1",
    made_only=False,
    absent_ok=True,
    claim_uid="uid-1",
)


def test_a_node_s_label_is_its_name_or_a_hash_of_a_name_no_label_can_hold() -> None:
    assert node_label_value("worker-1.example.com") == "worker-1.example.com"
    assert node_selector("n1") == "local-path-storage.io/node-key=n1"
    long = "n" * 64
    hashed = node_label_value(long)
    assert hashed.startswith("h-") and len(hashed) == 42 and hashed != node_label_value("n" * 65)


def test_the_setup_and_the_permit_read_back_as_written() -> None:
    setup = VolumeSetup("/opt/lp", "/opt/lp/pvc-1", "Filesystem", 5 << 30, "1000", "", "0770")
    assert VolumeSetup.from_json(setup.to_json()) == setup
    assert NodeRemoval.from_json(REMOVAL.to_json()) == REMOVAL


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "local-path-storage.io/setup is not JSON"),
        ("[]", "local-path-storage.io/setup is not a JSON object"),
        ('{"base_path": "/b", "path": "/b/v", "volume_mode": "Filesystem"}', "has no size_bytes"),
        (
            '{"base_path": "/b", "path": "/b/v", "volume_mode": "Filesystem", "size_bytes": -1}',
            "size_bytes must be a whole number of bytes",
        ),
        (
            '{"base_path": 1, "path": "/b/v", "volume_mode": "Filesystem", "size_bytes": 1}',
            "base_path must be a string",
        ),
    ],
)
def test_a_setup_that_does_not_read_is_refused(text: str, message: str) -> None:
    with pytest.raises(HandoffError, match=message):
        VolumeSetup.from_json(text)


def test_a_permit_without_its_claim_or_with_a_bad_flag_is_refused() -> None:
    with pytest.raises(HandoffError, match="has no claim_uid"):
        NodeRemoval.from_json(REMOVAL.to_json().replace('"claim_uid"', '"other"'))
    with pytest.raises(HandoffError, match="made_only must be true or false"):
        NodeRemoval.from_json(REMOVAL.to_json().replace('"made_only":false', '"made_only":"no"'))


def test_the_node_acts_only_on_the_permit_of_this_volume_released_from_that_claim() -> None:
    here = {"volume_name": "pvc-1", "path": "/opt/lp/pvc-1", "phase": "Released"}
    assert removal_refusal(REMOVAL, claim_uid="uid-1", **here) is None
    assert removal_refusal(REMOVAL, claim_uid="uid-2", **here) == (
        "the volume's claim is uid-2, not uid-1"
    )
    assert removal_refusal(REMOVAL, **{**here, "phase": "Bound"}, claim_uid="uid-1") == (
        "the volume is Bound, not Released"
    )
    assert removal_refusal(REMOVAL, **{**here, "path": "/opt/lp/other"}, claim_uid="uid-1") == (
        "the permit covers /opt/lp/pvc-1, not the volume's directory /opt/lp/other"
    )
    assert removal_refusal(REMOVAL, **{**here, "volume_name": "pvc-2"}, claim_uid="uid-1") == (
        "the permit names volume pvc-1, not pvc-2"
    )
