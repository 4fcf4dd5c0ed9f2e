import json
from typing import Any

from provisioner.kube import watch_stream
from tests.provisioner.kube.fakes import FakeResponse, watch_chunks


def event(kind: str, name: str, rv: str = "1") -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": name, "resourceVersion": rv}}}


def test_events_are_parsed_one_per_line() -> None:
    events = [event("ADDED", "a"), event("MODIFIED", "a", "2"), event("DELETED", "a", "3")]
    assert (
        list(watch_stream.iter_watch_events(FakeResponse(chunks=watch_chunks(*events)))) == events
    )


def test_lines_split_across_chunks_are_reassembled() -> None:
    events = [event("ADDED", "a"), event("ADDED", "b")]
    chunks = watch_chunks(*events, split=True)
    assert list(watch_stream.iter_watch_events(FakeResponse(chunks=chunks))) == events


def test_several_lines_in_one_chunk_and_a_last_line_without_newline() -> None:
    events = [event("ADDED", "a"), event("ADDED", "b"), event("ADDED", "c")]
    data = b"".join(watch_chunks(*events)).rstrip(b"\n")
    chunks = [data[:10], data[10:]]
    assert list(watch_stream.iter_watch_events(FakeResponse(chunks=chunks))) == events


def test_blank_lines_are_skipped() -> None:
    chunks = [b"\n", json.dumps(event("ADDED", "a")).encode() + b"\n\n"]
    assert len(list(watch_stream.iter_watch_events(FakeResponse(chunks=chunks)))) == 1


def test_watch_error_code_and_resource_version() -> None:
    assert watch_stream.watch_error_code({"type": "ERROR", "object": {"code": 410}}) == 410
    assert watch_stream.watch_error_code({"type": "ERROR", "object": "junk"}) is None
    assert watch_stream.resource_version_of({"metadata": {"resourceVersion": "7"}}) == "7"
    assert watch_stream.resource_version_of({}) == ""
