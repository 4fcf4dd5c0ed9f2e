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
        sys.exit(run(options))
    except NodePluginError as error:
        print(f"csi node plugin: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
