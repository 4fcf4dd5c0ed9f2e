"""The Pulumi package, used as a platform team would from its own program, with the real
engine against the local cluster: `pulumi package add` generates a Python or TypeScript SDK
from the plugin in pulumi-package/, the program passes its own namespace's name (an Output)
into LocalPathStorage, `up` deploys the provisioner from the image, a claim of its class
binds, and `destroy` leaves nothing. A bad arg fails preview with the stack's message naming
the arg; `pulumi package get-schema` types and describes every arg."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components import naming
from localcluster import LocalCluster, wait_for
from scripts.pulumi_engine import ROOT, PulumiEngine
from tests.engine.package_consumers import (
    PLUGIN_DIR,
    PYTHON_PROGRAM,
    TYPESCRIPT_PROGRAM,
    ConsumerSettings,
    prepare_plugin,
    run,
    write_python_consumer,
    write_typescript_consumer,
)
from tests.engine.support import (
    PASSPHRASE,
    Tenant,
    api_get,
    unique_suffix,
    volume_location,
    wait_provisioner_ready,
)

BAD_PATH_ARG = "property nodePathMap[0].paths[0] with value"
BAD_PATH_REASON = '"data" must be an absolute path'


@pytest.fixture(scope="module")
def plugin() -> Path:
    prepare_plugin()
    return PLUGIN_DIR


def pulumi_env(engine: PulumiEngine, state_dir: Path) -> dict[str, str]:
    return engine.environment(state_dir, PASSPHRASE, temp_dir=state_dir / "pulumi-tmp")


def consume(
    directory: Path,
    env: dict[str, str],
    cluster: LocalCluster,
    plugin: Path,
    bad_program: Callable[[], None],
) -> None:
    """Adds the package, ups the program, binds a claim, destroys, then previews a bad arg."""
    pulumi = shutil.which("pulumi", path=env["PATH"])
    assert pulumi is not None
    added = run([pulumi, "package", "add", str(plugin)], directory, env)
    assert "Added package local-path-storage" in added.stdout + added.stderr
    suffix = unique_suffix()
    settings = ConsumerSettings(
        kubeconfig=str(cluster.kubeconfig),
        provisioner_name=f"pkg-{suffix}.local-path-storage.io/local-path",
        class_name=f"pkg-{suffix}",
        node_path=f"/opt/lps-package-{suffix}",
    )
    run([pulumi, "stack", "init", "consumer"], directory, env)
    for key, value in settings.as_config().items():
        run([pulumi, "config", "set", key, value], directory, env)
    try:
        preview = run([pulumi, "preview", "--non-interactive"], directory, env)
        assert "local-path-storage:index:LocalPathStorage" in preview.stdout, preview.stdout
        assert "kubernetes:apps/v1:Deployment" in preview.stdout, preview.stdout
        run([pulumi, "up", "--yes", "--skip-preview", "--non-interactive"], directory, env)
        outputs = json.loads(run([pulumi, "stack", "output", "--json"], directory, env).stdout)
        namespace = outputs["namespace"]
        assert namespace.startswith("team-"), outputs  # the program's own, auto-named
        assert outputs["classes"] == [settings.class_name]
        wait_provisioner_ready(cluster, namespace)

        tenant = Tenant(cluster, settings.class_name)
        tenant.claim_with_consumer("data")
        volume = tenant.wait_bound("data")
        assert volume["spec"]["storageClassName"] == settings.class_name
        _, path, directory_on_node = volume_location(cluster, volume)
        assert path.startswith(settings.node_path + "/")
        assert directory_on_node.is_dir()
        tenant.delete_claim("data")
        wait_for(
            lambda: True if not directory_on_node.exists() else None,
            90,
            f"{directory_on_node} to be removed after the claim is released",
        )
    finally:
        run([pulumi, "destroy", "--yes", "--skip-preview", "--non-interactive"], directory, env)
    assert_nothing_left(cluster, namespace, settings)

    bad_program()
    failed = run([pulumi, "preview", "--non-interactive"], directory, env, check=False)
    assert failed.returncode != 0
    output = failed.stdout + failed.stderr
    # One line names the arg and says what is wrong (the engine prints the value between).
    assert [
        line for line in output.splitlines() if BAD_PATH_ARG in line and BAD_PATH_REASON in line
    ], output
    run([pulumi, "stack", "rm", "--yes", "consumer"], directory, env)


def assert_nothing_left(cluster: LocalCluster, namespace: str, settings: ConsumerSettings) -> None:
    cluster_scoped = naming.cluster_scoped_name(namespace)
    leftovers = {
        "namespace": f"/api/v1/namespaces/{namespace}",
        "StorageClass": f"/apis/storage.k8s.io/v1/storageclasses/{settings.class_name}",
        "ClusterRole": f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{cluster_scoped}",
        "ClusterRoleBinding": (
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{cluster_scoped}"
        ),
    }

    def all_gone() -> bool | None:
        return True if all(api_get(cluster, path) is None for path in leftovers.values()) else None

    wait_for(all_gone, 120, f"destroy to remove {', '.join(leftovers)}")
    volumes = api_get(cluster, "/api/v1/persistentvolumes")
    assert volumes is not None
    assert not [
        item
        for item in volumes["items"]
        if item["spec"].get("storageClassName") == settings.class_name
    ]


def test_a_python_program_consumes_the_package_with_an_output_namespace(
    tmp_path: Path,
    cluster: LocalCluster,
    pulumi_engine: PulumiEngine,
    engine_state_dir: Path,
    plugin: Path,
) -> None:
    directory = write_python_consumer(tmp_path / "python-consumer")
    env = pulumi_env(pulumi_engine, engine_state_dir)

    def bad_program() -> None:
        (directory / "__main__.py").write_text(
            PYTHON_PROGRAM.replace('config.require("nodePath")', '"data"'), encoding="utf-8"
        )

    consume(directory, env, cluster, plugin, bad_program)
    sdk = directory / "sdks" / "local-path-storage" / "pulumi_local_path_storage"
    assert (sdk / "local_path_storage.py").is_file()


def test_a_typescript_program_consumes_the_package_with_an_output_namespace(
    tmp_path: Path,
    cluster: LocalCluster,
    pulumi_engine: PulumiEngine,
    engine_state_dir: Path,
    plugin: Path,
) -> None:
    env = pulumi_env(pulumi_engine, engine_state_dir)
    directory = write_typescript_consumer(tmp_path / "typescript-consumer", env)

    def bad_program() -> None:
        (directory / "index.ts").write_text(
            TYPESCRIPT_PROGRAM.replace('config.require("nodePath")', '"data"'), encoding="utf-8"
        )

    consume(directory, env, cluster, plugin, bad_program)
    package = json.loads((directory / "package.json").read_text(encoding="utf-8"))
    assert package["dependencies"]["@pulumi/local-path-storage"] == "file:sdks/local-path-storage"


def _described(properties: dict[str, Any], where: str) -> list[str]:
    problems = []
    for name, spec in properties.items():
        if "type" not in spec and "$ref" not in spec:
            problems.append(f"{where}.{name} has no type")
        if not str(spec.get("description", "")).strip():
            problems.append(f"{where}.{name} has no description")
    return problems


def test_get_schema_types_and_describes_every_arg(
    pulumi_engine: PulumiEngine, engine_state_dir: Path, plugin: Path, tmp_path: Path
) -> None:
    env = pulumi_env(pulumi_engine, engine_state_dir)
    printed = run([str(pulumi_engine.cli), "package", "get-schema", str(plugin)], tmp_path, env)
    schema = json.loads(printed.stdout)
    component = schema["resources"]["local-path-storage:index:LocalPathStorage"]
    assert component["isComponent"] is True
    inputs = component["inputProperties"]
    assert {"namespace", "nodePathMap", "storageClasses", "image", "tolerations"} <= set(inputs)
    assert not inputs["namespace"].get("plain"), "namespace must take another resource's Output"
    problems = _described(inputs, "LocalPathStorage")
    for token, object_type in schema.get("types", {}).items():
        problems += _described(object_type.get("properties", {}), token)
    assert not problems, "\n".join(problems)
    committed = json.loads((ROOT / "docs" / "pulumi-package-schema.json").read_text("utf-8"))
    assert schema == committed, "docs/pulumi-package-schema.json is not what the plugin prints"
