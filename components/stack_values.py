"""What one stack config value may be, and the one error for a value that cannot be deployed.

The pydantic models of settings.py declare each key with a reader from here, e.g.
`replicas: Annotated[int, integer(minimum=1)] = 1`. A reader takes the value as the engine
hands it (a string; inside a structured value, JSON) or as Pulumi.yaml declares its default,
and refuses it with the words users see: values shown as JSON (strings quoted, so `"data"`
and `data` are never confused), inner key paths spelt as `pulumi config set --path` does.
settings_error() turns pydantic's first problem into the one SettingsError line.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import yaml
from pydantic import BeforeValidator, ValidationError

from components import naming
from components.args import LabelExpression, MetricsExposure, TopologyTerm, UpdateStrategy

T = TypeVar("T")

Check = Callable[[str], str | None]
"""A rule for a text value: None when it holds, else what is wrong."""

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""Kubernetes' DNS-1123 subdomain (object names, name prefixes), without its length limit."""
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"\+?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+|[mkMGTPE]|[KMGTPE]i)?")

RESERVED_ANNOTATIONS = {
    naming.DEFAULT_CLASS_ANNOTATION: "isDefault",
    naming.DEFAULT_VOLUME_TYPE_ANNOTATION: "defaultVolumeType",
}
"""StorageClass annotations that the class's own keys set."""


class SettingsError(ValueError):
    """A stack config value that cannot be deployed; `str()` is the one line users see."""

    def __init__(self, key_path: str, message: str) -> None:
        self.key_path = key_path
        self.message = message
        super().__init__(f"stack config {naming.CONFIG_NAMESPACE}:{key_path}: {message}")


class InvalidValueError(ValueError):
    """Raised by a reader: what is wrong, and where inside the value (`[0].values`, `.name`),
    relative to the key pydantic is validating."""

    def __init__(self, message: str, inner_path: str = "") -> None:
        self.message = message
        self.inner_path = inner_path
        super().__init__(message)


def show(value: object) -> str:
    """A value as it appears in messages: JSON, so strings are quoted and nothing is ambiguous."""
    return json.dumps(value)


def unknown_key(name: str, known: tuple[str, ...]) -> str:
    """The message for a key that is not one of `known`, suggesting the closest."""
    close = difflib.get_close_matches(name, known, n=1)
    return (
        f"unknown key; did you mean {close[0]}?"
        if close
        else f"unknown key; known keys: {', '.join(known)}"
    )


def key_path(*parts: str | int) -> str:
    """Joins a key path: names with ".", list indexes in brackets; a part that already starts
    with "." or "[" (an inner path) is appended as it is."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith((".", "[")):
            path += part
        elif part:
            path += f".{part}" if path else part
    return path


def settings_error(error: ValidationError, prefix: str = "") -> SettingsError:
    """The first problem pydantic met (fields are checked in their declared order), at its key
    path below `prefix`."""
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidValueError):
        return SettingsError(key_path(prefix, *first["loc"], cause.inner_path), cause.message)
    # Left to pydantic: a required key that is missing.
    message = "is required" if first["type"] == "missing" else first["msg"]
    return SettingsError(key_path(prefix, *first["loc"]), message)


# -- scalars -----------------------------------------------------------------------------------


def boolean() -> BeforeValidator:
    """true or false; `pulumi config set --path` without --type stores them as strings."""

    def read(value: object) -> bool:
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise InvalidValueError(f"must be true or false, got {show(value)}")

    return BeforeValidator(read)


def integer(minimum: int | None = None, maximum: int | None = None) -> BeforeValidator:
    def read(value: str | int) -> int:
        try:
            number = int(value)
        except ValueError:
            raise InvalidValueError(f"must be an integer, got {show(value)}") from None
        if minimum is None:
            return number
        if number < minimum or (maximum is not None and number > maximum):
            bounds = (
                f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            )
            raise InvalidValueError(f"must be {bounds}, got {number}")
        return number

    return BeforeValidator(read)


def one_of(*choices: str) -> BeforeValidator:
    def read(value: object) -> str:
        if value not in choices:
            raise InvalidValueError(f"must be one of {', '.join(choices)}; got {show(value)}")
        return str(value)

    return BeforeValidator(read)


def string(check: Check | None = None) -> BeforeValidator:
    return BeforeValidator(lambda value: _checked_string(value, check))


def nullable_string() -> BeforeValidator:
    """A string, or null for "not set"."""
    return BeforeValidator(lambda value: None if value is None else _string(value))


def strings() -> BeforeValidator:
    return BeforeValidator(_strings)


def optional_text(check: Check | None = None) -> BeforeValidator:
    """An empty string (the declared default) means unset."""

    def read(value: object) -> str | None:
        return None if value == "" else _checked_string(value, check)

    return BeforeValidator(read)


def _string(value: object, inner_path: str = "") -> str:
    if not isinstance(value, str):
        raise InvalidValueError(f"must be a string, got {show(value)}", inner_path)
    return value


def _strings(value: object, inner_path: str = "") -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InvalidValueError(f"must be a list of strings, got {show(value)}", inner_path)
    return tuple(_string(item, f"{inner_path}[{index}]") for index, item in enumerate(value))


def _checked_string(value: object, check: Check | None) -> str:
    checked = _string(value)
    problem = None if check is None else check(checked)
    if problem is not None:
        raise InvalidValueError(problem)
    return checked


# -- rules for text values ---------------------------------------------------------------------


def check_not_empty(value: str) -> str | None:
    return "must not be empty" if not value.strip() else None


def check_dns_label(what: str, limit: int) -> Check:
    def check(value: str) -> str | None:
        if len(value) <= limit and _DNS_LABEL.fullmatch(value):
            return None
        return (
            f"{show(value)} is not a valid {what} "
            f'(lower-case letters, digits and "-", at most {limit} characters)'
        )

    return check


def check_provisioner_name(value: str) -> str | None:
    # Kubernetes' rule for a StorageClass's provisioner: a qualified name such as
    # example.com/local-path, checked in lower case.
    prefix, _, name = value.lower().rpartition("/")
    valid_prefix = prefix == "" or (len(prefix) <= 253 and DNS_SUBDOMAIN.fullmatch(prefix))
    if valid_prefix and len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name):
        return None
    return f"{show(value)} is not a valid provisioner name (e.g. example.com/local-path)"


def check_quantity(value: str) -> str | None:
    if _QUANTITY.fullmatch(value):
        return None
    return f"{show(value)} is not a Kubernetes quantity (e.g. 100m, 64Mi, 1Gi)"


def check_storage_class_name(value: str) -> str | None:
    if len(value) <= 253 and DNS_SUBDOMAIN.fullmatch(value):
        return None
    return (
        f"{show(value)} is not a valid StorageClass name "
        '(lower-case letters, digits, "-" and ".", at most 253 characters)'
    )


# -- structured values -------------------------------------------------------------------------


def decode_structured(text: str, expected: type[T], what: str) -> T:
    """A structured top-level value, which the engine passes as JSON text."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if not isinstance(value, expected):
        raise InvalidValueError(
            f"must be {what} (edit it in the stack file or with `pulumi config set --path`), "
            f"got {show(value)}"
        )
    return value


def structured(expected: type[Any], what: str) -> BeforeValidator:
    """A structured top-level key; None (not set) stays None."""

    def read(value: str | None) -> Any:
        return None if value is None else decode_structured(value, expected, what)

    return BeforeValidator(read)


def yaml_text() -> BeforeValidator:
    """YAML text as it is (so rancher's helperPod.yaml can be pasted), or a structured object
    (editable with `pulumi config set --path`, passed by the engine as JSON text) as YAML."""

    def read(value: str) -> str:
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        if isinstance(decoded, dict):
            return yaml.safe_dump(decoded, sort_keys=False)
        return value

    return BeforeValidator(read)


def class_parameters() -> BeforeValidator:
    """StorageClass parameters: values must be strings; which names are allowed is
    provisioner.configuration.config's rule."""

    def read(value: object) -> dict[str, str]:
        if not isinstance(value, dict):
            raise InvalidValueError(
                f"must be a map of parameter names to strings, got {show(value)}"
            )
        parameters = {}
        for name, given in value.items():
            parameter = ("true" if given else "false") if isinstance(given, bool) else given
            if not isinstance(parameter, str):
                # YAML reads 0770 as a number; StorageClass parameters are strings.
                raise InvalidValueError(
                    f'must be a string (quote it, e.g. "0770"), got {show(parameter)}', f".{name}"
                )
            parameters[name] = parameter
        return parameters

    return BeforeValidator(read)


def class_annotations() -> BeforeValidator:
    def read(value: object) -> dict[str, str]:
        if not isinstance(value, dict):
            raise InvalidValueError(f"must be a map of strings, got {show(value)}")
        annotations = {}
        for name, annotation in value.items():
            inner_path = f"[{show(name)}]"
            if name in RESERVED_ANNOTATIONS:
                raise InvalidValueError(f"set {RESERVED_ANNOTATIONS[name]} instead", inner_path)
            annotations[name] = _string(annotation, inner_path)
        return annotations

    return BeforeValidator(read)


def topologies() -> BeforeValidator:
    """allowedTopologies in Kubernetes' shape: [{matchLabelExpressions: [{key, values}]}]."""

    def read(value: object) -> tuple[TopologyTerm, ...]:
        if not isinstance(value, list):
            raise InvalidValueError(
                f"must be a list of {{matchLabelExpressions}}, got {show(value)}"
            )
        terms = []
        for index, term in enumerate(value):
            term_path = f"[{index}]"
            if not isinstance(term, dict) or set(term) != {"matchLabelExpressions"}:
                raise InvalidValueError(
                    f"must be {{matchLabelExpressions: [...]}}, got {show(term)}", term_path
                )
            expressions = term["matchLabelExpressions"]
            if not isinstance(expressions, list) or not expressions:
                raise InvalidValueError(
                    "must be a non-empty list of {key, values}",
                    f"{term_path}.matchLabelExpressions",
                )
            terms.append(
                tuple(
                    _label_expression(expression, f"{term_path}.matchLabelExpressions[{number}]")
                    for number, expression in enumerate(expressions)
                )
            )
        return tuple(terms)

    return BeforeValidator(read)


def _label_expression(value: object, inner_path: str) -> LabelExpression:
    if not isinstance(value, dict) or set(value) != {"key", "values"}:
        raise InvalidValueError(f"must be {{key, values}}, got {show(value)}", inner_path)
    values = _strings(value["values"], f"{inner_path}.values")
    if not values:
        raise InvalidValueError("must not be empty", f"{inner_path}.values")
    return LabelExpression(key=_string(value["key"], f"{inner_path}.key"), values=values)


# -- the provisioner pod and its objects -------------------------------------------------------

_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_PERCENT = re.compile(r"[0-9]+%")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


def check_qualified_name(value: str) -> str | None:
    """Kubernetes' rule for label and annotation keys: an optional DNS-subdomain prefix and "/",
    then a name of at most 63 characters."""
    prefix, slash, name = value.rpartition("/")
    valid_prefix = not slash or (0 < len(prefix) <= 253 and DNS_SUBDOMAIN.fullmatch(prefix))
    if valid_prefix and len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name):
        return None
    return (
        f"{show(value)} is not a valid key (an optional DNS prefix and /, then at most 63 "
        'letters, digits, "-", "_" or ".")'
    )


def check_label_value(value: str) -> str | None:
    if len(value) <= 63 and _LABEL_VALUE.fullmatch(value):
        return None
    return (
        f'{show(value)} is not a valid label value (at most 63 letters, digits, "-", "_" or ".", '
        "starting and ending with a letter or digit)"
    )


def check_object_name(value: str) -> str | None:
    if len(value) <= 253 and DNS_SUBDOMAIN.fullmatch(value):
        return None
    return (
        f"{show(value)} is not a valid object name "
        '(lower-case letters, digits, "-" and ".", at most 253 characters)'
    )


def string_map(
    what: str,
    check_value: Check | None = None,
    reserved: Mapping[str, str] | None = None,
) -> BeforeValidator:
    """A top-level map of keys (label or annotation keys) to strings; None (not set) stays None.
    `reserved` keys are refused with the reason given."""

    def read(value: str | dict[str, Any] | None) -> dict[str, str] | None:
        if value is None:
            return None
        decoded = (
            value if isinstance(value, dict) else decode_structured(value, dict, f"a map of {what}")
        )
        return _string_map(decoded, check_value, reserved or {})

    return BeforeValidator(read)


def _string_map(
    value: object, check_value: Check | None, reserved: Mapping[str, str], inner_path: str = ""
) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidValueError(f"must be a map of strings, got {show(value)}", inner_path)
    result = {}
    for name, given in value.items():
        item_path = f"{inner_path}[{show(name)}]"
        if name in reserved:
            raise InvalidValueError(reserved[name], item_path)
        problem = check_qualified_name(name)
        text = _string(given, item_path)
        problem = problem or (None if check_value is None else check_value(text))
        if problem is not None:
            raise InvalidValueError(problem, item_path)
        result[name] = text
    return result


def _object(value: object, what: str, known: tuple[str, ...], inner_path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidValueError(f"must be {what}, got {show(value)}", inner_path)
    for name in value:
        if name not in known:
            raise InvalidValueError(unknown_key(name, known), f"{inner_path}.{name}")
    return value


def _structured_value(value: str | Any, expected: type[T], what: str) -> T:
    """A top-level structured key as the engine gives it (JSON text) or already decoded."""
    if isinstance(value, expected) and not isinstance(value, str):
        return value
    return decode_structured(value, expected, what)


def toleration_list() -> BeforeValidator:
    """Kubernetes tolerations: [{key, operator, value, effect, tolerationSeconds}]."""

    def read(value: str | None) -> tuple[dict[str, Any], ...] | None:
        if value is None:
            return None
        items = _structured_value(value, list, "a list of tolerations")
        return tuple(_toleration(item, f"[{index}]") for index, item in enumerate(items))

    return BeforeValidator(read)


def _toleration(value: object, inner_path: str) -> dict[str, Any]:
    toleration = _object(
        value, "a toleration {key, operator, value, effect}", TOLERATION_KEYS, inner_path
    )
    for name in ("key", "value"):
        if name in toleration:
            _string(toleration[name], f"{inner_path}.{name}")
    operator = toleration.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise InvalidValueError(
            f"must be one of Equal, Exists; got {show(operator)}", f"{inner_path}.operator"
        )
    if operator == "Exists" and toleration.get("value", "") != "":
        raise InvalidValueError(
            "must be empty when operator is Exists (it matches every value)",
            f"{inner_path}.value",
        )
    if "key" not in toleration and operator != "Exists":
        raise InvalidValueError(
            "an empty key needs operator Exists (it then tolerates every taint)",
            f"{inner_path}.operator",
        )
    effect = toleration.get("effect", "")
    if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise InvalidValueError(
            f"must be one of NoSchedule, PreferNoSchedule, NoExecute; got {show(effect)}",
            f"{inner_path}.effect",
        )
    if "tolerationSeconds" in toleration:
        seconds = toleration["tolerationSeconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise InvalidValueError(
                f"must be an integer, got {show(seconds)}", f"{inner_path}.tolerationSeconds"
            )
        if effect != "NoExecute":
            raise InvalidValueError(
                "applies only to effect NoExecute", f"{inner_path}.tolerationSeconds"
            )
    return dict(toleration)


def affinity_object() -> BeforeValidator:
    """A pod's affinity in Kubernetes' shape; its three parts must be objects (their insides are
    the API server's to check, which the provider's preview asks)."""

    def read(value: str | None) -> dict[str, Any] | None:
        if value is None:
            return None
        decoded = _structured_value(value, dict, "an object {nodeAffinity, podAffinity, ...}")
        _object(decoded, "an object", AFFINITY_KEYS, "")
        for name, part in decoded.items():
            if not isinstance(part, dict):
                raise InvalidValueError(f"must be an object, got {show(part)}", f".{name}")
        return decoded

    return BeforeValidator(read)


def secret_names() -> BeforeValidator:
    """Names of Secrets in the provisioner's namespace: ["regcred"], or Helm's
    [{name: regcred}]."""

    def read(value: str | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        items = _structured_value(value, list, "a list of Secret names")
        names = []
        for index, item in enumerate(items):
            inner_path = f"[{index}]"
            given = item
            if isinstance(item, dict):
                given = _object(item, "a Secret name", ("name",), inner_path).get("name")
                inner_path += ".name"
            name = _string(given, inner_path)
            problem = check_object_name(name)
            if problem is not None:
                raise InvalidValueError(problem, inner_path)
            names.append(name)
        return tuple(names)

    return BeforeValidator(read)


def service_account_object() -> BeforeValidator:
    """{annotations: {...}} of the provisioner's ServiceAccount (e.g. IRSA, workload identity)."""

    def read(value: str | None) -> dict[str, str] | None:
        if value is None:
            return None
        decoded = _structured_value(value, dict, "an object {annotations}")
        _object(decoded, "an object {annotations}", ("annotations",), "")
        return _string_map(decoded.get("annotations", {}), None, {}, ".annotations")

    return BeforeValidator(read)


def deployment_strategy() -> BeforeValidator:
    """The Deployment's strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable,
    maxSurge}} or {type: Recreate}."""

    def read(value: str | None) -> UpdateStrategy | None:
        if value is None:
            return None
        decoded = _structured_value(value, dict, "an object {type, rollingUpdate}")
        _object(decoded, "an object {type, rollingUpdate}", ("type", "rollingUpdate"), "")
        kind = decoded.get("type", "RollingUpdate")
        if kind not in ("RollingUpdate", "Recreate"):
            raise InvalidValueError(
                f"must be one of RollingUpdate, Recreate; got {show(kind)}", ".type"
            )
        rolling = decoded.get("rollingUpdate")
        if rolling is None:
            return UpdateStrategy(type=kind)
        if kind == "Recreate":
            raise InvalidValueError("is only for type RollingUpdate", ".rollingUpdate")
        _object(
            rolling,
            "an object {maxUnavailable, maxSurge}",
            ("maxUnavailable", "maxSurge"),
            ".rollingUpdate",
        )
        bounds = {
            name: _int_or_percent(rolling[name], f".rollingUpdate.{name}")
            for name in ("maxUnavailable", "maxSurge")
            if name in rolling
        }
        if all(bound in (0, "0%") for bound in bounds.values()) and len(bounds) == 2:
            raise InvalidValueError(
                "maxUnavailable and maxSurge cannot both be 0 (the rollout could never start)",
                ".rollingUpdate",
            )
        return UpdateStrategy(
            type=kind,
            max_unavailable=bounds.get("maxUnavailable"),
            max_surge=bounds.get("maxSurge"),
        )

    return BeforeValidator(read)


def _int_or_percent(value: object, inner_path: str) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _PERCENT.fullmatch(value):
        return value
    raise InvalidValueError(
        f"must be a number of pods or a percentage (e.g. 1 or 25%), got {show(value)}",
        inner_path,
    )


def metrics_exposure() -> BeforeValidator:
    """{service: {enabled}, serviceMonitor: {enabled}}."""

    def read(value: str | None) -> MetricsExposure | None:
        if value is None:
            return None
        decoded = _structured_value(value, dict, "an object {service, serviceMonitor}")
        _object(decoded, "an object {service, serviceMonitor}", ("service", "serviceMonitor"), "")
        enabled = {
            part: _enabled(decoded.get(part, {}), f".{part}")
            for part in ("service", "serviceMonitor")
        }
        if enabled["serviceMonitor"] and not enabled["service"]:
            raise InvalidValueError(
                "needs metrics.service.enabled: true (a ServiceMonitor scrapes a Service)",
                ".serviceMonitor.enabled",
            )
        return MetricsExposure(
            service=enabled["service"], service_monitor=enabled["serviceMonitor"]
        )

    return BeforeValidator(read)


def _enabled(value: object, inner_path: str) -> bool:
    part = _object(value, "an object {enabled}", ("enabled",), inner_path)
    enabled = part.get("enabled", False)
    if enabled in ("true", "false"):
        return bool(enabled == "true")
    if not isinstance(enabled, bool):
        raise InvalidValueError(
            f"must be true or false, got {show(enabled)}", f"{inner_path}.enabled"
        )
    return enabled
