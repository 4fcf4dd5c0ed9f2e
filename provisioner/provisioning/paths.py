"""pathPattern rendering, the path safety check, the choice of base path, and the room each
base path has left (its budget, counted over the book of taken paths).

rancher renders `pathPattern` with Go's text/template over the PV name and the claim's
metadata. We accept the same syntax for the fields it documents (and the trim markers and
comments Go allows) and nothing else: a pattern that would do more in Go is refused with a
message instead of being half-understood.

Safety (the advisories against rancher): rancher checks the rendered text's prefix before
cleaning it, so `ns/name/../../other/victim` passes. We join the rendering to the base path,
normalise, and check the result component by component: it must lie strictly inside the base
path and, unless the class allows unsafe patterns, inside `<namespace>/<name>` there. The same
"strictly inside a configured base path" rule guards deletion, so a forged PV cannot point the
teardown at an arbitrary host directory.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal

from provisioner.configuration.config_error import ConfigError
from provisioner.objects.quantities import format_bytes
from provisioner.objects.snapshot_handoff import SNAPSHOT_AREA
from provisioner.provisioning.fresh_directory import OWNERS_DIR

SUPPORTED_SYNTAX = (
    "{{.PVName}}, {{.PVC.Namespace}}, {{.PVC.Name}}, {{.PVC.Labels.<key>}}, "
    '{{.PVC.Annotations.<key>}}, {{index .PVC.Labels "<key>"}}, {{index .PVC.Annotations "<key>"}}'
)
_STRINGS = {".PVName": "pv_name", ".PVC.Namespace": "namespace", ".PVC.Name": "name"}
_MAPS = {".PVC.Labels": "labels", ".PVC.Annotations": "annotations"}
_TOKEN = re.compile(
    r'\s*(?:(\.[A-Za-z0-9_.]*)|("(?:[^"\\\n]|\\.)*")|(`[^`]*`)|([A-Za-z_]\w*)|(\S))'
)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_GO_SPACE = " \t\r\n"


class PathPatternError(ValueError):
    """A pattern that does not parse or render, or a rendered path that is not safe."""


class PathTooLong(PathPatternError):  # noqa: N818 (reads as a sentence at the raise site)
    """A rendered path, or one of its components, longer than a node can hold."""


@dataclass(frozen=True, slots=True)
class PatternFields:
    """What a pattern can see: rancher's `.PVName` and `.PVC` (the claim's metadata)."""

    pv_name: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


# A compiled pattern: literal text, or (kind, field, key) for a lookup in PatternFields.
_Part = str | tuple[str, str, str]


def default_folder_name(pv_name: str, namespace: str, claim_name: str) -> str:
    return f"{pv_name}_{namespace}_{claim_name}"


def render_pattern(pattern: str, fields: PatternFields) -> str:
    """Renders a Go-template pattern; missing labels or annotations render as ""."""
    out: list[str] = []
    for part in _compile(pattern):
        if isinstance(part, str):
            out.append(part)
        elif part[0] == "string":
            out.append(getattr(fields, part[1]))
        else:
            out.append(getattr(fields, part[1]).get(part[2], ""))
    return "".join(out)


def check_pattern(pattern: str) -> None:
    """Raises PathPatternError if the pattern does not parse."""
    _compile(pattern)


@lru_cache(maxsize=256)
def _compile(pattern: str) -> tuple[_Part, ...]:
    parts: list[_Part] = []
    rest = pattern
    while (start := rest.find("{{")) >= 0:
        text, rest = rest[:start], rest[start + 2 :]
        if rest[:1] == "-" and rest[1:2] and rest[1:2] in _GO_SPACE:
            text, rest = text.rstrip(_GO_SPACE), rest[1:]
        end = rest.find("}}")
        if end < 0:
            raise PathPatternError(f"unclosed action {{{{{rest}: add the closing }}}}")
        action, rest = rest[:end], rest[end + 2 :]
        if action[-1:] == "-" and action[-2:-1] and action[-2:-1] in _GO_SPACE:
            action, rest = action[:-1], rest.lstrip(_GO_SPACE)
        if text:
            parts.append(text)
        part = _compile_action(action.strip(_GO_SPACE), "{{" + action + "}}")
        if part is not None:
            parts.append(part)
    if rest:
        parts.append(rest)
    return tuple(parts)


def _compile_action(action: str, shown: str) -> _Part | None:
    if action.startswith("/*") and action.endswith("*/"):
        return None
    tokens = _tokens(action, shown)
    if len(tokens) == 1 and tokens[0][0] == "field" and tokens[0][1] in _STRINGS:
        return ("string", _STRINGS[tokens[0][1]], "")
    if len(tokens) == 1 and tokens[0][0] == "field":
        owner, _, key = tokens[0][1].rpartition(".")
        if owner in _MAPS and _IDENTIFIER.fullmatch(key):
            return ("map", _MAPS[owner], key)
    if len(tokens) == 1 and tokens[0][0] == "string":
        return tokens[0][1]
    kinds = [kind for kind, _ in tokens]
    if kinds == ["word", "field", "string"] and tokens[0][1] == "index" and tokens[1][1] in _MAPS:
        return ("map", _MAPS[tokens[1][1]], tokens[2][1])
    raise PathPatternError(f"unsupported action {shown}: only {SUPPORTED_SYNTAX} are available")


def _tokens(action: str, shown: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(action):
        dotted, quoted, raw, word, other = match.groups()
        if other is not None:
            raise PathPatternError(
                f"unsupported action {shown}: only {SUPPORTED_SYNTAX} are available"
            )
        if quoted is not None:
            try:
                tokens.append(("string", str(json.loads(quoted))))
            except ValueError:
                raise PathPatternError(f"bad string literal {quoted} in {shown}") from None
        elif raw is not None:
            tokens.append(("string", raw[1:-1]))
        elif dotted is not None:
            tokens.append(("field", dotted))
        elif word is not None:
            tokens.append(("word", word))
    return tokens


def resolve_volume_path(
    base_path: str, pattern: str | None, fields: PatternFields, *, allow_unsafe: bool = False
) -> str:
    """The volume's directory: the rendered pattern (or the default folder) under base_path."""
    if pattern is None:
        folder = default_folder_name(fields.pv_name, fields.namespace, fields.name)
        try:
            return check_volume_path(base_path, folder, None)
        except PathTooLong as error:
            raise PathTooLong(f"{error}: shorten the claim name or use a pathPattern") from None
    scope = None if allow_unsafe else (fields.namespace, fields.name)
    try:
        return check_volume_path(base_path, render_pattern(pattern, fields), scope)
    except PathTooLong as error:
        raise PathTooLong(f"{error}: {longest_rendered(pattern, fields, 'pathPattern')}") from None


def longest_rendered(pattern: str, fields: PatternFields, parameter: str) -> str:
    """Which of the claim's fields the class's `parameter` renders is the longest: what to
    shorten when the rendering is too long to be used."""
    found: list[tuple[int, str, str]] = []
    for part in _compile(pattern):
        if isinstance(part, str):
            continue
        kind, name, key = part
        if kind == "string":
            shown = next(go for go, ours in _STRINGS.items() if ours == name)
            found.append((len(getattr(fields, name).encode()), shown, "value"))
        else:
            singular = name[:-1]
            value = getattr(fields, name).get(key, "")
            found.append(
                (len(value.encode()), f"the claim's {singular} {json.dumps(key)}", singular)
            )
    if not found:
        return f"the StorageClass parameter {parameter} is too long itself: shorten it"
    size, shown, what = max(found)
    return (
        f"{parameter} renders {shown} ({size} bytes) into it: shorten that {what}, or change"
        f" the StorageClass parameter {parameter}"
    )


def render_owner_fields(patterns: Mapping[str, str], fields: PatternFields) -> dict[str, str]:
    """VOL_USER, VOL_GROUP and VOL_PERM as the class's patterns (by "user", "group", "perm")
    render them for the claim; ValueError (ConfigError for the mode) naming the pattern when
    one cannot be used."""
    rendered = {k: render_pattern(pattern, fields) for k, pattern in patterns.items()}
    for key, value in rendered.items():
        parameter = f"{key}Pattern"
        if "\x00" in value or "\n" in value:
            raise ValueError(f"{parameter} renders a NUL or line break")
        if len(value.encode()) > LOGIN_NAME_MAX:
            blame = longest_rendered(patterns[key], fields, parameter)
            raise ValueError(
                f"{parameter} renders {len(value.encode())} bytes, over the {LOGIN_NAME_MAX}"
                f" of a user or group name: {blame}"
            )
    if rendered["perm"]:
        check_perm(rendered["perm"], "permPattern")
    return rendered


_OCTAL_MODE = re.compile(r"0?[0-7]{3,4}")


def check_perm(value: str, key: str) -> None:
    if not _OCTAL_MODE.fullmatch(value):
        raise ConfigError(key, f"{json.dumps(value)} is not an octal mode such as 0777")


_UNSAFE_PATH_CHARACTER = re.compile(r"[\x00-\x1f\x7f\\]")
"""Control characters and the backslash, which a tenant can write through a label or
annotation the pattern renders: the mount table writes a tab, a line break and a backslash as
octal escapes, `awk -v` and `echo` read a backslash as one, and a line break splits every
listing, so the helper's scripts could take such a path for another one."""


MAX_NAME_BYTES = 255
"""NAME_MAX of ext4, XFS and most other file systems: a longer directory name cannot exist."""

PATH_MAX = 4096
"""Linux's limit on a path handed to a system call, its NUL included."""
HELPER_PATH_ROOM = 256
"""What the helper puts in front of, or beside, a volume's path in one system call. The
container runtime mounts VOL_DIR at `<rootfs>/VOL_DIR`: containerd's rootfs is
`/run/containerd/io.containerd.runtime.v2.task/k8s.io/<64 hex>/rootfs` (124 bytes; k3s adds
`/k3s`), CRI-O's `/var/lib/containers/storage/overlay/<64 hex>/merged` (107). The guard reads
the volume through the read-only base view, `/.local-path-storage/base` in place of the base
path (25 bytes more at most), and `prepare` writes the owner marker
`<base>/.local-path-storage-owners/<sha256>.<volume name>` (133 bytes more than the base path,
which is shorter than the volume's). 256 holds each with room to spare."""
MAX_VOLUME_PATH_BYTES = PATH_MAX - 1 - HELPER_PATH_ROOM
"""The longest volume path a node can hold: a longer one makes the helper's mount or `cd`
fail with ENAMETOOLONG, on every retry. Every environment string of the helper, VOL_DIR among
them, stays far under execve's MAX_ARG_STRLEN (128 KiB) too."""
LOGIN_NAME_MAX = 256
"""Linux's limit on a user or group name: the most a userPattern or groupPattern may render
(VOL_USER and VOL_GROUP, which the setup hands to chown)."""


def check_volume_path(base_path: str, relative: str, scope: tuple[str, str] | None) -> str:
    """Joins and cleans `relative` under base_path, or raises PathPatternError saying why not.

    `scope` (namespace, name) additionally confines the result to base/namespace/name.
    """
    if unsafe := _UNSAFE_PATH_CHARACTER.search(relative):
        raise PathPatternError(
            f"rendered path {relative!r} contains {unsafe.group()!r}: control characters and"
            " backslashes are refused in volume paths; change the pattern or the label or"
            " annotation it renders"
        )
    if relative.startswith("/"):
        raise PathPatternError(f"rendered path {relative!r} is absolute; it must be relative")
    components = relative.split("/")
    if components and components[-1] == "":
        components.pop()  # one trailing slash, as in rancher's "{{.PVC.Namespace}}/{{.PVC.Name}}/"
    if not components:
        raise PathPatternError("the pattern renders an empty path")
    if components[0] in (OWNERS_DIR, SNAPSHOT_AREA):
        raise PathPatternError(
            f"rendered path {relative!r} begins with {components[0]}, the provisioner's own"
            " directory in every base path: change the pattern or the value it renders"
        )
    for component in components:
        if component in (".", ".."):
            raise PathPatternError(f"rendered path {relative!r} has a {component!r} component")
        if not component:
            raise PathPatternError(
                f"rendered path {relative!r} has an empty component: is a label or annotation"
                " the pattern uses missing?"
            )
        if len(component.encode()) > MAX_NAME_BYTES:
            raise PathTooLong(
                f"rendered path component {component[:40]!r}... is"
                f" {len(component.encode())} bytes; file systems allow {MAX_NAME_BYTES}"
            )
    path = posixpath.normpath(posixpath.join(base_path, *components))
    if len(path.encode()) > MAX_VOLUME_PATH_BYTES:
        raise PathTooLong(
            f"rendered path {path[:60]!r}... is {len(path.encode())} bytes; a node holds a"
            f" volume path of at most {MAX_VOLUME_PATH_BYTES} (PATH_MAX {PATH_MAX} less"
            f" {HELPER_PATH_ROOM} its helper needs)"
        )
    if not is_strictly_inside(path, base_path):
        raise PathPatternError(f"rendered path {relative!r} is not inside {base_path}")
    if scope is not None:
        if any("/" in part or part in ("", ".", "..") for part in scope):
            raise PathPatternError(f"claim namespace/name {scope!r} is not two plain names")
        confined = posixpath.join(base_path, *scope)
        if path != confined and not is_strictly_inside(path, confined):
            raise PathPatternError(
                f"rendered path {relative!r} is not inside {scope[0]}/{scope[1]}/: start the"
                ' pattern with "{{.PVC.Namespace}}/{{.PVC.Name}}/" or set allowUnsafePathPattern'
            )
    return path


def is_strictly_inside(path: str, base: str) -> bool:
    """True when the normalised absolute path lies below base (never equal to it)."""
    if not path.startswith("/") or "\x00" in path:
        return False
    parts = _components(posixpath.normpath(path))
    base_parts = _components(posixpath.normpath(base))
    return len(parts) > len(base_parts) and parts[: len(base_parts)] == base_parts


def _components(path: str) -> list[str]:
    return [c for c in path.split("/") if c]


def is_deletable_path(path: str, base_paths: Iterable[str]) -> bool:
    """May a teardown remove `path`? Only if it is written clean and strictly inside a base path.

    A path written with "..", "." or doubled slashes is refused outright: we wrote every path
    of ours already clean, so anything else was not written by us.
    """
    if path.startswith("//") or posixpath.normpath(path) != path or "\n" in path:
        return False
    return any(is_strictly_inside(path, base) for base in base_paths)


def choose_base_path(candidates: Sequence[str], live_volume_counts: Mapping[str, int]) -> str:
    """The candidate holding the fewest of our live volumes; ties go to the lexicographic first.

    rancher picks at random; counting spreads volumes evenly and is reproducible.
    """
    if not candidates:
        raise ValueError("no candidate base paths")
    return min(candidates, key=lambda path: (live_volume_counts.get(path, 0), path))


def pick_base_path(
    candidates: Sequence[str], recorded: str | None, book: PathBook | None, disk_node: str
) -> tuple[str, bool]:
    """The base path of a new volume, and whether to record it on its claim: the one the claim
    recorded while that is still a candidate, else the one `choose_base_path` picks (recorded
    when the node has several, so every retry uses the same one)."""
    if recorded in candidates:
        return str(recorded), False
    counts = {p: book.count_inside(disk_node, p) for p in candidates} if book else {}
    # A recorded path that has lost its room is replaced on the claim, so a retry after the
    # room comes back cannot go back to it while a directory exists on the new one.
    return choose_base_path(sorted(candidates), counts), len(candidates) > 1 or bool(recorded)


EVERY_NODE = ""
"""The node of a path seen from every node: one on a shared filesystem, or a node-local one
whose node cannot be told (a custom nodeAffinityKey whose value no single node carries). Such a
path overlaps any path it touches, on whatever node that one is."""

PathState = Literal["live", "released", "provisioning", "tearing-down", "torn-down"]
LIVE: PathState = "live"
"""A PV holds the path (Bound, Available, Failed...)."""
RELEASED: PathState = "released"
"""A Released PV holds the path: its teardown has yet to run."""
PROVISIONING: PathState = "provisioning"
"""A provision is in flight, or done and its PV not yet seen: the path is reserved."""
TEARING_DOWN: PathState = "tearing-down"
"""The teardown helper is running on the path."""
TORN_DOWN: PathState = "torn-down"
"""The teardown ran; the PV object has yet to disappear. Nothing may run on it again."""


@dataclass(frozen=True, slots=True)
class PathEntry:
    """A path is told apart by the filesystem it is on: a node's own disk (`node`, `path`), or
    one every node sees (`node` is EVERY_NODE). Never by the label the PV's affinity names: two
    classes with other nodeAffinityKeys put their volumes on the same disk of the same node."""

    volume_name: str
    node: str
    """The node whose disk holds the path; EVERY_NODE on a shared filesystem or when unknown."""
    path: str
    state: PathState
    size_bytes: int = 0
    """The volume's capacity (the claim's request while provisioning): what it costs its base
    path's budget until its PV is gone."""
    resizing_to: int = 0
    """The size an expansion granted and the PV does not show yet (0: none): the quota on the
    node may already allow it, so the budget counts it until the PV's capacity does."""
    volume_gone: bool = False
    """The PV went while its teardown was in flight: the entry stays until the teardown ended,
    so no new volume takes the path its `rm -rf` is about to run on."""

    @property
    def counted_bytes(self) -> int:
        """What the entry takes from its base path's budget."""
        return max(self.size_bytes, self.resizing_to)

    def describe(self) -> str:
        shown = {
            LIVE: "in use",
            RELEASED: "Released, awaiting its teardown",
            PROVISIONING: "being provisioned",
            TEARING_DOWN: "being torn down",
            TORN_DOWN: "torn down, its PV not yet gone",
        }
        return f"{self.volume_name} ({shown.get(self.state, self.state)}) at {self.path}"

    def shares_filesystem_with(self, node: str) -> bool:
        """Whether the entry's path and a path on `node` are on one filesystem."""
        return EVERY_NODE in (self.node, node) or self.node == node


def paths_overlap(one: str, other: str) -> bool:
    """The same directory, or one inside the other: work on one touches the other."""
    return one == other or is_strictly_inside(one, other) or is_strictly_inside(other, one)


class PathBook:
    """Which volume paths are taken, where, and in what state: live PVs, Released ones awaiting
    their teardown, and provisions and teardowns in flight.

    The one picture the decisions need to keep two volumes off one directory: a new volume may
    not take a path that equals, contains or lies inside any path in the book on the same
    filesystem (the same node's disk, or a path every node sees), and a teardown may not run on
    one that another entry shares. Entries are keyed by volume name, so a PV seen by the
    informer replaces the reservation its provision made. Not thread-safe: the shell holds one
    lock around a decision and the bookkeeping that carries it out.
    """

    def __init__(self, entries: Iterable[PathEntry] = ()) -> None:
        self._entries: dict[str, PathEntry] = {}
        for entry in entries:
            self._entries[entry.volume_name] = entry

    def get(self, volume_name: str) -> PathEntry | None:
        return self._entries.get(volume_name)

    def __contains__(self, volume_name: object) -> bool:
        return volume_name in self._entries

    def entries(self) -> list[PathEntry]:
        return list(self._entries.values())

    def record_volume(
        self,
        volume_name: str,
        node: str,
        path: str,
        state: PathState,
        *,
        size_bytes: int = 0,
    ) -> None:
        """A PV as the informer sees it (LIVE or RELEASED). A teardown in flight or done keeps
        its state: the PV's own updates must not make it eligible again. An expansion the PV
        does not show yet stays counted: every PV event (a resync too) carries the old size
        until the resize's PATCH lands."""
        current = self._entries.get(volume_name)
        resizing_to = 0
        if current is not None:
            if current.state in (TEARING_DOWN, TORN_DOWN):
                state = current.state
            if current.resizing_to > size_bytes:
                resizing_to = current.resizing_to
        self._entries[volume_name] = PathEntry(
            volume_name, node, path, state, size_bytes, resizing_to
        )

    def forget(self, volume_name: str) -> bool:
        """The PV is gone (or never was ours); whether its path is free now. A path whose
        teardown is in flight (queued behind a busy node's batch, say) is not: it stays taken
        until `finish_teardown`, or a recreated claim would be set up where the old teardown's
        `rm -rf` is about to run."""
        entry = self._entries.get(volume_name)
        if entry is not None and entry.state == TEARING_DOWN:
            self._entries[volume_name] = replace(entry, volume_gone=True)
            return False
        self._entries.pop(volume_name, None)
        return True

    def reserve(self, volume_name: str, node: str, path: str, *, size_bytes: int = 0) -> None:
        self._entries[volume_name] = PathEntry(volume_name, node, path, PROVISIONING, size_bytes)

    def start_resize(self, volume_name: str, size_bytes: int) -> None:
        """An expansion was granted: the budget counts the larger of the sizes in play from now
        until the PV shows it. A resize that fails stays counted (see `finish_resize`): its
        helper may have raised the quota even when its run was reported failed, and lowering
        a quota again can fail too, so the higher size is what the tenant may be writing."""
        entry = self._entries.get(volume_name)
        if entry is not None:
            resizing_to = max(entry.resizing_to, size_bytes)
            self._entries[volume_name] = replace(entry, resizing_to=resizing_to)

    def finish_resize(self, volume_name: str, size_bytes: int) -> None:
        """An expansion to `size_bytes` was carried out (quota and PV): that is the volume's
        limit now, whatever an earlier failed attempt had counted."""
        entry = self._entries.get(volume_name)
        if entry is not None:
            resizing_to = size_bytes if size_bytes > entry.size_bytes else 0
            self._entries[volume_name] = replace(entry, resizing_to=resizing_to)

    def cancel_reservation(self, volume_name: str) -> None:
        """The provision failed: free the path unless a PV has meanwhile replaced the entry."""
        entry = self._entries.get(volume_name)
        if entry is not None and entry.state == PROVISIONING:
            del self._entries[volume_name]

    def start_teardown(self, volume_name: str) -> None:
        self._set_state(volume_name, TEARING_DOWN)

    def finish_teardown(self, volume_name: str, *, succeeded: bool) -> bool:
        """The teardown's helper ended; whether the path is free now (its PV went meanwhile:
        nothing is left to retry, a directory left behind is the orphan scan's)."""
        entry = self._entries.get(volume_name)
        if entry is None or entry.state != TEARING_DOWN:
            return False
        if entry.volume_gone:
            del self._entries[volume_name]
            return True
        self._set_state(volume_name, TORN_DOWN if succeeded else RELEASED)
        return False

    def _set_state(self, volume_name: str, state: PathState) -> None:
        entry = self._entries.get(volume_name)
        if entry is not None:
            self._entries[volume_name] = replace(entry, state=state)

    def overlapping(self, volume_name: str, node: str, path: str) -> list[PathEntry]:
        """Other entries on the filesystem of `path` on `node` (EVERY_NODE: on any) whose path
        is this one, inside it, or contains it."""
        return sorted(
            (
                entry
                for entry in self._entries.values()
                if entry.volume_name != volume_name
                and entry.shares_filesystem_with(node)
                and paths_overlap(entry.path, path)
            ),
            key=lambda entry: entry.volume_name,
        )

    def helper_run_problem(self, volume_name: str, *, teardown: bool) -> str | None:
        """The last look before a setup's or teardown's helper pod is built (it may have
        waited in a busy node's queue since it was decided): None when the volume still holds
        its path in the state the run was decided in and no other entry shares the path;
        otherwise why the run must not start."""
        expected = TEARING_DOWN if teardown else PROVISIONING
        entry = self._entries.get(volume_name)
        if entry is None or entry.state != expected:
            now = "no longer in the book" if entry is None else entry.describe()
            return f"{volume_name} is {now}, not {expected}: its helper run was not started"
        others = self.overlapping(volume_name, entry.node, entry.path)
        if others:
            shared = ", ".join(other.describe() for other in others)
            return f"{entry.path} is shared with {shared}: {volume_name}'s helper run not started"
        return None

    def count_inside(self, node: str, base_path: str) -> int:
        """Volumes (live or in flight) under base_path on the node (EVERY_NODE: those every
        node sees): spreads new volumes over a node's base paths."""
        return sum(
            1
            for entry in self._entries.values()
            if entry.node == node
            and entry.state != TORN_DOWN
            and is_strictly_inside(entry.path, base_path)
        )


def is_named_for_volume(path: str, base_path: str, volume_name: str) -> bool:
    """Whether the directory sits directly in the base path under a name holding the volume's
    name (so no other claim's directory can be there)."""
    parent, folder = posixpath.split(path)
    return parent == base_path and (folder == volume_name or folder.startswith(f"{volume_name}_"))


# -- budgets: the room each base path has left ---------------------------------------------
# Path budgets: how much of each base path's `capacity` our volumes take, and which paths
# have room for a claim.
#
# What counts against a budget is every entry of the PathBook under that base path on that
# node: live PVs, Released ones (Retain volumes count until their PV is deleted), teardowns in
# flight and provisions in flight (their reservation carries the claim's request). So two
# workers deciding at once both see the other's reservation and cannot overcommit a path.

UNLIMITED_BYTES = 1024**6
"""What a path without a capacity publishes to the scheduler (1Ei): the scheduler treats a
node with no CSIStorageCapacity as having no room at all, so "no budget" must be a number."""


@dataclass(frozen=True, slots=True)
class PathRoom:
    base_path: str
    capacity: int | None
    """The budget in bytes; None: no budget."""
    committed: int

    @property
    def free(self) -> int:
        if self.capacity is None:
            return UNLIMITED_BYTES
        return max(0, self.capacity - self.committed)

    def fits(self, size: int) -> bool:
        return self.capacity is None or self.committed + size <= self.capacity

    def describe(self) -> str:
        if self.capacity is None:
            return f"{self.base_path} (no capacity set)"
        return (
            f"{self.base_path} has {format_bytes(self.free)} free of"
            f" {format_bytes(self.capacity)} ({format_bytes(self.committed)} committed)"
        )


def committed_bytes(
    entries: Iterable[PathEntry], node: str, base_paths: Iterable[str]
) -> dict[str, int]:
    """Bytes committed under each base path on the node, by every entry the book holds."""
    totals = dict.fromkeys(base_paths, 0)
    for entry in entries:
        if entry.node != node:
            continue
        for base in totals:
            if is_strictly_inside(entry.path, base):
                totals[base] += entry.counted_bytes
                break
    return totals


def path_rooms(
    capacities: Mapping[str, int | None], candidates: Iterable[str], committed: Mapping[str, int]
) -> list[PathRoom]:
    return [
        PathRoom(path, capacities.get(path), committed.get(path, 0)) for path in sorted(candidates)
    ]


def paths_with_room(rooms: Iterable[PathRoom], size: int) -> list[str]:
    return [room.base_path for room in rooms if room.fits(size)]


def no_room_reason(node: str, size: int, rooms: Iterable[PathRoom]) -> str:
    """The Event text for a claim no path of its node can take: sizes and budgets."""
    return f"node {node} has no base path with room for {format_bytes(size)}: " + "; ".join(
        room.describe() for room in rooms
    )


def best_free_bytes(rooms: Iterable[PathRoom]) -> int:
    """The most a single new volume can get on the node: its best path's free budget."""
    return max((room.free for room in rooms), default=0)


class NoRoom(Exception):  # noqa: N818 (reads as a sentence at the raise site)
    """No base path of the selected node has room for the claim: the text says sizes and
    budgets."""


def with_room(
    capacities: Mapping[str, int | None],
    candidates: list[str],
    node_name: str,
    size: int,
    entries: Iterable[PathEntry],
) -> list[str]:
    """The candidate base paths of the node with room for `size` beside `entries` (every
    candidate when none has a budget); NoRoom when none has."""
    if all(capacities.get(path) is None for path in candidates):
        return candidates
    rooms = path_rooms(capacities, candidates, committed_bytes(entries, node_name, candidates))
    roomy = paths_with_room(rooms, size)
    if not roomy:
        raise NoRoom(no_room_reason(node_name, size, rooms))
    return roomy
