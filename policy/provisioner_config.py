"""The provisioner ConfigMap passes the runtime's own validation (provisioner.core.config): the
model the provisioner loads at start and on every hot reload, so preview refuses exactly what
the running provisioner would refuse, with the same message. No second copy of the rules.

This program validates its stack config with the same model before it registers anything, so
for its own stacks the policy is a second line. It matters where that first line is missing:
another program or stack that builds the ConfigMap differently (a raw manifest, a Helm chart
through Pulumi, a hand-written config.json), or a transformation that rewrites the ConfigMap
after the program validated it. Without it, such a ConfigMap deploys and the provisioner
refuses it: at start (it stays up but not ready and provisions nothing until the ConfigMap
is fixed) or on reload (the old config stays), with an InvalidConfig event that nobody reads in
a pull request.

The helper template's safety checks are `unprivileged-helper-pod`'s (a stack may opt out of
those); here the template is checked as the runtime checks it with
--allow-unsafe-helper-template: it must still be a Pod with a helper container.
"""

from __future__ import annotations

from collections.abc import Mapping

from policy.resources import Resource, config_map_files, parsed_config_json
from provisioner.core.config import ConfigError, complete_bundle

NAME = "provisioner-config-valid"


def check_resource(resource: Resource) -> list[str]:
    files = config_map_files(resource)
    if files is None:
        return []
    error = _refusal(files)
    if error is None:
        return []
    return [
        f"ConfigMap {resource.name} {error}: the provisioner would refuse this ConfigMap "
        "(provision nothing from start, or keep the old config on reload); fix the value named"
    ]


def _refusal(files: Mapping[str, str]) -> ConfigError | None:
    """The runtime's error for these files, or None; config.json is parsed once for the pack."""
    config = parsed_config_json(files["config.json"])
    if isinstance(config, ConfigError):
        return config
    try:
        complete_bundle(
            config,
            files.get("setup", ""),
            files.get("teardown", ""),
            files.get("helperPod.yaml", ""),
            allow_unsafe_helper_template=True,
        )
    except ConfigError as error:
        return error
    return None
