"""`python -m provisioner [start] [flags]`, `python -m provisioner orphans [flags]` and the
`local-path-storage-provisioner` script."""

from __future__ import annotations

import os
import socket
import sys

from provisioner.configuration.options import ORPHANS_COMMAND, parse_options
from provisioner.process.app import run


def main() -> None:
    if sys.argv[1:2] == [ORPHANS_COMMAND]:
        from provisioner.scans import orphans_cli  # noqa: PLC0415 (the controller's start needs none of it)

        sys.exit(orphans_cli.main(sys.argv[2:]))
    sys.exit(run(parse_options(sys.argv[1:], os.environ, hostname=socket.gethostname())))


if __name__ == "__main__":
    main()
