"""The informer against a scripted API (list pages and watch sessions); the real-server tests
are in test_informer_cluster.py."""

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from provisioner.kube.api_error import ApiError
from provisioner.kube.informer import Informer, name_key, namespaced_name_key, uid_key
from provisioner.kube.object_decoding import DictObjects
from tests.provisioner.kube.fakes import FakeClock, FakeResponse, HandlerRecorder, watch_chunks


@dataclass(frozen=True)
class Record:
    name: str
    size: str


Obj = dict[str, Any]


def obj(name: str, size: str = "1Gi", rv: str = "1") -> Obj:
    return {
        "metadata": {"name": name, "resourceVersion": rv, "managedFields": [{"m": 1}]},
        "spec": {"size": size},
    }


def to_record(o: Obj) -> Record | None:
    assert "managedFields" not in o["metadata"]
    if o["spec"]["size"] == "ignored":
        return None
    return Record(o["metadata"]["name"], o["spec"]["size"])


class ScriptedApi:
    """A list function: list calls are served from `lists` (each a list of pages); watch calls
    take the next item of `watches` (a FakeResponse or an exception); when the script runs out,
    watches stay open and quiet until their timeout, as the server's do."""

    def __init__(
        self, lists: list[list[Obj]], watches: list[FakeResponse | Exception] | None = None
    ) -> None:
        self.lists = list(lists)
        self.watches = list(watches or [])
        self.calls: list[dict[str, Any]] = []
        self.watch_started = threading.Condition()
        self.watch_count = 0

    def __call__(self, **kwargs: Any) -> FakeResponse:
        self.calls.append(kwargs)
        assert kwargs["_preload_content"] is False
        if kwargs.get("watch"):
            with self.watch_started:
                self.watch_count += 1
                self.watch_started.notify_all()
            quiet = FakeResponse(stay_open=True, open_for=kwargs["timeout_seconds"])
            step = self.watches.pop(0) if self.watches else quiet
            if isinstance(step, Exception):
                raise step
            return step
        pages = self.lists[0]
        index = int(kwargs.get("_continue") or 0)
        if index + 1 >= len(pages) and len(self.lists) > 1:
            self.lists.pop(0)
        return FakeResponse(pages[index])

    def wait_for_watches(self, count: int, timeout: float = 5.0) -> bool:
        with self.watch_started:
            return self.watch_started.wait_for(lambda: self.watch_count >= count, timeout)


def page(items: list[Obj], rv: str = "10", next_page: int | None = None) -> Obj:
    metadata = {"resourceVersion": rv}
    if next_page is not None:
        metadata["continue"] = str(next_page)
    return {"items": items, "metadata": metadata}


Recorder = HandlerRecorder[Record]
StartInformer = Callable[..., tuple[Informer[Record], Recorder]]


@pytest.fixture
def running() -> Iterator[StartInformer]:
    informers: list[Informer[Record]] = []

    def start(api: ScriptedApi, **kwargs: Any) -> tuple[Informer[Record], Recorder]:
        kwargs.setdefault("key", name_key)
        kwargs.setdefault("backoff", (0.01, 0.05))
        kwargs.setdefault("objects", DictObjects())
        informer = Informer("test", api, to_record=to_record, **kwargs)
        recorder = Recorder()
        recorder.attach(informer)
        informer.start()
        informers.append(informer)
        return informer, recorder

    yield start
    for informer in informers:
        informer.stop()


def test_initial_paginated_list_fills_the_cache_and_delivers_adds(running: StartInformer) -> None:
    api = ScriptedApi(
        [
            [
                page([obj("a"), obj("b")], next_page=1),
                page([obj("c"), obj("skip", size="ignored")], rv="42"),
            ]
        ]
    )
    informer, recorder = running(api, page_size=2)
    assert informer.wait_for_sync(5)
    assert informer.has_synced
    assert sorted(informer.keys()) == ["a", "b", "c"]
    assert informer.get("a") == Record("a", "1Gi")
    assert len(informer) == 3
    assert informer.resource_version == "42"
    assert [e[0] for e in recorder.events] == ["add"] * 3
    list_calls = [c for c in api.calls if not c.get("watch")]
    assert [c["_continue"] for c in list_calls] == [None, "1"]
    assert all(c["limit"] == 2 for c in list_calls)
    assert api.wait_for_watches(1)
    watch_call = next(c for c in api.calls if c.get("watch"))
    assert watch_call["resource_version"] == "42"
    assert watch_call["allow_watch_bookmarks"] is True


def test_watch_events_update_the_cache(running: StartInformer) -> None:
    stream = FakeResponse(
        chunks=watch_chunks(
            {"type": "ADDED", "object": obj("b", rv="11")},
            {"type": "MODIFIED", "object": obj("a", rv="12")},  # same record: no update
            {"type": "MODIFIED", "object": obj("a", size="2Gi", rv="13")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
            {"type": "DELETED", "object": obj("b", rv="21")},
            {"type": "MODIFIED", "object": obj("a", size="ignored", rv="22")},
            split=True,
        ),
        stay_open=True,
    )
    api = ScriptedApi([[page([obj("a")])]], [stream])
    informer, recorder = running(api)
    recorder.wait_for(5)
    kinds = [(kind, key) for kind, key, _, _ in recorder.events]
    assert kinds == [("add", "a"), ("add", "b"), ("update", "a"), ("delete", "b"), ("delete", "a")]
    _, _, old, new = recorder.events[2]
    assert (old, new) == (Record("a", "1Gi"), Record("a", "2Gi"))
    assert recorder.events[3][3] is None
    assert len(informer) == 0
    assert informer.resource_version == "22"


def test_gone_error_event_relists_and_delivers_the_difference(running: StartInformer) -> None:
    gone = FakeResponse(chunks=watch_chunks({"type": "ERROR", "object": {"code": 410}}))
    api = ScriptedApi(
        [[page([obj("a"), obj("b")], rv="10")], [page([obj("a", size="5Gi"), obj("c")], rv="99")]],
        [gone],
    )
    informer, recorder = running(api)
    recorder.wait_for(5)
    assert sorted((kind, key) for kind, key, _, _ in recorder.events[2:]) == [
        ("add", "c"),
        ("delete", "b"),
        ("update", "a"),
    ]
    assert informer.resource_version == "99"
    assert api.wait_for_watches(2)
    assert api.calls[-1]["resource_version"] == "99"


def test_http_gone_on_watch_start_relists(running: StartInformer) -> None:
    api = ScriptedApi(
        [[page([obj("a")], rv="10")], [page([obj("a")], rv="50")]],
        [ApiError(status=410, reason="Gone")],
    )
    informer, _ = running(api)
    assert api.wait_for_watches(2)
    assert len([c for c in api.calls if not c.get("watch")]) == 2
    assert informer.resource_version == "50"


def test_the_first_list_comes_from_the_watch_cache_and_a_relist_does_not(
    running: StartInformer,
) -> None:
    """client-go's reflector starts from the apiserver's watch cache (resourceVersion "0"); a
    relist after 410 Gone must not, as the cache may be older than what was already seen."""
    api = ScriptedApi(
        [[page([obj("a")], next_page=1), page([obj("b")], rv="10")], [page([obj("a")], rv="50")]],
        [ApiError(status=410, reason="Gone")],
    )
    informer, _ = running(api, page_size=1)
    assert api.wait_for_watches(2)
    first, continued, relist = [c for c in api.calls if not c.get("watch")]
    assert (first["resource_version"], first["resource_version_match"]) == ("0", "NotOlderThan")
    # The API refuses a resourceVersion beside a continue token.
    assert continued["_continue"] == "1"
    assert "resource_version" not in continued
    assert "resource_version" not in relist
    assert "resource_version_match" not in relist
    assert informer.resource_version == "50"


def test_other_errors_rewatch_from_the_last_resource_version(running: StartInformer) -> None:
    api = ScriptedApi(
        [[page([obj("a")], rv="10")]],
        [
            ApiError(status=500, reason="boom"),
            FakeResponse(chunks=[b"{not json\n"]),
            FakeResponse(chunks=watch_chunks({"type": "ERROR", "object": {"code": 500}})),
            FakeResponse(chunks=watch_chunks({"type": "ADDED", "object": obj("b", rv="11")})),
        ],
    )
    informer, _recorder = running(api)
    assert api.wait_for_watches(5)
    watch_versions = [c["resource_version"] for c in api.calls if c.get("watch")]
    assert watch_versions[:5] == ["10", "10", "10", "10", "11"]
    assert len([c for c in api.calls if not c.get("watch")]) == 1
    assert informer.get("b") == Record("b", "1Gi")


def test_a_failing_list_is_retried(running: StartInformer) -> None:
    class FlakyList(ScriptedApi):
        failures = 2

        def __call__(self, **kwargs: Any) -> FakeResponse:
            if not kwargs.get("watch") and self.failures:
                self.failures -= 1
                raise ApiError(status=503, reason="unavailable")
            return super().__call__(**kwargs)

    informer, _ = running(FlakyList([[page([obj("a")])]]))
    assert informer.wait_for_sync(5)


def test_selectors_are_passed_to_list_and_watch(running: StartInformer) -> None:
    api = ScriptedApi([[page([])]])
    running(api, label_selector="app=x", field_selector="metadata.name=y")
    assert api.wait_for_watches(1)
    for call in api.calls:
        assert call["label_selector"] == "app=x"
        assert call["field_selector"] == "metadata.name=y"


def test_resync_redelivers_every_record_as_an_update(running: StartInformer) -> None:
    api = ScriptedApi([[page([obj("a"), obj("b")])]])
    _informer, recorder = running(api, resync_period=0.2)
    recorder.wait_for(4, timeout=5)
    updates = [(key, old, new) for kind, key, old, new in recorder.events if kind == "update"]
    assert {key for key, _, _ in updates} == {"a", "b"}
    assert all(old == new for _, old, new in updates)
    assert all(c["timeout_seconds"] <= 2 for c in api.calls if c.get("watch"))


def test_a_failing_handler_does_not_stop_the_informer(running: StartInformer) -> None:
    api = ScriptedApi(
        [[page([obj("a")])]],
        [FakeResponse(chunks=watch_chunks({"type": "ADDED", "object": obj("b")}), stay_open=True)],
    )
    informer = Informer("test", api, objects=DictObjects(), to_record=to_record, key=name_key)

    def explode(key: str, old: Record | None, new: Record | None) -> None:
        raise RuntimeError("handler bug")

    informer.add_event_handler(on_add=explode)
    informer.start()
    try:
        deadline = time.monotonic() + 5
        while informer.get("b") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert informer.get("b") is not None
    finally:
        informer.stop()


def test_stop_interrupts_a_quiet_watch_promptly(running: StartInformer) -> None:
    api = ScriptedApi([[page([])]])
    informer, _ = running(api)
    assert api.wait_for_watches(1)
    started = time.monotonic()
    informer.stop(timeout=5)
    assert time.monotonic() - started < 2
    assert not any(t.name == "informer-test" for t in threading.enumerate())


def test_handlers_must_be_added_before_start(running: StartInformer) -> None:
    informer, _ = running(ScriptedApi([[page([])]]))
    with pytest.raises(RuntimeError):
        informer.add_event_handler(on_add=lambda *_: None)


def test_key_functions() -> None:
    namespaced = {"metadata": {"name": "n", "namespace": "ns", "uid": "u"}}
    cluster = {"metadata": {"name": "n"}}
    assert namespaced_name_key(namespaced) == "ns/n"
    assert namespaced_name_key(cluster) == "n"
    assert name_key(namespaced) == "n"
    assert uid_key(namespaced) == "u"


def test_watches_that_end_at_once_are_backed_off(running: StartInformer) -> None:
    api = ScriptedApi([[page([])]], [FakeResponse(chunks=[]) for _ in range(20)])
    running(api, backoff=(0.2, 0.2))
    time.sleep(0.5)
    assert 2 <= api.watch_count <= 4


def test_an_informer_without_progress_beyond_its_bound_is_wedged() -> None:
    clock = FakeClock()
    informer: Informer[dict[str, Any]] = Informer(
        "stuck",
        lambda **kwargs: None,
        objects=DictObjects(),
        to_record=lambda obj: obj,
        key=name_key,
        clock=clock,
    )
    assert informer.liveness() is None  # not started
    informer._thread = threading.current_thread()  # alive, as a running informer's thread
    clock.advance(informer.progress_bound - 1)
    assert informer.liveness() is None
    clock.advance(2)
    assert informer.liveness() == (
        f"informer stuck: no progress for {informer.progress_bound + 1:.0f}s"
    )
