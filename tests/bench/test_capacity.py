"""The capacity-on burst's pure pieces: its config, the CSIDriver, and counting its writes."""

from __future__ import annotations

import json
import re
from collections import Counter

from bench.audit import RequestCounts
from bench.capacity import (
    CAPACITY_PROVISIONER_NAME,
    WRITES_METRIC,
    burst_budget,
    capacity_config,
    capacity_writes,
    counter_total,
    csi_driver,
    declares_capacity,
)
from bench.report import IMPLEMENTATIONS, _figure_row
from bench.workspace import BASE_PATH, PROVISIONER_NAME, config_files
from provisioner.configuration.config import parse_config_json
from provisioner.objects.quantities import quantity_to_bytes

# The API's CSIDriver name rule: a DNS-1123 subdomain of at most 63 characters.
_CSI_DRIVER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def test_the_budget_holds_the_whole_burst_on_one_node() -> None:
    assert burst_budget(200) == "200Gi"
    assert burst_budget(50) == "50Gi"
    assert quantity_to_bytes(burst_budget(3, "512Mi")) == 3 * 512 * 2**20
    assert burst_budget(0) == "1Gi"


def test_the_capacity_config_is_the_object_form_and_ours_parses_it() -> None:
    text = json.dumps(capacity_config(BASE_PATH, "200Gi"))
    assert declares_capacity(text)
    config = parse_config_json(text)
    assert config.declares_capacity()


def test_the_plain_config_has_no_capacity_so_the_reference_may_get_it() -> None:
    assert not declares_capacity(config_files()["config.json"])
    assert declares_capacity(config_files("10Gi")["config.json"])
    with_classes = {
        "nodePathMap": [],
        "storageClassConfigs": {"fast": {"paths": [{"path": "/fast", "capacity": "1Gi"}]}},
    }
    assert declares_capacity(json.dumps(with_classes))


def test_the_csi_driver_asks_for_capacity_under_a_valid_name() -> None:
    driver = csi_driver(CAPACITY_PROVISIONER_NAME)
    assert driver["spec"]["storageCapacity"] is True
    assert len(CAPACITY_PROVISIONER_NAME) <= 63
    assert _CSI_DRIVER_NAME.fullmatch(CAPACITY_PROVISIONER_NAME)
    # Why capacity on needs its own name: the plain one is no valid CSIDriver name.
    assert not _CSI_DRIVER_NAME.fullmatch(PROVISIONER_NAME)


def test_capacity_writes_count_writes_on_csistoragecapacities_only() -> None:
    counts = RequestCounts(
        Counter(
            {
                "create csistoragecapacities": 8,
                "patch csistoragecapacities": 30,
                "update csistoragecapacities": 1,
                "delete csistoragecapacities": 2,
                "list csistoragecapacities": 40,
                "get csidrivers": 40,
                "create persistentvolumes": 50,
                "patch persistentvolumes": 3,
            }
        )
    )
    assert capacity_writes(counts) == 41
    assert capacity_writes(RequestCounts()) == 0


def test_counter_total_sums_label_sets_and_ignores_the_rest() -> None:
    text = "\n".join(
        [
            f"# HELP {WRITES_METRIC} CSIStorageCapacity objects written.",
            f"# TYPE {WRITES_METRIC} counter",
            f'{WRITES_METRIC}{{operation="create"}} 8.0',
            f'{WRITES_METRIC}{{operation="update"}} 31.0',
            'local_path_csistoragecapacity_writes_created{operation="create"} 1.7e+09',
            f"{WRITES_METRIC}_other 5.0",
            "local_path_provision_total 50.0",
        ]
    )
    assert counter_total(text, WRITES_METRIC) == 39.0
    assert counter_total("", WRITES_METRIC) == 0.0
    assert counter_total(f"{WRITES_METRIC} 2 1700000000000\n", WRITES_METRIC) == 2.0


def test_figure_rows_put_capacity_on_beside_off() -> None:
    assert IMPLEMENTATIONS[:2] == ("ours", "ours-capacity")
    row = _figure_row("burst: time until all Bound", "s", {"ours": 20.0, "ours-capacity": 25.0})
    assert row["ours-capacity"] == 25.0
    assert row["capacity/ours"] == 1.25
    only_ours = _figure_row("x", "s", {"ours": 1.0, "reference-tuned": 2.0})
    assert only_ours["ours/tuned"] == 0.5
    assert only_ours["capacity/ours"] != only_ours["capacity/ours"]  # NaN: not measured
