"""The Pulumi engine for the demo and the engine tests: found on PATH, or installed from a bundle.

Why: `pulumi preview/up/destroy` need the Pulumi CLI, its Python language host and the
Kubernetes resource provider, none of which the pip packages contain. A user's machine has
them from the official install (`pulumi` on PATH, plugins downloaded on first use). Where that
is not possible, an engine bundle (a folder with the CLI and provider archives and their
SHA256SUMS) is unpacked once into the project's cache, keyed by version, and the provider is
installed into a private PULUMI_HOME so the engine never tries to download it.

Every run gets an environment that keeps the engine offline and out of the user's own Pulumi
settings: a private PULUMI_HOME, a file backend under the cache, the passphrase secrets
provider, no update check, and no automatic plugin downloads when the bundle's provider is
installed.

    python -m scripts.pulumi_engine install   # find or install; prints what it uses
    python3 -m scripts.pulumi_engine env      # `export` lines: that pulumi on PATH, by hand
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_VARIABLE = "LPS_PULUMI_BUNDLE"
DEFAULT_BUNDLE = ROOT.parent / "shared" / "engine"
INSTALL_HINT = "https://www.pulumi.com/docs/iac/download-install/"


class EngineUnavailableError(Exception):
    """Neither a `pulumi` on PATH nor a usable engine bundle; the message names both ways."""


def cache_dir() -> Path:
    """The project's cache outside the repository (scripts/bootstrap-venv.sh uses the same)."""
    configured = os.environ.get("LPS_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "local-path-storage"


def pinned_versions() -> tuple[str, str]:
    """(pulumi CLI version, kubernetes provider version) from versions.env, each `vX.Y.Z`."""
    values: dict[str, str] = {}
    for line in (ROOT / "versions.env").read_text(encoding="utf-8").splitlines():
        key, separator, value = line.partition("=")
        if separator and not key.startswith("#"):
            values[key.strip()] = value.strip()
    return values["PULUMI_VERSION"], values["PULUMI_KUBERNETES_VERSION"]


@dataclass(frozen=True)
class PulumiEngine:
    """A usable engine: the CLI's installation root (`<root>/bin/pulumi`, what the Automation
    API's `PulumiCommand(root=...)` takes) and where it came from."""

    root: Path
    origin: str
    """`PATH` or `bundle <folder>`."""
    home: Path
    """The private PULUMI_HOME (plugins, credentials)."""
    offline_provider: bool
    """True when the Kubernetes provider is installed from the bundle, so plugin downloads
    can be turned off."""

    @property
    def cli(self) -> Path:
        return self.root / "bin" / "pulumi"

    def version(self) -> str:
        completed = subprocess.run(
            [str(self.cli), "version"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        )
        return completed.stdout.strip()

    def environment(
        self,
        state_dir: Path | None = None,
        passphrase: str | None = None,
        *,
        temp_dir: Path | None = None,
    ) -> dict[str, str]:
        """The variables every pulumi run gets (to merge over os.environ): the engine on PATH,
        its private plugin cache, no update check, no plugin downloads when the bundle's
        provider is installed; with `state_dir`, a file backend there; with `passphrase`,
        the passphrase secrets provider's key; with `temp_dir`, the engine's and its plugins'
        temporary files there (TMPDIR): the Kubernetes provider leaves a copy of its kubeconfig
        in the temporary directory at every run, which a test suite or a demo must not leave
        behind in the machine's /tmp."""
        variables = {
            "PATH": f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_HOME": str(self.home),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
        }
        if self.offline_provider:
            variables["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] = "true"
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            variables["PULUMI_BACKEND_URL"] = state_dir.resolve().as_uri()
        if passphrase is not None:
            variables["PULUMI_CONFIG_PASSPHRASE"] = passphrase
        if temp_dir is not None:
            temp_dir.mkdir(parents=True, exist_ok=True)
            variables["TMPDIR"] = str(temp_dir)
        return variables


def _say(message: str) -> None:
    print(f"pulumi-engine: {message}", file=sys.stderr, flush=True)


def _bundle_dir() -> Path:
    return Path(os.environ.get(BUNDLE_VARIABLE) or DEFAULT_BUNDLE)


def _bundle_archives(bundle: Path, cli_version: str, provider_version: str) -> tuple[Path, Path]:
    return (
        bundle / f"pulumi-{cli_version}-linux-x64.tar.xz",
        bundle / f"pulumi-resource-kubernetes-{provider_version}-linux-amd64.tar.xz",
    )


def _verify_checksums(bundle: Path, archives: tuple[Path, ...]) -> None:
    sums_file = bundle / "SHA256SUMS"
    expected: dict[str, str] = {}
    for line in sums_file.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        expected[name.strip()] = digest.strip()
    for archive in archives:
        want = expected.get(archive.name)
        if want is None:
            raise EngineUnavailableError(f"{sums_file} has no checksum for {archive.name}")
        with archive.open("rb") as stream:
            actual = hashlib.file_digest(stream, "sha256").hexdigest()
        if actual != want:
            raise EngineUnavailableError(
                f"{archive} does not match its SHA256SUMS entry: the bundle is damaged; "
                "copy it again"
            )


def _unpack(archive: Path, destination: Path) -> None:
    """Unpacks into a scratch folder beside `destination`, then renames: an interrupted run
    never leaves a half-unpacked engine that looks complete."""
    scratch = destination.with_name(destination.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(scratch, filter="data")
    shutil.rmtree(destination, ignore_errors=True)
    scratch.rename(destination)


def _install_from_bundle(bundle: Path, cli_version: str, provider_version: str) -> Path:
    """The CLI root unpacked from the bundle (once per version) and the provider binary."""
    cli_archive, provider_archive = _bundle_archives(bundle, cli_version, provider_version)
    target = cache_dir() / "pulumi" / f"engine-{cli_version}-k8s-{provider_version}"
    if not (target / ".complete").exists():
        _say(f"installing the Pulumi engine {cli_version} from {bundle} into {target}")
        _verify_checksums(bundle, (cli_archive, provider_archive))
        _unpack(cli_archive, target / "cli")
        _unpack(provider_archive, target / "provider")
        (target / ".complete").touch()
    _add_nodejs_host(bundle, cli_version, target / "cli")
    return target


def _add_nodejs_host(bundle: Path, cli_version: str, cli_root: Path) -> None:
    """The Node.js language host, unpacked into the CLI's own bin/ (the engine looks for
    language hosts beside itself; elsewhere on PATH they are "ambient" and warned about), so
    TypeScript programs (the package's consumers) run. Optional: a bundle without it still
    serves Python programs."""
    archive = bundle / f"pulumi-language-nodejs-{cli_version}-linux-x64.tar.xz"
    host = cli_root / f"pulumi-{cli_version}" / "bin" / "pulumi-language-nodejs"
    if host.exists() or not archive.is_file():
        return
    _say(f"adding the Node.js language host {cli_version} from {bundle}")
    _verify_checksums(bundle, (archive,))
    scratch = cli_root.with_name("nodejs.partial")
    _unpack(archive, scratch)
    unpacked_bin = scratch / f"pulumi-{cli_version}" / "bin"
    for binary in sorted(unpacked_bin.iterdir()):
        # The host last: its presence is what says the step is done.
        if binary.name != host.name:
            shutil.copy2(binary, host.parent / binary.name)
    shutil.copy2(unpacked_bin / host.name, host)
    shutil.rmtree(scratch)


def _install_provider_plugin(cli: Path, home: Path, provider_binary: Path, version: str) -> None:
    """`pulumi plugin install --file` into the private PULUMI_HOME: installed as a plugin (not
    on PATH) the engine uses it without the ambient-plugin warning on every run."""
    if (home / "plugins" / f"resource-kubernetes-{version}").is_dir():
        return
    _say(f"installing the Kubernetes provider {version} into {home}")
    install = ["plugin", "install", "resource", "kubernetes", version]
    subprocess.run(
        [str(cli), *install, "--file", str(provider_binary)],
        check=True,
        capture_output=True,
        env={**os.environ, "PULUMI_HOME": str(home), "PULUMI_SKIP_UPDATE_CHECK": "true"},
    )


def find_engine() -> PulumiEngine:
    """`pulumi` on PATH first (a user's normal install), else the bundle; raises
    EngineUnavailableError naming both ways when neither is there."""
    cli_version, provider_version = pinned_versions()
    home = cache_dir() / "pulumi" / "home"
    home.mkdir(parents=True, exist_ok=True)
    bundle = _bundle_dir()
    cli_archive, provider_archive = _bundle_archives(bundle, cli_version, provider_version)
    has_bundle = cli_archive.is_file() and provider_archive.is_file()
    unpacked = _install_from_bundle(bundle, cli_version, provider_version) if has_bundle else None

    on_path = shutil.which("pulumi")
    if on_path is not None:
        root = Path(on_path).resolve().parent.parent
        origin = "PATH"
    elif unpacked is not None:
        root = unpacked / "cli" / f"pulumi-{cli_version}"
        origin = f"bundle {bundle}"
    else:
        raise EngineUnavailableError(
            f"the Pulumi engine is missing: no `pulumi` on PATH and no engine bundle in {bundle} "
            f"({cli_archive.name}, {provider_archive.name}, SHA256SUMS). Either install the "
            f"Pulumi CLI ({INSTALL_HINT}) or set {BUNDLE_VARIABLE} to a folder holding the bundle"
        )
    offline_provider = False
    if unpacked is not None:
        provider = (
            unpacked / "provider" / f"pulumi-resource-kubernetes-{provider_version}"
        ) / "pulumi-resource-kubernetes"
        _install_provider_plugin(root / "bin" / "pulumi", home, provider, provider_version)
        offline_provider = True
    return PulumiEngine(root, origin, home, offline_provider)


def ensure_node() -> None:
    """Node.js and npm, for TypeScript programs (the package's consumer tests): Debian's
    `nodejs` and `npm` installed with apt-get when missing and this runs as root, else one
    line saying what to install."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise EngineUnavailableError(
            f"{' and '.join(missing)} not found: install Node.js 20 or newer with npm "
            "(Debian: apt-get install nodejs npm) for the TypeScript programs"
        )
    _say("installing Node.js and npm (apt-get install nodejs npm)")
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "nodejs", "npm"],
    ):
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def copy_entry_point(source: Path, destination: Path) -> None:
    """Copies a Pulumi entry point (the program's or the policy pack's) so that it imports this
    checkout's packages first: the shared virtualenv's editable install points at whichever
    checkout bootstrapped it last, and a copy made by one clone must never run another's code."""
    destination.write_text(
        f"import sys\n\nsys.path.insert(0, {str(ROOT)!r})  # the checkout that made this copy\n\n"
        + source.read_text(encoding="utf-8"),
        encoding="utf-8",
    )


def project_copy(destination: Path, stack: str, config: dict[str, Any]) -> Path:
    """A copy of this project (Pulumi.yaml, __main__.py, one stack file) in `destination`,
    whose Python language host runs the virtualenv running this code (it has the project
    installed, so the program is this checkout's). Stacks made by the demo and the tests live
    there: creating a stack with the passphrase provider writes an `encryptionsalt` into its
    stack file, and the repository's own stacks must stay as they are."""
    import yaml  # noqa: PLC0415 - here, so `env` runs on any Python 3.11 without the virtualenv

    destination.mkdir(parents=True, exist_ok=True)
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    project["runtime"]["options"]["virtualenv"] = sys.prefix
    (destination / "Pulumi.yaml").write_text(yaml.safe_dump(project), encoding="utf-8")
    copy_entry_point(ROOT / "__main__.py", destination / "__main__.py")
    stack_dir = destination / project.get("stackConfigDir", ".")
    stack_dir.mkdir(parents=True, exist_ok=True)
    namespaced = {
        (key if ":" in key else f"{project['name']}:{key}"): value for key, value in config.items()
    }
    (stack_dir / f"Pulumi.{stack}.yaml").write_text(
        yaml.safe_dump({"config": namespaced}), encoding="utf-8"
    )
    return destination


def main(arguments: list[str]) -> int:
    command = arguments[0] if arguments else "install"
    if command not in ("install", "env"):
        print("usage: python -m scripts.pulumi_engine [install|env]", file=sys.stderr)
        return 2
    try:
        engine = find_engine()
    except EngineUnavailableError as error:
        print(f"pulumi-engine: {error}", file=sys.stderr)
        return 1
    if command == "install":
        _say(f"using pulumi {engine.version()} from {engine.origin} ({engine.cli})")
        try:
            ensure_node()
        except EngineUnavailableError as error:
            print(f"pulumi-engine: {error}", file=sys.stderr)
            return 1
        return 0
    # No backend and no passphrase: those are the user's choice (see docs/install.md).
    for key, value in engine.environment().items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
