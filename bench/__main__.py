"""`python -m bench`: run, print the tables, write the JSON and the plot."""

from __future__ import annotations

import shlex
import sys
import time

from bench.implementations import REFERENCE_BINARY
from bench.options import parse_options
from bench.plot import write_plot
from bench.report import build_report, print_report, write_json
from bench.runner import run_all, say


def main(argv: list[str]) -> int:
    options = parse_options(argv)
    if any(i.reference for i in options.implementations) and not REFERENCE_BINARY.exists():
        say(f"missing {REFERENCE_BINARY}; run scripts/build-go-tools.sh reference")
        return 2
    work_dir = options.output.parent / "work"
    started = time.monotonic()
    results = run_all(options, work_dir)
    wall = time.monotonic() - started
    command = shlex.join(["python", "-m", "bench", *argv])
    report = build_report(options, results, command, wall)
    print_report(report)
    write_json(report, options.output)
    say(f"wrote {options.output}")
    if options.plot is not None and (results.burst or results.scale):
        write_plot(report, options.plot)
        say(f"wrote {options.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
