"""The pack's policies: the pure checks of this package as Pulumi CrossGuard policies.

Two kinds of settings, from two places, as Pulumi documents them:
- The pack's config file (`--policy-pack-config FILE`, schema in each policy's
  PolicyConfigSchema): a policy's enforcementLevel (advisory, mandatory, disabled), and
  `systemPaths` of safe-storage-paths. Same for every stack that uses the file.
- The stack's config, in the namespace `local-path-storage-policy` (the program ignores other
  namespaces): what this stack declares about itself. `production: true` makes
  production-readiness mandatory; `allowUnsafeHelperTemplate`, `allowPrivilegedHelper` and
  `allowUnpinnedHelperImage` are a stack's recorded acceptance of one helper-pod risk each,
  visible in its stack file and in review.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi.runtime import get_config_env
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy import (
    default_class,
    helper_pods,
    node_plugin,
    production,
    provisioner_config,
    rbac,
    storage_paths,
)
from policy.resources import Resource

STACK_NAMESPACE = "local-path-storage-policy"
OPT_INS = {
    helper_pods.UNSAFE_FLAG: "allowUnsafeHelperTemplate",
    helper_pods.PRIVILEGED: "allowPrivilegedHelper",
    helper_pods.PINNED_IMAGE: "allowUnpinnedHelperImage",
}
"""Policy -> the stack config key (in STACK_NAMESPACE) that lifts it."""
PACK_NAME = "local-path-storage"


def stack_flag(key: str, config: Mapping[str, str] | None = None) -> bool:
    """A boolean of the stack's config in STACK_NAMESPACE, as the engine passes it to the pack
    (PULUMI_CONFIG); false when unset."""
    values = get_config_env() if config is None else config
    value = values.get(f"{STACK_NAMESPACE}:{key}", "false")
    return str(json.loads(value) if value in ("true", "false") else value).lower() == "true"


def _resource_policy(
    name: str,
    description: str,
    check: Callable[[Resource, Mapping[str, Any]], list[str]],
    config_schema: PolicyConfigSchema | None = None,
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        opt_in = OPT_INS.get(name)
        if opt_in is not None and stack_flag(opt_in):
            args.not_applicable(f"the stack accepts it: {STACK_NAMESPACE}:{opt_in} is true")
        resource = Resource(args.resource_type, args.props, args.urn)
        for message in check(resource, args.get_config()):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=config_schema,
    )


def _stack_policy(
    name: str,
    description: str,
    check: Callable[[Sequence[Resource]], list[tuple[str, str]]],
    enforcement_level: EnforcementLevel,
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [Resource(r.resource_type, r.props, r.urn) for r in args.resources]
        for message, urn in check(resources):
            report_violation(message, urn or None)

    return StackValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=enforcement_level
    )


SYSTEM_PATHS_SCHEMA = PolicyConfigSchema(
    properties={
        "systemPaths": {
            "type": "array",
            "items": {"type": "string"},
            "default": list(storage_paths.DEFAULT_SYSTEM_PATHS),
            "description": "Directories (shell patterns) no base path may be or lie in.",
        }
    }
)


def _paths(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    system_paths = config.get("systemPaths") or storage_paths.DEFAULT_SYSTEM_PATHS
    return storage_paths.check_resource(resource, [str(path) for path in system_paths])


def policies(production_stack: bool | None = None) -> list[Policy]:
    """Every policy of the pack; `production_stack` defaults to the stack's own declaration."""
    if production_stack is None:
        production_stack = stack_flag("production")
    return [
        _resource_policy(
            storage_paths.NAME,
            "Volumes never live at /, in system or kubelet directories, at relative or '..' paths.",
            _paths,
            SYSTEM_PATHS_SCHEMA,
        ),
        _stack_policy(
            default_class.NAME,
            "At most one default StorageClass.",
            default_class.check_stack,
            EnforcementLevel.MANDATORY,
        ),
        _resource_policy(
            helper_pods.UNSAFE_FLAG,
            "The provisioner keeps its helper-template safety checks on.",
            lambda resource, _: helper_pods.check_unsafe_flag(resource),
        ),
        _resource_policy(
            helper_pods.PRIVILEGED,
            "Helper pods get no more privilege than the provisioner needs.",
            lambda resource, _: helper_pods.check_privileged(resource),
        ),
        _resource_policy(
            helper_pods.PINNED_IMAGE,
            "The helper image is pinned (a tag other than latest, or a digest).",
            lambda resource, _: helper_pods.check_pinned_image(resource),
        ),
        _resource_policy(
            rbac.NAME,
            "The provisioner's RBAC is least-privilege.",
            lambda resource, _: rbac.check_resource(resource),
        ),
        _stack_policy(
            production.NAME,
            "Production settings: replicas, memory limit, leader election, a Retain class.",
            production.check_stack,
            EnforcementLevel.MANDATORY if production_stack else EnforcementLevel.ADVISORY,
        ),
        _resource_policy(
            node_plugin.RBAC_NAME,
            "The CSI node plugin's ClusterRole reads and patches PVs and writes events, no more.",
            lambda resource, _: node_plugin.check_role(resource),
        ),
        _stack_policy(
            node_plugin.MOUNTS_NAME,
            "The CSI node plugin mounts only the kubelet's directory and the base paths.",
            node_plugin.check_stack,
            EnforcementLevel.MANDATORY,
        ),
        _resource_policy(
            provisioner_config.NAME,
            "The provisioner ConfigMap passes the provisioner's own validation.",
            lambda resource, _: provisioner_config.check_resource(resource),
        ),
    ]
