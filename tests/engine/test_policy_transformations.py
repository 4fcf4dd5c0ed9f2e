"""What the program's own validation cannot see: a stack transformation (or another program)
that changes the objects after the program built them. The pack still refuses a widened
ClusterRole, a second default class, a config.json the provisioner would refuse and a
provisioner run with its unsafe flag in a form the program never writes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster import LocalCluster
from scripts.pulumi_engine import PulumiEngine
from tests.engine.support import StackFactory, StackNames, base_config
from tests.policy.engine import PINNED_HELPER, PolicyStack, violations
from tests.policy.support import policy_pack_copy

PROGRAM = '''"""The project's program with one stack transformation."""

import pulumi

from components.program import main


def change(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
    props = dict(args.props)
    {body}
    return pulumi.ResourceTransformationResult(props, args.opts)


pulumi.runtime.register_stack_transformation(change)
main()
'''
TRANSFORMS = {
    "least-privilege-rbac": (
        'if args.type_ != "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole":\n'
        "        return None\n"
        '    props["rules"] = [*props["rules"], {"api_groups": [""], "resources": ["secrets"],'
        ' "verbs": ["get", "list"]}]'
    ),
    "single-default-storage-class": (
        'if args.type_ != "kubernetes:storage.k8s.io/v1:StorageClass":\n'
        "        return None\n"
        '    metadata = dict(props["metadata"])\n'
        '    metadata["annotations"] = {**metadata.get("annotations", {}),'
        ' "storageclass.kubernetes.io/is-default-class": "true"}\n'
        '    props["metadata"] = metadata'
    ),
    "provisioner-config-valid": (
        'if args.type_ != "kubernetes:core/v1:ConfigMap":\n'
        "        return None\n"
        '    props["data"] = {**props["data"], "config.json": '
        '\'{"nodePathMaps": [{"node": "n", "paths": ["/opt/x"]}]}\'}'
    ),
    # The image's ENTRYPOINT runs the provisioner, and argparse's abbreviation of the flag.
    "no-unsafe-helper-template": (
        'if args.type_ != "kubernetes:apps/v1:Deployment":\n'
        "        return None\n"
        '    spec = dict(props["spec"])\n'
        '    template = dict(spec["template"])\n'
        '    pod = dict(template["spec"])\n'
        '    container = dict(pod["containers"][0])\n'
        '    container.pop("command")\n'
        '    container["args"] = [*container["args"], "--allow-unsafe"]\n'
        '    pod["containers"] = [container]\n'
        '    template["spec"] = pod\n'
        '    spec["template"] = template\n'
        '    props["spec"] = spec'
    ),
}
MESSAGES = {
    "least-privilege-rbac": "it grants secrets",
    "single-default-storage-class": "keep storageclass.kubernetes.io/is-default-class",
    "provisioner-config-valid": "the provisioner would refuse this ConfigMap",
    "no-unsafe-helper-template": "runs with --allow-unsafe-helper-template",
}


@pytest.fixture(scope="module")
def policy_stack(
    pulumi_engine: PulumiEngine, cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PolicyStack]:
    work = tmp_path_factory.mktemp("policy-transformations")
    factory = StackFactory(pulumi_engine, cluster, work, work / "state")
    names = StackNames.fresh()
    config = base_config(names)
    config["storageClasses"].append({"name": f"{names.class_name}-b"})
    stack = factory.create({**config, **PINNED_HELPER}, names)
    yield PolicyStack(stack, policy_pack_copy(work / "policy"))
    (stack.project_dir / "__main__.py").write_text(
        "from components.program import main\n\nmain()\n", encoding="utf-8"
    )
    factory.cleanup()


@pytest.mark.parametrize("policy", list(TRANSFORMS))
def test_a_transformed_object_fails_preview(policy_stack: PolicyStack, policy: str) -> None:
    program = policy_stack.stack.project_dir / "__main__.py"
    program.write_text(PROGRAM.format(body=TRANSFORMS[policy]), encoding="utf-8")
    passed, output = policy_stack.run({})
    assert not passed
    assert [name for level, name in violations(output) if level == "mandatory"] == [policy]
    assert MESSAGES[policy] in output
