"""The defaults of the settings that both the runtime and the stack have, each written once.

The runtime reads them as its flags' defaults (options.py) and config.json's (config.py); the
Pulumi components read them as the defaults of their args (components/args.py), which are in
turn the stack keys' defaults (components/settings.py). Pulumi.yaml and the package schema
must spell them literally for users to see: tests hold those equal to these.
"""

from __future__ import annotations

PROVISIONER_NAME = "local-path-storage.io/local-path"
CONFIG_MAP_NAME = "local-path-config"
HELPER_SERVICE_ACCOUNT = "local-path-storage-helper"
WORKERS = 8
PROVISIONING_RETRY_COUNT = 15
DELETION_RETRY_COUNT = 15
METRICS_PORT = 8080
LEADER_ELECTION = True
CMD_TIMEOUT_SECONDS = 120
"""config.json cmdTimeoutSeconds: how long a helper pod may run."""

# Runtime-only settings (flags and environment variables, no stack key): the Options dataclass
# and the flag parser both read these.
HELPER_BATCH_SIZE = 12
HELPER_PODS_PER_NODE = 12
"""Helper pods at once per node and action: a burst this size runs a pod per volume, side by
side (see batch_planner); twelve measured on a 2-core node bound in 6.4 s."""
HELPER_HOLD_TIMEOUT_SECONDS = 300.0
NODE_SCAN_INTERVAL_SECONDS = 3600.0
LEASE_DURATION_SECONDS = 15.0
RENEW_DEADLINE_SECONDS = 10.0
RETRY_PERIOD_SECONDS = 2.0
