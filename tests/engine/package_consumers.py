"""Consumer programs of the Pulumi package, as a platform team writes them in its own
repository: a Python and a TypeScript project in a directory of their own, which add the
package with `pulumi package add <checkout>/pulumi-package` (the generated SDK lands in their
`sdks/`), create their own namespace and pass its name, an Output, into LocalPathStorage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scripts.pulumi_engine import ROOT

PLUGIN_DIR = ROOT / "pulumi-package"

PYTHON_PROGRAM = """\
import pulumi
import pulumi_kubernetes as kubernetes
import pulumi_local_path_storage as local_path_storage

config = pulumi.Config()
cluster = kubernetes.Provider("cluster", kubeconfig=config.require("kubeconfig"))
# The team's own namespace, auto-named: its name is an Output the component must resolve.
team = kubernetes.core.v1.Namespace(
    "team",
    metadata={"labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
    opts=pulumi.ResourceOptions(provider=cluster),
)
storage = local_path_storage.LocalPathStorage(
    "storage",
    namespace=team.metadata.name,
    create_namespace=False,
    provisioner_name=config.require("provisionerName"),
    node_path_map=[
        {
            "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
            "paths": [{"path": config.require("nodePath"), "create": True}],
        }
    ],
    storage_classes=[{"name": config.require("className")}],
    opts=pulumi.ResourceOptions(providers=[cluster]),
)
pulumi.export("namespace", storage.namespace)
pulumi.export("classes", storage.storage_class_names)
"""

TYPESCRIPT_PROGRAM = """\
import * as pulumi from "@pulumi/pulumi";
import * as kubernetes from "@pulumi/kubernetes";
import * as localPathStorage from "@pulumi/local-path-storage";

const config = new pulumi.Config();
const cluster = new kubernetes.Provider("cluster", { kubeconfig: config.require("kubeconfig") });
// The team's own namespace, auto-named: its name is an Output the component must resolve.
const team = new kubernetes.core.v1.Namespace("team", {
    metadata: { labels: { "pod-security.kubernetes.io/enforce": "privileged" } },
}, { provider: cluster });
const storage = new localPathStorage.LocalPathStorage("storage", {
    namespace: team.metadata.name,
    createNamespace: false,
    provisionerName: config.require("provisionerName"),
    nodePathMap: [{
        node: "DEFAULT_PATH_FOR_NON_LISTED_NODES",
        paths: [{ path: config.require("nodePath"), create: true }],
    }],
    storageClasses: [{ name: config.require("className") }],
}, { providers: [cluster] });
export const namespace = storage.namespace;
export const classes = storage.storageClassNames;
"""

TYPESCRIPT_PACKAGE = {
    "name": "lps-consumer",
    "main": "index.ts",
    "private": True,
    "dependencies": {"@pulumi/kubernetes": "4.32.0", "@pulumi/pulumi": "3.259.0"},
    "devDependencies": {"@types/node": "20.19.43", "typescript": "5.9.3"},
}

TSCONFIG = {
    "compilerOptions": {
        "strict": True,
        "outDir": "bin",
        "target": "es2020",
        "module": "node16",
        "moduleResolution": "node16",
        "skipLibCheck": True,
    },
    "files": ["index.ts"],
}


def linked_virtualenv(path: Path) -> Path:
    """A virtualenv that also sees this run's site-packages (the pinned pulumi and
    pulumi-kubernetes, the project's dependencies), so a language host installing a
    requirements file into it finds them satisfied instead of downloading them again."""
    if not (path / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = path / "lib" / version / "site-packages"
    (site_packages / "lps-shared-site-packages.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    return path


def prepare_plugin() -> None:
    """The plugin's own virtualenv (PulumiPlugin.yaml's `.venv`), linked as above; the language
    host still runs `pip install -r requirements.txt` into it, as it does for a user."""
    linked_virtualenv(PLUGIN_DIR / ".venv")


@dataclass(frozen=True)
class ConsumerSettings:
    kubeconfig: str
    provisioner_name: str
    class_name: str
    node_path: str

    def as_config(self) -> dict[str, str]:
        return {
            "kubeconfig": self.kubeconfig,
            "provisionerName": self.provisioner_name,
            "className": self.class_name,
            "nodePath": self.node_path,
        }


def write_python_consumer(directory: Path, program: str = PYTHON_PROGRAM) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    linked_virtualenv(directory / "venv")
    (directory / "Pulumi.yaml").write_text(
        "name: lps-consumer\nruntime:\n  name: python\n  options:\n"
        "    toolchain: pip\n    virtualenv: venv\n",
        encoding="utf-8",
    )
    (directory / "requirements.txt").write_text(
        "pulumi==3.259.0\npulumi-kubernetes==4.32.0\n", encoding="utf-8"
    )
    (directory / "__main__.py").write_text(program, encoding="utf-8")
    return directory


def write_typescript_consumer(
    directory: Path, env: Mapping[str, str], program: str = TYPESCRIPT_PROGRAM
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Pulumi.yaml").write_text(
        "name: lps-consumer\nruntime:\n  name: nodejs\n  options:\n    typescript: true\n",
        encoding="utf-8",
    )
    (directory / "package.json").write_text(json.dumps(TYPESCRIPT_PACKAGE), encoding="utf-8")
    (directory / "tsconfig.json").write_text(json.dumps(TSCONFIG), encoding="utf-8")
    (directory / "index.ts").write_text(program, encoding="utf-8")
    run(["npm", "install", "--no-audit", "--no-fund"], directory, env)
    return directory


def run(
    command: list[str], directory: Path, env: Mapping[str, str], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """A command in the consumer's directory; its whole output in the failure message."""
    completed = subprocess.run(
        command,
        check=False,
        cwd=directory,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and completed.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} exited {completed.returncode} in {directory}:\n"
            f"{completed.stdout[-6000:]}\n{completed.stderr[-6000:]}"
        )
    return completed
