"""The informer against the real apiserver: paginated sync, watch events, selectors, and
re-listing after 410 Gone."""

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from localcluster import LocalCluster
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients
from provisioner.kube.informer import Informer, namespaced_name_key
from provisioner.kube.object_decoding import DictObjects
from tests.provisioner.kube.fakes import HandlerRecorder, wait_until

pytestmark = pytest.mark.cluster


@dataclass(frozen=True)
class Setting:
    """A compact record: just the value of one key of a ConfigMap."""

    name: str
    value: str


def to_setting(obj: dict[str, Any]) -> Setting | None:
    assert "managedFields" not in obj["metadata"]
    data = obj.get("data") or {}
    if "value" not in data:
        return None
    return Setting(obj["metadata"]["name"], data["value"])


def create_config_map(
    clients: KubeClients, namespace: str, name: str, value: str | None, **labels: str
) -> None:
    body: dict[str, Any] = {"metadata": {"name": name, "labels": labels}}
    if value is not None:
        body["data"] = {"value": value}
    clients.request_json("POST", f"/api/v1/namespaces/{namespace}/configmaps", body=body)


def config_map_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps/{name}"


StartInformer = Callable[..., tuple[Informer[Setting], HandlerRecorder[Setting]]]


@pytest.fixture
def start(clients: KubeClients, namespace: str) -> Iterator[StartInformer]:
    started: list[Informer[Setting]] = []

    def make(
        list_function: Callable[..., Any] | None = None, **kwargs: Any
    ) -> tuple[Informer[Setting], HandlerRecorder[Setting]]:
        function = list_function or functools.partial(
            clients.core.list_namespaced_config_map, namespace
        )
        informer = Informer(
            "config-maps",
            function,
            objects=DictObjects(),
            to_record=to_setting,
            key=namespaced_name_key,
            **kwargs,
        )
        recorder = HandlerRecorder[Setting]()
        recorder.attach(informer)
        informer.start()
        started.append(informer)
        return informer, recorder

    yield make
    for informer in started:
        informer.stop()


def test_initial_sync_pages_through_everything(
    clients: KubeClients, namespace: str, start: StartInformer
) -> None:
    for index in range(7):
        create_config_map(clients, namespace, f"cm-{index}", str(index))
    create_config_map(clients, namespace, "no-value", None)
    informer, recorder = start(page_size=3)
    assert informer.wait_for_sync(10)
    assert sorted(informer.keys()) == sorted(f"{namespace}/cm-{i}" for i in range(7))
    assert informer.get(f"{namespace}/cm-3") == Setting("cm-3", "3")
    assert [event[0] for event in recorder.events] == ["add"] * 7
    assert informer.resource_version


def test_changes_arrive_through_the_watch(
    clients: KubeClients, namespace: str, start: StartInformer
) -> None:
    informer, recorder = start()
    assert informer.wait_for_sync(10)
    key = f"{namespace}/live"
    create_config_map(clients, namespace, "live", "1")
    assert recorder.wait_for_event("add", key) == Setting("live", "1")
    clients.request_json(
        "PATCH",
        config_map_path(namespace, "live"),
        body={"data": {"value": "2"}},
        content_type="application/merge-patch+json",
    )
    assert recorder.wait_for_event("update", key) == Setting("live", "2")
    assert informer.get(key) == Setting("live", "2")
    clients.request_json("DELETE", config_map_path(namespace, "live"))
    assert recorder.wait_for_event("delete", key) == Setting("live", "2")
    assert informer.get(key) is None


def test_a_label_selector_limits_the_cache(
    clients: KubeClients, namespace: str, start: StartInformer
) -> None:
    create_config_map(clients, namespace, "mine", "1", role="helper")
    create_config_map(clients, namespace, "other", "1")
    informer, recorder = start(label_selector="role=helper")
    assert informer.wait_for_sync(10)
    assert informer.keys() == [f"{namespace}/mine"]
    create_config_map(clients, namespace, "mine-too", "2", role="helper")
    create_config_map(clients, namespace, "not-mine", "2")
    recorder.wait_for_event("add", f"{namespace}/mine-too")
    assert sorted(informer.keys()) == [f"{namespace}/mine", f"{namespace}/mine-too"]


def test_an_apiserver_restart_and_an_expired_resource_version(
    cluster: LocalCluster, clients: KubeClients, namespace: str, start: StartInformer
) -> None:
    """A running informer rides out an apiserver restart (its watch breaks, it re-watches).
    After the restart the watch cache starts at the current resourceVersion, so a watch from
    resourceVersion 1 is answered with 410 Gone: an informer whose first watch asks for it
    must list again, then keep watching."""
    create_config_map(clients, namespace, "before", "1")
    survivor, survivor_events = start()
    assert survivor.wait_for_sync(10)
    cluster.restart_apiserver()
    create_config_map(clients, namespace, "after-restart", "2")
    assert survivor_events.wait_for_event("add", f"{namespace}/after-restart", timeout=30)

    real = functools.partial(clients.core.list_namespaced_config_map, namespace)
    calls: list[dict[str, Any]] = []
    lock = threading.Lock()

    def stale_first_watch(**kwargs: Any) -> Any:
        with lock:
            calls.append(kwargs)
            first_watch = kwargs.get("watch") and sum(1 for c in calls if c.get("watch")) == 1
        if first_watch:
            kwargs["resource_version"] = "1"
        return real(**kwargs)

    informer, recorder = start(stale_first_watch)
    assert informer.wait_for_sync(10)
    assert wait_until(lambda: sum(1 for c in calls if not c.get("watch")) >= 2, timeout=10)
    create_config_map(clients, namespace, "after-relist", "3")
    assert recorder.wait_for_event("add", f"{namespace}/after-relist") == Setting(
        "after-relist", "3"
    )
    # The re-list found nothing new for "before": no duplicate add was delivered.
    assert [event[1] for event in recorder.events].count(f"{namespace}/before") == 1


def test_the_raw_list_function_lists_watches_and_raises_refusals(
    clients: KubeClients, namespace: str, start: StartInformer
) -> None:
    """What the provisioner's informers use instead of the generated client's list methods."""
    create_config_map(clients, namespace, "first", "1", team="a")
    create_config_map(clients, namespace, "other", "2", team="b")
    function = clients.list_function(f"/api/v1/namespaces/{namespace}/configmaps")
    informer, recorder = start(function, label_selector="team=a", page_size=1)
    assert informer.wait_for_sync(10)
    assert informer.keys() == [f"{namespace}/first"]
    create_config_map(clients, namespace, "second", "3", team="a")
    assert recorder.wait_for_event("add", f"{namespace}/second") == Setting("second", "3")
    with pytest.raises(ApiError) as refused:
        function(resource_version_match="NotOlderThan")  # needs a resourceVersion
    assert refused.value.status == 422
