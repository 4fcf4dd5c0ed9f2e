"""`python -m provisioner.csi [flags]`: the CSI node plugin (see options.py for the flags)."""

from __future__ import annotations

import os
import sys

from provisioner.csi.options import NodePluginOptionsError, parse_node_plugin_options
from provisioner.csi.server import NodePluginError, run
from provisioner.process.logs import configure_logging


def main() -> None:
    configure_logging(debug=False, json_lines=False)
    try:
        options = parse_node_plugin_options(sys.argv[1:], os.environ)
    except NodePluginOptionsError as error:
        print(f"csi node plugin: {error}", file=sys.stderr)
        sys.exit(2)
    try:
        volumes = None
        controller = None
        if options.manage_volumes:
            # The one module of this package that reaches the Kubernetes client, through the
            # volume manager: the gRPC and mount modules stay without one.
            from provisioner.node_volumes.plugin import start_node_volumes  # noqa: PLC0415

            volumes = start_node_volumes(options)
            controller = volumes.controller
        sys.exit(run(options, volumes, controller))
    except NodePluginError as error:
        print(f"csi node plugin: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
