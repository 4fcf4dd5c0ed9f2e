"""Runs the Pulumi program against the SDK's mock engine and records what it registers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockMonitor

from components.naming import CONFIG_NAMESPACE


@dataclass
class Registration:
    """One RegisterResource call, as the engine would receive it."""

    type: str
    name: str
    custom: bool
    parent_urn: str
    provider: str
    replace_on_changes: list[str]
    delete_before_replace: bool
    inputs: dict[str, Any]
    import_id: str = ""
    """The `import_` option: the ID of an existing object the stack takes over."""
    retain_on_delete: bool = False
    dependencies: tuple[str, ...] = ()
    """URNs of the resources this one depends on (depends_on, parent's aside)."""

    @property
    def parent_name(self) -> str:
        return self.parent_urn.rsplit("::", 1)[-1]

    @property
    def parent_type(self) -> str:
        return self.parent_urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1] if self.parent_urn else ""


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.inputs: dict[tuple[str, str], dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.typ == "pulumi:pulumi:StackReference":
            # The stack reading its own last outputs: none, as for a stack never deployed.
            return str(args.inputs["name"]), {**args.inputs, "outputs": {}}
        self.inputs[(args.typ, args.name)] = args.inputs
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


class _RecordingMonitor(MockMonitor):
    def __init__(self, mocks: _Mocks) -> None:
        super().__init__(mocks)
        self.requests: list[Any] = []
        self.reads: list[Any] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (the gRPC method name)
        self.requests.append(request)
        return super().RegisterResource(request)  # type: ignore[no-untyped-call]

    def ReadResource(self, request: Any) -> Any:  # noqa: N802 (the gRPC method name)
        self.reads.append(request)
        return super().ReadResource(request)  # type: ignore[no-untyped-call]


@dataclass
class Run:
    registrations: list[Registration]
    outputs: dict[str, Any]
    error: BaseException | None
    reads: list[tuple[str, str, str]] = field(default_factory=list)
    """Existing objects the program reads (`Resource.get`): type, name, id."""

    def of_type(self, type_token: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_token]

    def one(self, type_token: str) -> Registration:
        (found,) = self.of_type(type_token)
        return found


def run_mocked(raw_config: dict[str, str], program: Callable[[], None], stack: str = "test") -> Run:
    """Runs `program` with `raw_config` as the stack config; returns registrations and exports."""
    mocks = _Mocks()
    monitor = _RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(
        mocks, project=CONFIG_NAMESPACE, stack=stack, preview=False, monitor=monitor
    )
    pulumi.runtime.set_all_config(raw_config)
    outputs: dict[str, Any] = {}
    error: BaseException | None = None

    def build() -> pulumi.Output[Any]:
        # The mocks' root stack is made once per process: without this, a run would also
        # report an earlier run's exports.
        pulumi.runtime.get_root_resource().outputs.clear()  # type: ignore[union-attr]
        program()
        stack_outputs = pulumi.runtime.get_root_resource().outputs  # type: ignore[union-attr]
        return pulumi.Output.from_input(stack_outputs).apply(outputs.update)

    try:
        # pulumi.runtime.test runs it and waits for every registration and output.
        pulumi.runtime.test(build)()  # type: ignore[no-untyped-call]
    except Exception as raised:  # noqa: BLE001 (handed to the test)
        error = raised
    finally:
        pulumi.runtime.set_all_config({})
    registrations = [
        Registration(
            type=request.type,
            name=request.name,
            custom=request.custom,
            parent_urn=request.parent,
            provider=request.provider,
            replace_on_changes=list(request.replaceOnChanges),
            delete_before_replace=request.deleteBeforeReplace,
            inputs=mocks.inputs.get((request.type, request.name), {}),
            import_id=request.importId,
            retain_on_delete=request.retainOnDelete,
            dependencies=tuple(request.dependencies),
        )
        for request in monitor.requests
        if request.type != "pulumi:pulumi:Stack"
    ]
    reads = [(request.type, request.name, request.id) for request in monitor.reads]
    return Run(registrations, outputs, error, reads)
