"""Which containers of a workload run the provisioner, and with which options: read with the
runtime's own parser (provisioner.configuration.options), so a policy and the running provisioner
give a command line one meaning (`--allow-unsafe` is argparse's abbreviation of
`--allow-unsafe-helper-template`, `ALLOW_UNSAFE_HELPER_TEMPLATE=on` is true, ...).

What runs, as the kubelet starts it:
- `command` replaces the image's ENTRYPOINT; without one the image's runs, which this policy
  cannot see. When no container's `command` runs the provisioner, those without a `command`
  are read as the provisioner (its image's ENTRYPOINT is `local-path-storage-provisioner`):
  their `args` and env are parsed, and one that is something else only counts when the
  provisioner would accept its arguments and be unsafe (or they cannot be read).
- With a `command`: the `local-path-storage-provisioner` script, `python[3[.N]] [-flags] -m
  provisioner`, or either inside a `sh -c` script; anything else is not the provisioner.
  `... orphans` runs the orphans command, not the provisioner.
- `$(VAR)` in command and args is expanded from the container's env, as the kubelet does.
- The env: `env` entries with a `value` (the last one of a name wins, over `envFrom`). A
  variable the provisioner reads whose value comes from `valueFrom` or an `envFrom` source
  (a ConfigMap or Secret this policy cannot read) cannot be told, nor can an argument built
  from one: those are reported as unverifiable, never assumed safe.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy.resources import KubeObject, pod_spec
from provisioner.configuration.options import ORPHANS_COMMAND, Options, OptionsError, read_options

PROVISIONER_SCRIPT = "local-path-storage-provisioner"
PROVISIONER_MODULE = "provisioner"
ENVIRONMENT_READ = (
    "ALLOW_UNSAFE_HELPER_TEMPLATE",
    "LEADER_ELECTION",
)
"""The provisioner's variables a policy decides on: one from an unreadable source is reported."""
_PYTHON = re.compile(r"python[0-9.]*")
_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_PYTHON_VALUED_OPTIONS = frozenset({"-X", "-W", "--check-hash-based-pycs"})
_SHELL_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)|\$\(|`")
_SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh"})
_SHELL_CONTROL = frozenset({";", "&&", "||", "|", "&", ";;", "(", ")"})


@dataclass(frozen=True)
class ProvisionerRun:
    """One container that runs the provisioner."""

    container: Mapping[str, Any]
    options: Options | None
    """What the provisioner makes of its command line and env; None when it would refuse them
    (it exits at start: nothing runs) or they cannot be read."""
    unverifiable: tuple[str, ...] = ()
    """Why a setting cannot be told from the object (a value from a ConfigMap or Secret)."""

    @property
    def name(self) -> str:
        return str(self.container.get("name"))


def provisioner_runs(workload: KubeObject) -> Iterator[ProvisionerRun]:
    """The containers whose `command` runs the provisioner; when none does, those without a
    `command` (the image's ENTRYPOINT runs): a sidecar beside an identified provisioner is not
    read as one. Init containers count: one that never exits (or a sidecar, restartPolicy
    Always) runs the provisioner as well as any container."""
    spec = pod_spec(workload) or {}
    containers = [
        c
        for key in ("initContainers", "containers")
        for c in spec.get(key) or ()
        if isinstance(c, Mapping)
    ]
    by_command = [c for c in containers if c.get("command")]
    runs = [run for c in by_command if (run := _run(c)) is not None]
    if not runs:
        runs = [run for c in containers if not c.get("command") and (run := _run(c)) is not None]
    yield from runs


def _run(container: Mapping[str, Any]) -> ProvisionerRun | None:
    literal, unreadable = _environment(container)
    unverifiable = [
        f"{name} comes from {unreadable[name]}" for name in ENVIRONMENT_READ if name in unreadable
    ]
    command = [_expand(str(part), literal, unreadable) for part in container.get("command") or ()]
    args = [_expand(str(part), literal, unreadable) for part in container.get("args") or ()]
    if command:
        found = _provisioner_arguments([*command, *args], literal, unreadable)
        if found is None:
            return None
        argv = found
    else:
        argv = args
    if argv[:1] == [ORPHANS_COMMAND]:
        return None
    if any("\0" in argument for argument in argv):
        unverifiable.append("an argument uses a variable from valueFrom or envFrom")
        return ProvisionerRun(container, None, tuple(unverifiable))
    try:
        options = read_options(argv, literal)
    except OptionsError:
        return ProvisionerRun(container, None)  # the provisioner exits at start
    return ProvisionerRun(container, options, tuple(unverifiable))


def _environment(container: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> literal value, name or prefix* -> the unreadable source) of the container's
    env; `env` wins over `envFrom`, the last entry of a name over earlier ones."""
    literal: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        if not isinstance(source, Mapping):
            continue
        prefix = str(source.get("prefix") or "")
        kind = next((k for k in ("configMapRef", "secretRef") if k in source), "envFrom")
        reference = source.get(kind)
        named = reference.get("name", "?") if isinstance(reference, Mapping) else "?"
        described = f"envFrom {kind} {named}"
        for name in ENVIRONMENT_READ:
            if name.startswith(prefix):
                unreadable[name] = described
    for variable in container.get("env") or ():
        if not isinstance(variable, Mapping) or not isinstance(variable.get("name"), str):
            continue
        name = variable["name"]
        literal.pop(name, None)
        unreadable.pop(name, None)
        if "valueFrom" in variable:
            unreadable[name] = f"env valueFrom ({', '.join(variable['valueFrom'])})"
        else:
            literal[name] = str(variable.get("value") or "")
    return literal, unreadable


def _expand(text: str, literal: Mapping[str, str], unreadable: Mapping[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion; a reference to a variable it cannot read becomes NUL
    (never a valid flag: the argument is unverifiable)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        if name in literal:
            return literal[name]
        return "\0" if name in unreadable else match.group(0)

    return _REFERENCE.sub(replace, text)


def _provisioner_arguments(
    words: Sequence[str], literal: Mapping[str, str], unreadable: Mapping[str, str]
) -> list[str] | None:
    """The provisioner's arguments in an executed command line, or None when it runs
    something else."""
    for index, word in enumerate(words):
        program = posixpath.basename(word)
        if program == PROVISIONER_SCRIPT:
            return _until_control(words[index + 1 :])
        if _PYTHON.fullmatch(program):
            module = _python_module(words[index + 1 :])
            if module is not None:
                return _until_control(module)
        if program in _SHELLS and "-c" in words[index + 1 :]:
            script = words[words.index("-c", index) + 1 : words.index("-c", index) + 2]
            inner = _shell_words(script[0] if script else "", literal, unreadable)
            return _provisioner_arguments(inner, literal, unreadable)
    return None


def _shell_words(
    script: str, literal: Mapping[str, str], unreadable: Mapping[str, str]
) -> list[str]:
    """The words of a `sh -c` script after the shell's parameter expansion (split on blanks,
    whether quoted or not: a flag in a variable counts either way). A command substitution
    or a variable it cannot read becomes NUL: unverifiable."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unterminated quote: the shell refuses it too
        return []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name is None:
            return "\0"
        if name in literal:
            return literal[name]
        return "\0" if name in unreadable else ""

    expanded: list[str] = []
    for word in words:
        if _SHELL_REFERENCE.search(word) is None:
            expanded.append(word)
        else:
            expanded += _SHELL_REFERENCE.sub(replace, word).split()
    return expanded


def _python_module(words: Sequence[str]) -> list[str] | None:
    """After `python`: the arguments of `-m provisioner` (its options may come first)."""
    index = 0
    while index < len(words):
        word = words[index]
        if word == "-m" and words[index + 1 : index + 2] == [PROVISIONER_MODULE]:
            return list(words[index + 2 :])
        if word == f"-m{PROVISIONER_MODULE}":
            return list(words[index + 1 :])
        if not word.startswith("-") or word.startswith(("-m", "-c")):
            return None  # a script, another module or inline code
        index += 2 if word in _PYTHON_VALUED_OPTIONS else 1
    return None


def _until_control(words: Sequence[str]) -> list[str]:
    argv = []
    for word in words:
        if word in _SHELL_CONTROL:
            break
        argv.append(word)
    return argv
