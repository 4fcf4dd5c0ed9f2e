"""The scaling table's options and layout (the runs themselves are the benchmark's)."""

import pytest

from bench.options import parse_options
from bench.report import scaling_table


def test_scale_sizes_are_sorted_and_include_the_main_size() -> None:
    options = parse_options(["--scale-sizes", "50000,1000", "--scale-volumes", "10000"])
    assert options.scale_sizes == (1000, 10000, 50000)
    assert parse_options([]).scale_sizes == (10000,)
    with pytest.raises(SystemExit):
        parse_options(["--scale-sizes", "1000,x"])


def test_the_table_has_one_row_per_size_with_ratios_to_the_tuned_reference() -> None:
    def run(ready: float, rss: float) -> dict[str, float]:
        return {"ready_seconds": ready, "steady_rss_mib": rss, "peak_rss_mib": rss + 1}

    report = {
        "scaling": {
            "10000": {"ours": run(0.5, 60.0), "reference-tuned": run(1.0, 200.0)},
            "1000": {"ours": run(0.25, 40.0), "reference-tuned": run(0.5, 50.0)},
        }
    }
    lines = scaling_table(report).splitlines()
    assert lines[0].split(" | ")[:3] == ["volumes", "ready (s): ours", "ready (s): reference-tuned"]
    assert [line.split(" | ")[0].strip() for line in lines[2:]] == ["1000", "10000"]
    assert [cell.strip() for cell in lines[3].split(" | ")][1:4] == ["0.5", "1", "0.5"]
    assert "0.3" in [cell.strip() for cell in lines[3].split(" | ")]  # steady RSS ratio 60/200
