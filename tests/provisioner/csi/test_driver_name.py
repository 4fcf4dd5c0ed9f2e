"""The CSI driver name: the provisioner name turned into a domain the spec accepts."""

from __future__ import annotations

import pytest

from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME, DriverNameError, driver_name_for


def test_domain_slash_name_becomes_name_dot_domain() -> None:
    assert DEFAULT_DRIVER_NAME == "local-path.local-path-storage.io"
    assert driver_name_for("example.com/fast") == "fast.example.com"
    assert driver_name_for("plain-name") == "plain-name"


@pytest.mark.parametrize(
    ("provisioner_name", "rule"),
    [
        ("example.com/" + "a" * 60, "at most 63"),
        ("example.com/under_score", "DNS subdomain"),
        ("example.com/-dash", "DNS subdomain"),
        ("Example.com/fast", "DNS subdomain"),
        ("a/b/c", "DNS subdomain"),
    ],
)
def test_a_name_the_spec_forbids_is_refused_saying_which_rule(
    provisioner_name: str, rule: str
) -> None:
    with pytest.raises(DriverNameError, match=rule):
        driver_name_for(provisioner_name)
