"""The provisioner ConfigMap passes the runtime's own validation (provisioner.configuration.config):
the model the provisioner loads at start and on every hot reload, so preview refuses exactly what
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

from policy.resources import (
    CONFIG_MAP,
    KubeObject,
    Resource,
    check_objects,
    config_map_files,
    parsed_config_json,
)
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigError,
    complete_bundle,
)
from provisioner.configuration.pod_template import parse_helper_template

NAME = "provisioner-config-valid"
_KEPT_BY_A_PATCH = {
    "setup": DEFAULT_SETUP_SCRIPT,
    "teardown": DEFAULT_TEARDOWN_SCRIPT,
    "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
}
"""Stand-ins for the keys a ConfigMapPatch leaves as they are in the cluster (which the pack
cannot read): values the runtime accepts, so only what the patch writes is judged."""


def check_resource(resource: Resource) -> list[str]:
    return check_objects(resource, {CONFIG_MAP: _config_map})


def _config_map(config_map: KubeObject) -> list[str]:
    files = config_map_files(config_map)
    if files is None:
        return []
    error = _refusal(files, config_map.partial)
    if error is None:
        return []
    return [
        f"{config_map.label} {error}: the provisioner would refuse this ConfigMap "
        "(provision nothing from start, or keep the old config on reload); fix the value named"
    ]


def _refusal(files: Mapping[str, str], partial: bool) -> ConfigError | None:
    """The runtime's error for these files, or None; config.json is parsed once for the pack.
    A key a ConfigMap leaves out is empty for the runtime; one a Patch leaves out is kept."""
    read = {"setup": "", "teardown": "", "helperPod.yaml": ""}
    read |= (_KEPT_BY_A_PATCH if partial else {}) | dict(files)
    try:
        if "config.json" not in files:  # a Patch of helperPod.yaml alone: config.json is kept
            parse_helper_template(read["helperPod.yaml"], allow_unsafe=True)
            return None
        config = parsed_config_json(read["config.json"])
        if isinstance(config, ConfigError):
            return config
        complete_bundle(
            config,
            read["setup"],
            read["teardown"],
            read["helperPod.yaml"],
            allow_unsafe_helper_template=True,
        )
    except ConfigError as error:
        return error
    return None
