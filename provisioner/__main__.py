"""`python -m provisioner [start] [flags]`, `python -m provisioner orphans [flags]`,
`python -m provisioner csi-node-plugin [flags]` (the CSI node plugin, `python -m
provisioner.csi`: the image's one entrypoint serves the DaemonSet too) and the
`local-path-storage-provisioner` script."""

from __future__ import annotations

import os
import socket
import sys

from provisioner.configuration.options import ORPHANS_COMMAND, parse_options
from provisioner.process.app import run

CSI_NODE_PLUGIN_COMMAND = "csi-node-plugin"


def main() -> None:
    if sys.argv[1:2] == [CSI_NODE_PLUGIN_COMMAND]:
        from provisioner.csi.__main__ import main as node_plugin  # noqa: PLC0415 (its own process)

        sys.argv[1:2] = []
        node_plugin()
    if sys.argv[1:2] == [ORPHANS_COMMAND]:
        from provisioner.scans import orphans_cli  # noqa: PLC0415 (the controller's start needs none of it)

        sys.exit(orphans_cli.main(sys.argv[2:]))
    sys.exit(run(parse_options(sys.argv[1:], os.environ, hostname=socket.gethostname())))


if __name__ == "__main__":
    main()
