from pathlib import Path

import pytest

from provisioner.configuration.options import (
    DEFAULT_PROVISIONER_NAME,
    OptionsError,
    parse_options,
    read_options,
)


def test_defaults_without_flags_or_environment() -> None:
    options = parse_options([], environ={})
    assert options.provisioner_name == DEFAULT_PROVISIONER_NAME
    assert options.namespace == "local-path-storage"
    assert options.config_path == Path("/etc/config/config.json")
    assert options.helper_pod_file is None
    assert options.workers == 8
    assert options.leader_election is True
    assert options.kubeconfig is None


def test_rancher_environment_names_are_honoured() -> None:
    environ = {
        "PROVISIONER_NAME": "rancher.io/local-path",
        "POD_NAMESPACE": "kube-system",
        "CONFIG_PATH": "/cfg/config.json",
        "HELPER_POD_FILE": "/cfg/helper.yaml",
        "SERVICE_ACCOUNT_NAME": "helper-sa",
        "WORKER_THREADS": "3",
        "PROVISIONING_RETRY_COUNT": "0",
        "RANCHER_DEBUG": "true",
        "KUBECONFIG": "/k/config",
    }
    options = parse_options(["start"], environ=environ)
    assert options.provisioner_name == "rancher.io/local-path"
    assert options.namespace == "kube-system"
    assert options.config_path == Path("/cfg/config.json")
    assert options.helper_pod_file == Path("/cfg/helper.yaml")
    assert options.helper_service_account == "helper-sa"
    assert options.workers == 3
    assert options.provisioning_retry_count == 0
    assert options.debug is True
    assert options.kubeconfig == "/k/config"


def test_flags_win_over_environment() -> None:
    options = parse_options(
        ["--provisioner-name", "x.io/p", "--worker-threads", "2", "--no-leader-election"],
        environ={"PROVISIONER_NAME": "y.io/q", "WORKER_THREADS": "5"},
    )
    assert (options.provisioner_name, options.workers, options.leader_election) == (
        "x.io/p",
        2,
        False,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--worker-threads", "0"], "--worker-threads must be at least 1, got 0"),
        (["--helper-batch-size", "0"], "--helper-batch-size must be at least 1, got 0"),
        (["--helper-batch-size", "65"], "--helper-batch-size must be at most 64, got 65"),
        (["--helper-pods-per-node", "0"], "--helper-pods-per-node must be at least 1, got 0"),
        (["--deletion-retry-count", "-1"], "--deletion-retry-count must be 0 (forever) or more"),
        (
            ["--predecessor-selector", "app in (a)"],
            "--predecessor-selector 'app in (a)' is not a label selector of key=value pairs",
        ),
    ],
)
def test_bad_flags_are_refused_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_options(argv, environ={})
    assert message in capsys.readouterr().err


def test_helper_batching_defaults_and_environment() -> None:
    defaults = parse_options([], environ={})
    assert (defaults.helper_batch_size, defaults.helper_pods_per_node) == (12, 12)
    tuned = parse_options(
        ["--helper-batch-size", "1"],
        environ={"HELPER_PODS_PER_NODE": "3", "HELPER_BATCH_SIZE": "9"},
    )
    assert (tuned.helper_batch_size, tuned.helper_pods_per_node) == (1, 3)


def test_read_options_raises_what_the_provisioner_would_print_and_exit_with() -> None:
    with pytest.raises(OptionsError, match="unrecognized arguments: --no-such-flag"):
        read_options(["--no-such-flag"], {})
    with pytest.raises(OptionsError, match="usage: local-path-storage-provisioner"):
        read_options(["--help"], {})
    with pytest.raises(OptionsError, match="invalid literal for int"):
        read_options([], {"WORKER_THREADS": "many"})


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--allow-unsafe"], {}),  # argparse accepts an unambiguous abbreviation
        (["start", "--allow-unsafe-h"], {}),
        ([], {"ALLOW_UNSAFE_HELPER_TEMPLATE": "yes"}),
        ([], {"ALLOW_UNSAFE_HELPER_TEMPLATE": " On "}),
    ],
)
def test_every_spelling_of_the_unsafe_flag_the_runtime_accepts(
    argv: list[str], environ: dict[str, str]
) -> None:
    assert read_options(argv, environ).allow_unsafe_helper_template


def test_the_pod_name_defaults_to_the_hostname_given() -> None:
    assert parse_options([], {}, hostname="lps-0").pod_name == "lps-0"
    assert parse_options([], {"POD_NAME": "lps-1"}, hostname="lps-0").pod_name == "lps-1"


def test_a_predecessor_selector_from_the_flag_or_the_environment() -> None:
    assert parse_options([], environ={}).predecessor_selector == ""
    selector = "app=local-path-provisioner,app.kubernetes.io/instance=lp"
    assert parse_options(["--predecessor-selector", selector], environ={}).predecessor_selector == (
        selector
    )
    environ = {"PREDECESSOR_SELECTOR": "app=local-path-provisioner"}
    assert parse_options([], environ=environ).predecessor_selector == "app=local-path-provisioner"
