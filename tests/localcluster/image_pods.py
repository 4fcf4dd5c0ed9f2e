"""Manifests and waits for the tests of image-table pods (run for real, like a kubelet)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster import ImageRuntime, LocalCluster, wait_for
from localcluster.image_table import python_environment

# A Python image with a shell and coreutils: the harness's own interpreter and the host's
# system directories, an extra image-table entry of the test clusters.
HOST_PYTHON_REPOSITORY = "localcluster.invalid/host-python"
IMAGE = f"{HOST_PYTHON_REPOSITORY}:test"


def host_images() -> dict[str, ImageRuntime]:
    return {HOST_PYTHON_REPOSITORY: python_environment()}


# A small server: /readyz and /healthz answer 200 while the mounted ConfigMap's `ready` and
# `alive` keys say "yes"; every state of the ConfigMap's directory it sees (..data target,
# entries, `message`) and SIGTERM are printed; `on-sigterm: exit` makes SIGTERM end it.
APP = r"""
import http.server, json, os, signal, sys, threading, time
CONFIG = "/etc/app"
def read(key, default=""):
    try:
        with open(os.path.join(CONFIG, key)) as file:
            return file.read().strip()
    except OSError:
        return default
def on_term(signum, frame):
    print("got SIGTERM", flush=True)
    if read("on-sigterm") == "exit":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
def watch_config():
    last = None
    while True:
        try:
            target = os.readlink(os.path.join(CONFIG, "..data"))
        except OSError:
            target = None
        entries = sorted(os.listdir(CONFIG))
        if (target, entries) != last:
            seen = {"data": target, "entries": entries, "message": read("message")}
            print("config " + json.dumps(seen), flush=True)
            last = (target, entries)
        time.sleep(0.05)
threading.Thread(target=watch_config, daemon=True).start()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        key = {"/readyz": "ready", "/healthz": "alive"}.get(self.path)
        ok = key is None or read(key, "yes") == "yes"
        self.send_response(200 if ok else 500)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT", "8080"))), Handler)
try:
    open("/written-by-the-container", "w").close()
    root_writable = True
except OSError:
    root_writable = False
facts = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "argv": sys.argv[1:]}
facts.update(env=dict(os.environ), root_writable=root_writable)
print("listening " + json.dumps(facts), flush=True)
server.serve_forever()
"""


def app_container(**extra: Any) -> dict[str, Any]:
    """The APP server as a container of the image-table image, its ConfigMap at /etc/app."""
    container: dict[str, Any] = {
        "name": "app",
        "image": IMAGE,
        "command": ["python", "-c", APP],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
        "volumeMounts": [{"name": "app", "mountPath": "/etc/app", "readOnly": True}],
    }
    container.update(extra)
    return container


def app_pod_spec(config_map: str, **container: Any) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": 5,
        "containers": [app_container(**container)],
        "volumes": [{"name": "app", "configMap": {"name": config_map}}],
    }


def pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def config_map(name: str, data: dict[str, str]) -> Any:
    return {"metadata": {"name": name}, "data": data}


def deployment(name: str, replicas: int, spec: dict[str, Any]) -> Any:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def is_ready(found: dict[str, Any]) -> bool:
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def container_status(found: dict[str, Any]) -> dict[str, Any]:
    statuses = (found.get("status") or {}).get("containerStatuses") or [{}]
    status: dict[str, Any] = statuses[0]
    return status


def log_of(cluster: LocalCluster, found: dict[str, Any]) -> Path:
    metadata = found["metadata"]
    return cluster.pod_log_path(metadata["namespace"], metadata["name"], metadata["uid"])


def wait_for_log_line(
    cluster: LocalCluster,
    found: dict[str, Any],
    prefix: str,
    accept: Callable[[Any], bool] = lambda _: True,
    timeout: float = 60.0,
) -> Any:
    """The JSON after `prefix` on the first line of the pod's log that `accept`s it."""
    path = log_of(cluster, found)

    def probe() -> Any:
        if not path.exists():
            return None
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                rest = line[len(prefix) :].strip()
                value = json.loads(rest) if rest.startswith(("{", "[")) else rest
                if accept(value):
                    return value
        return None

    return wait_for(probe, timeout, f"a log line {prefix!r} in {path.name}")


def wait_gone(cluster: LocalCluster, namespace: str, name: str, timeout: float) -> float:
    """Waits until the pod no longer exists; returns when (time.monotonic()) it was seen gone."""
    wait_for(
        lambda: True if cluster.read_pod(namespace, name) is None else None,
        timeout,
        f"pod {namespace}/{name} to be gone",
        interval=0.05,
    )
    return time.monotonic()
