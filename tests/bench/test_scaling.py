"""The scaling table's options and layout (the runs themselves are the benchmark's)."""

import pytest

from bench.options import parse_options
from bench.report import scale_starts_table, scaling_table
from bench.scale import ScaleResult, median_start
from tests.bench.test_goals import scale


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


def _start(ready: float, cpu: float, rss: float) -> ScaleResult:
    return scale("ours", 50_000, ready, cpu, rss)


def test_several_starts_give_the_medians_and_keep_every_start() -> None:
    # The slow start (a compaction, say) is neither the time nor the CPU reported.
    runs = [_start(3.5, 2.9, 140.0), _start(9.0, 2.7, 150.0), _start(4.0, 3.4, 160.0)]
    merged = median_start(runs)
    assert (merged.ready_seconds, merged.ready_cpu_seconds) == (4.0, 2.9)
    assert merged.steady_rss_mib == 160.0  # the median-ready start's other figures
    assert merged.starts == [(3.5, 2.9), (9.0, 2.7), (4.0, 3.4)]
    assert median_start(runs[:2]).ready_seconds == 6.25
    with pytest.raises(ValueError, match="no starts"):
        median_start([])


def test_the_largest_size_takes_three_starts_unless_told_or_quick() -> None:
    assert parse_options([]).scale_starts == 3
    assert parse_options(["--quick"]).scale_starts == 1
    assert parse_options(["--scale-starts", "5"]).scale_starts == 5
    for wrong in ("0", "-1", "x"):
        with pytest.raises(SystemExit):
            parse_options(["--scale-starts", wrong])


def test_the_starts_table_lists_every_start_of_the_sizes_that_took_several() -> None:
    report = {
        "scaling": {
            "1000": {"ours": {"starts": []}},
            "50000": {
                "ours": {"starts": [[3.5, 2.9], [4.0, 3.4]]},
                "reference-tuned": {"starts": [[2.2, 2.5], [4.6, 3.3]]},
            },
        }
    }
    lines = scale_starts_table(report).splitlines()
    assert [cell.strip() for cell in lines[2].split(" | ")] == [
        "50000",
        "ours",
        "3.5, 4",
        "2.9, 3.4",
    ]
    assert lines[3].split(" | ")[1].strip() == "reference-tuned"
    assert len(lines) == 4
    assert scale_starts_table({"scaling": {"1000": {"ours": {}}}}) == ""
