"""The local registry the real nodes pull every image from, and the pushes into it.

Why: users ship the provisioner through a registry, by tag or by digest; real nodes must pull
it the same way, and nothing may come from outside this machine. Debian's `docker-registry`
listens on 127.0.0.1:<free port> (containerd runs in the host's network namespace, so the
nodes reach it there), its storage in the cluster directory. The provisioner's archive is
pushed with `skopeo copy` exactly as docs/install.md tells users; the pause and busybox images
(scripts/build-node-images.sh) under the names pods and containerd use, which containerd's
mirrors (real_node_config.registry_hosts_files) send here.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from pathlib import Path

import yaml

from localcluster.errors import ClusterError, ComponentFailedError
from localcluster.ports import pick_free_ports
from localcluster.processes import ManagedProcess

READY_TIMEOUT_SECONDS = 30.0
PORT_ATTEMPTS = 3


class LocalRegistry:
    """One docker-registry process serving plain HTTP on 127.0.0.1:`port`."""

    def __init__(
        self, registry: Path, skopeo: Path, directory: Path, port: int, log_dir: Path
    ) -> None:
        self.skopeo = skopeo
        self.directory = directory
        self.port = port
        self.log_dir = log_dir
        self.config = directory / "config.yml"
        self.process = ManagedProcess(
            "docker-registry",
            [str(registry), "serve", str(self.config)],
            log_dir / "docker-registry.log",
        )

    @property
    def address(self) -> str:
        """host:port, as an image reference names the registry."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Starts it on `port`, or on another free one if that was taken meanwhile: the port
        was free when the cluster picked its ports, and another process on the machine may
        have bound it since (the registry then exits at once, "address already in use")."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if attempt > 1:
                (self.port,) = pick_free_ports(1)
            document = {
                "version": 0.1,
                "log": {"level": "warn", "accesslog": {"disabled": True}},
                "storage": {"filesystem": {"rootdirectory": str(self.directory / "storage")}},
                "http": {"addr": self.address},
            }
            self.config.write_text(yaml.safe_dump(document), encoding="utf-8")
            log_end = self.process.log_path.stat().st_size if self.process.log_path.exists() else 0
            self.process.start()
            deadline = time.monotonic() + READY_TIMEOUT_SECONDS
            while not self._answers():
                if not self.process.is_running() or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            else:
                return
            if self.process.is_running() or not self._port_was_taken(log_end):
                break
            self.process.stop()
        raise ComponentFailedError(
            "docker-registry", "did not answer on /v2/", self.process.log_path
        )

    def _port_was_taken(self, log_start: int) -> bool:
        """Whether the registry's last start ended because its port was in use."""
        with self.process.log_path.open("rb") as log:
            log.seek(log_start)
            return b"address already in use" in log.read()

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as response:
                return bool(response.status == HTTPStatus.OK)
        except (urllib.error.URLError, OSError):
            return False

    def push(self, source: str, repository_and_tag: str) -> None:
        """`skopeo copy SOURCE docker://<registry>/<repository:tag>` (plain HTTP, hence
        --dest-tls-verify=false, the one flag a user's TLS registry does not need)."""
        destination = f"docker://{self.address}/{repository_and_tag}"
        log = self.log_dir / "skopeo.log"
        with log.open("ab") as output:
            command = [str(self.skopeo), "copy", "--quiet", "--dest-tls-verify=false"]
            result = subprocess.run(
                [*command, source, destination],
                stdout=output,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if result.returncode != 0:
            raise ClusterError(
                f"localcluster: skopeo copy {source} {destination} failed; see {log}"
            )

    def stop(self) -> None:
        self.process.stop()
