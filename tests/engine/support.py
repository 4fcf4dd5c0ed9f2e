"""Stacks of this project run by the real Pulumi engine against the local cluster.

Each stack runs in a scratch copy of the project (Pulumi.yaml, __main__.py, its stack file):
creating a stack with the passphrase secrets provider writes an `encryptionsalt` into the
stack file, and tests must not touch the repository's stacks. The copy's Pulumi.yaml points
the Python language host at the virtualenv running the tests (which has the project installed
editable), so the program is this checkout's. Each stack gets its own namespace, class names
and provisioner name, so stacks share the session cluster without meeting.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from components.naming import CONFIG_NAMESPACE
from localcluster import LocalCluster, wait_for
from scripts.pulumi_engine import PulumiEngine, project_copy

ROOT = Path(__file__).resolve().parents[2]
PASSPHRASE = "engine-tests-only"  # a throw-away file backend under pytest's tmp
ERROR_LINE = re.compile(r"^\s*error: ", re.MULTILINE)


def unique_suffix() -> str:
    return uuid.uuid4().hex[:6]


@dataclass
class Change:
    """One step the engine planned or performed."""

    op: str
    type: str
    name: str


@dataclass
class Outcome:
    """What one preview/up/destroy did: each resource step, and the engine's own output."""

    changes: list[Change] = field(default_factory=list)
    output: str = ""

    def of(self, op: str) -> list[tuple[str, str]]:
        return sorted((change.type, change.name) for change in self.changes if change.op == op)

    def ops(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for change in self.changes:
            counts[change.op] = counts.get(change.op, 0) + 1
        return counts

    def changed(self) -> list[Change]:
        """Every step other than `same`, other than the preview's read of the stack's own last
        outputs and the default `pulumi` provider that read uses (components/program.py): an
        update does not read them, so a preview always plans that provider anew; the CLI does
        not show default providers, and `--expect-no-changes` does not count them."""
        return [
            change
            for change in self.changes
            if change.op not in ("same", "read") and (change.type, change.name) != READER
        ]


READER = ("pulumi:providers:pulumi", "default")


class EngineStack:
    """One stack of the project in its scratch directory."""

    def __init__(
        self, project_dir: Path, stack: auto.Stack, names: StackNames, cluster: LocalCluster
    ) -> None:
        self.project_dir = project_dir
        self.stack = stack
        self.names = names
        self.cluster = cluster

    def _recorder(self, outcome: Outcome) -> Callable[[auto.EngineEvent], None]:
        def record(event: auto.EngineEvent) -> None:
            step = event.resource_pre_event
            if step is None or step.metadata is None:
                return
            metadata = step.metadata
            name = metadata.urn.rsplit("::", 1)[-1]
            outcome.changes.append(Change(metadata.op.value, metadata.type, name))

        return record

    def _outputs(self, outcome: Outcome) -> Callable[[str], None]:
        def collect(line: str) -> None:
            outcome.output += line + "\n"

        return collect

    def preview(self, **options: Any) -> Outcome:
        outcome = Outcome()
        self.stack.preview(
            on_event=self._recorder(outcome), on_output=self._outputs(outcome), **options
        )
        return outcome

    def up(self, **options: Any) -> Outcome:
        outcome = Outcome()
        self.stack.up(on_event=self._recorder(outcome), on_output=self._outputs(outcome), **options)
        return outcome

    def destroy(self) -> Outcome:
        outcome = Outcome()
        self.stack.destroy(on_event=self._recorder(outcome), on_output=self._outputs(outcome))
        return outcome

    @property
    def stack_file(self) -> Path:
        return self.project_dir / "stacks" / f"Pulumi.{self.stack.name}.yaml"

    def set_config(self, key: str, value: Any) -> None:
        """A scalar through `pulumi config set`; a structured value by editing the stack file,
        as a pull request to the stack's YAML would."""
        full_key = key if ":" in key else f"{CONFIG_NAMESPACE}:{key}"
        if isinstance(value, str | bool | int):
            text = value if isinstance(value, str) else json.dumps(value)
            self.stack.set_config(full_key, auto.ConfigValue(text))
            return
        document = yaml.safe_load(self.stack_file.read_text(encoding="utf-8"))
        document.setdefault("config", {})[full_key] = value
        self.stack_file.write_text(yaml.safe_dump(document), encoding="utf-8")

    def failed_preview(self) -> str:
        """Runs a preview that must fail; returns the engine's whole output."""
        try:
            self.preview()
        except auto.CommandError as error:
            return str(error)
        raise AssertionError("preview succeeded where it had to fail")

    def outputs(self) -> dict[str, Any]:
        return {key: value.value for key, value in self.stack.outputs().items()}


@dataclass(frozen=True)
class StackNames:
    """The names one stack uses, unique per stack."""

    suffix: str
    namespace: str
    provisioner_name: str
    class_name: str

    @classmethod
    def fresh(cls) -> StackNames:
        suffix = unique_suffix()
        return cls(
            suffix=suffix,
            namespace=f"lps-{suffix}",
            provisioner_name=f"e2e-{suffix}.local-path-storage.io/local-path",
            class_name=f"local-path-{suffix}",
        )


def shipped_stack_config(stack: str) -> dict[str, Any]:
    """The config of one of the repository's stacks (`stacks/Pulumi.<stack>.yaml`), full keys."""
    path = ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    config: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))["config"]
    return config


def base_config(
    names: StackNames, node_path: str = "/opt/local-path-provisioner"
) -> dict[str, Any]:
    """The dev stack's shape, with this stack's names (keys without the project prefix). A
    path of the test's own is not on the nodes beforehand, so it says it may be created (only
    rancher's default path is created without being told)."""
    path: str | dict[str, Any] = (
        node_path
        if node_path == "/opt/local-path-provisioner"
        else {"path": node_path, "create": True}
    )
    return {
        "namespace": names.namespace,
        "provisionerName": names.provisioner_name,
        "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [path]}],
        "storageClasses": [
            {
                "name": names.class_name,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        ],
    }


class StackFactory:
    """Makes stacks for one test and destroys whatever they left at its end."""

    def __init__(
        self, engine: PulumiEngine, cluster: LocalCluster, work_dir: Path, state_dir: Path
    ) -> None:
        self.engine = engine
        self.cluster = cluster
        self.work_dir = work_dir
        self.env = engine.environment(state_dir, PASSPHRASE, temp_dir=work_dir / "pulumi-tmp")
        self.command = auto.PulumiCommand(root=str(engine.root))
        self.stacks: list[EngineStack] = []

    def create(
        self,
        config: dict[str, Any] | None = None,
        names: StackNames | None = None,
        *,
        kubeconfig: bool = True,
    ) -> EngineStack:
        names = names or StackNames.fresh()
        stack_config = dict(base_config(names) if config is None else config)
        if kubeconfig:
            stack_config["kubernetes:kubeconfig"] = str(self.cluster.kubeconfig)
        stack_name = f"e2e-{names.suffix}"
        project_dir = project_copy(
            self.work_dir / f"project-{names.suffix}", stack_name, stack_config
        )
        workspace = auto.LocalWorkspace(
            work_dir=str(project_dir), pulumi_command=self.command, env_vars=self.env
        )
        stack = auto.Stack.create(stack_name, workspace)
        engine_stack = EngineStack(project_dir, stack, names, self.cluster)
        self.stacks.append(engine_stack)
        return engine_stack

    def cleanup(self) -> None:
        for engine_stack in reversed(self.stacks):
            try:
                engine_stack.stack.destroy()
            finally:
                engine_stack.stack.workspace.remove_stack(engine_stack.stack.name, force=True)


def api_request(
    cluster: LocalCluster,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, dict[str, Any]]:
    """(status, decoded body) of one admin request by API path."""
    api = cluster.admin_client
    headers = {"Content-Type": content_type} if body is not None else None
    request = api.param_serialize(method, path, body=body, header_params=headers)
    response = api.call_api(*request)
    data = response.read()  # type: ignore[no-untyped-call]
    return int(response.status), (json.loads(data) if data else {})


def api_get(cluster: LocalCluster, path: str) -> dict[str, Any] | None:
    """The object at `path` as a dict, or None when it does not exist."""
    status, document = api_request(cluster, "GET", path)
    if status == 404:
        return None
    assert status == 200, f"GET {path}: {status} {document}"
    return document


def error_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if ERROR_LINE.match(line)]


def lines_of(output: str) -> Iterator[str]:
    yield from (line for line in output.splitlines() if line.strip())


class Tenant:
    """An application namespace with claims of a stack's class and pods that use them."""

    def __init__(self, cluster: LocalCluster, storage_class: str) -> None:
        self.cluster = cluster
        self.storage_class = storage_class
        self.namespace = f"app-{unique_suffix()}"
        cluster.create_namespace(self.namespace)

    def claim_with_consumer(self, name: str, size: str = "1Gi") -> None:
        claim = {
            "metadata": {"name": name},
            "spec": {
                "storageClassName": self.storage_class,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": size}},
            },
        }
        pod = {
            "metadata": {"name": f"{name}-app"},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.invalid/app:1",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": name}}],
            },
        }
        base = f"/api/v1/namespaces/{self.namespace}"
        for collection, body in (("persistentvolumeclaims", claim), ("pods", pod)):
            status, answer = api_request(self.cluster, "POST", f"{base}/{collection}", body)
            assert status == 201, answer

    def wait_bound(self, name: str, timeout: float = 90) -> dict[str, Any]:
        """The claim's PersistentVolume once the claim is Bound."""
        path = f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{name}"

        def bound() -> str | None:
            claim = api_get(self.cluster, path) or {}
            if claim.get("status", {}).get("phase") == "Bound":
                return str(claim["spec"]["volumeName"])
            return None

        volume_name = wait_for(bound, timeout, f"claim {name} to be Bound")
        volume = api_get(self.cluster, f"/api/v1/persistentvolumes/{volume_name}")
        assert volume is not None
        return volume

    def delete_claim(self, name: str) -> None:
        base = f"/api/v1/namespaces/{self.namespace}"
        for path in (f"{base}/pods/{name}-app", f"{base}/persistentvolumeclaims/{name}"):
            status, answer = api_request(self.cluster, "DELETE", f"{path}?gracePeriodSeconds=0")
            assert status in (200, 202), answer


def volume_location(cluster: LocalCluster, volume: dict[str, Any]) -> tuple[str, str, Path]:
    """(node, path, that path in the node's directory) of a node-local volume."""
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    node = str(terms[0]["matchExpressions"][0]["values"][0])
    source = volume["spec"].get("hostPath") or volume["spec"]["local"]
    path = str(source["path"])
    return node, path, cluster.node_dir(node) / path.lstrip("/")


def provisioner_pods(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    listed = api_get(
        cluster,
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=app.kubernetes.io/component%3Dprovisioner",
    )
    assert listed is not None
    return list(listed["items"])


def wait_provisioner_ready(
    cluster: LocalCluster, namespace: str, replicas: int = 1, timeout: float = 90
) -> list[dict[str, Any]]:
    """The Deployment's pods once `replicas` of them are Ready (and none is terminating)."""

    def ready() -> list[dict[str, Any]] | None:
        pods = provisioner_pods(cluster, namespace)
        live = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
        ready_pods = [
            pod
            for pod in live
            if any(
                condition["type"] == "Ready" and condition["status"] == "True"
                for condition in pod.get("status", {}).get("conditions", [])
            )
        ]
        return ready_pods if len(ready_pods) == replicas == len(live) else None

    return wait_for(ready, timeout, f"{replicas} Ready provisioner pod(s) in {namespace}")


def restart_count(pod: dict[str, Any]) -> int:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


def up_with_a_bound_claim(
    stacks: StackFactory, claim: str
) -> tuple[EngineStack, Tenant, dict[str, Any]]:
    """A fresh stack of the base config, up, its provisioner ready, and one claim of its class
    bound for a consumer pod (with the claim's PV): where a test of a stack in use starts."""
    stack = stacks.create()
    stack.up()
    wait_provisioner_ready(stacks.cluster, stack.names.namespace)
    tenant = Tenant(stacks.cluster, stack.names.class_name)
    tenant.claim_with_consumer(claim)
    return stack, tenant, tenant.wait_bound(claim)
