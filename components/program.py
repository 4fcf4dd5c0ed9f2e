"""The Pulumi program: stack config in, components and stack outputs out.

Validation happens first and completely, so a bad stack config fails with one line naming the
key before a single resource is registered (nothing to roll back, nothing half-planned).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as kubernetes

from components.adoption import adoption_summary
from components.deployment import ProvisionerDeployment
from components.settings import StackSettings, parse_settings
from components.stack_config import StackConfig, read_stack_config
from components.stack_values import SettingsError
from components.storage_classes import StorageClasses

INSTANCE_NAME = "local-path-storage"
ALREADY_REPORTED_EXIT_CODE = 32
"""The Python language host's exit code for "the program has shown the user an actionable
message": with it the engine prints that message alone, with no second `error:` line saying
the program exited non-zero."""


def load_settings(stack_config: StackConfig) -> StackSettings:
    """Parses stack config; a bad value becomes a RunError, which the engine prints as one
    `error:` line without a traceback."""
    try:
        return parse_settings(stack_config.values, stack_config.secret_keys)
    except SettingsError as error:
        raise pulumi.RunError(str(error)) from None


def kubernetes_provider(settings: StackSettings) -> kubernetes.Provider:
    """The one explicit provider: ConfigMaps updated in place (so the runtime hot-reloads
    instead of losing its mounted config to a replacement), and optionally rendering manifests
    to a directory instead of applying them. Cluster access settings in the `kubernetes:`
    namespace (kubeconfig, context) are honoured as they would be by the default provider,
    except in render mode, where no cluster is contacted and the provider refuses them (a
    stack that renders can keep its `kubernetes:kubeconfig`)."""
    if settings.render_yaml_to_directory is not None:
        return kubernetes.Provider(
            "kubernetes",
            enable_config_map_mutable=True,
            render_yaml_to_directory=settings.render_yaml_to_directory,
        )
    cluster = pulumi.Config("kubernetes")
    return kubernetes.Provider(
        "kubernetes",
        enable_config_map_mutable=True,
        kubeconfig=cluster.get("kubeconfig"),
        context=cluster.get("context"),
    )


def provisioner_rename_warning(previous: str, current: str) -> str:
    """What preview says when provisionerName changes on a deployed stack."""
    return (
        f"provisionerName changes from {previous!r} to {current!r}: volumes provisioned as "
        f"{previous!r} will no longer be served (released ones keep their directory and PV); "
        f"delete their claims first, or keep provisionerName {previous!r} "
        '(components/README.md, "What a change does")'
    )


def warn_on_provisioner_rename(current: str) -> None:
    """The runtime serves only volumes whose provisioned-by annotation is its name, so a rename
    would orphan the old name's volumes without a word. The stack's own last outputs (a stack
    reference to itself, read-only) hold the name deployed so far. Only in a preview: an update
    writes that very checkpoint while it runs, and reading it then races the write (the file
    backend answers "failed to load checkpoint: EOF"); the warning belongs to the preview that
    reviewers read anyway."""
    if not pulumi.runtime.is_dry_run():
        return
    this_stack = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    deployed = pulumi.StackReference("deployed-outputs", stack_name=this_stack)

    def compare(previous: object) -> None:
        if isinstance(previous, str) and previous and previous != current:
            pulumi.log.warn(provisioner_rename_warning(previous, current))

    deployed.get_output("provisionerName").apply(compare)


def run() -> None:
    """Builds the whole stack from the current stack config."""
    settings = load_settings(read_stack_config())
    for warning in settings.warnings:
        pulumi.log.warn(warning)
    if settings.deployment.adopt is not None:
        pulumi.log.info(adoption_summary(settings.deployment.adopt))
    warn_on_provisioner_rename(settings.deployment.provisioner_name)
    provider = kubernetes_provider(settings)
    with_provider = pulumi.ResourceOptions(providers=[provider])
    deployment = ProvisionerDeployment(INSTANCE_NAME, settings.deployment, with_provider)
    classes = StorageClasses(INSTANCE_NAME, settings.storage_classes, with_provider)
    pulumi.export("namespace", deployment.namespace)
    pulumi.export("provisionerName", deployment.provisioner_name)
    pulumi.export("configMapName", deployment.config_map_name)
    pulumi.export("storageClassNames", classes.class_names)
    if settings.render_yaml_to_directory is not None:
        pulumi.export("renderedTo", settings.render_yaml_to_directory)


def main() -> None:
    """The program's entry point (`__main__.py`): a bad stack config ends it with one `error:`
    line naming the key and the fix, and no traceback."""
    try:
        run()
    except pulumi.RunError as error:
        pulumi.log.error(str(error))
        raise SystemExit(ALREADY_REPORTED_EXIT_CODE) from None
