"""The leader election's timing flags: client-go's defaults, the environment, and an order
(retry < renew deadline < lease duration) checked before anything starts."""

import pytest

from provisioner.configuration.options import parse_options


def test_defaults_are_client_go_s() -> None:
    options = parse_options([], environ={})
    assert (
        options.leader_election_lease_duration,
        options.leader_election_renew_deadline,
        options.leader_election_retry_period,
    ) == (15.0, 10.0, 2.0)


def test_flags_and_environment() -> None:
    options = parse_options(
        ["--leader-election-lease-duration=5", "--leader-election-renew-deadline=3"],
        environ={"LEADER_ELECTION_RETRY_PERIOD": "0.5", "LEADER_ELECTION_LEASE_DURATION": "9"},
    )
    assert (
        options.leader_election_lease_duration,
        options.leader_election_renew_deadline,
        options.leader_election_retry_period,
    ) == (5.0, 3.0, 0.5)


@pytest.mark.parametrize(
    "argv",
    [
        ["--leader-election-renew-deadline=15"],
        ["--leader-election-retry-period=10"],
        ["--leader-election-retry-period=0"],
    ],
)
def test_an_unordered_timing_is_refused_naming_the_flags(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_options(argv, environ={})
    assert (
        "need 0 < --leader-election-retry-period < --leader-election-renew-deadline"
        " < --leader-election-lease-duration (seconds)" in capsys.readouterr().err
    )
