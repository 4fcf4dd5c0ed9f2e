"""The benchmark against rancher/local-path-provisioner: `python -m bench` (`make bench`).

Why: the project promises to be at least as fast and as frugal as the Go reference it replaces.
This runs both on the same local cluster scenarios in one go (a burst of claims, their release,
a start-up over 10,000 bound volumes, and the cluster's own write floor), prints the figures with
their ratios and the targets met or missed, and writes `bench/results/latest.json` and a plot of
the run beside it. The published page's plot, `docs/benchmarks.png`, is drawn from the latest
run of each scenario (`bench/latest_runs.json`) by `python -m bench.latest_plot`.
"""
