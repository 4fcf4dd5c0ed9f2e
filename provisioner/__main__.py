"""`python -m provisioner [start] [flags]` and the `local-path-storage-provisioner` script."""

from __future__ import annotations

import sys

from provisioner.app import run
from provisioner.options import parse_options


def main() -> None:
    sys.exit(run(parse_options(sys.argv[1:])))


if __name__ == "__main__":
    main()
