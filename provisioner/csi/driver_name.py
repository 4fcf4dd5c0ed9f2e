"""The CSI driver name, derived from the provisioner name.

A provisioner name is `domain/name` (`local-path-storage.io/local-path`); a CSI driver name
may not hold a '/', must be at most 63 characters of alphanumerics, '-' and '.', beginning and
ending with an alphanumeric, and should be a domain name (spec: GetPluginInfo). Turning
`domain/name` into `name.domain` (`local-path.local-path-storage.io`) keeps it under the
project's domain, as the community's drivers do (`hostpath.csi.k8s.io`), and lets each
installation's provisioner name give its own driver name.
"""

from __future__ import annotations

import re

from provisioner.configuration import defaults

MAX_LENGTH = 63
_DRIVER_NAME = re.compile(r"[A-Za-z0-9]([-.A-Za-z0-9]*[A-Za-z0-9])?")


class DriverNameError(ValueError):
    """A driver name the CSI spec forbids; the message says which rule and how to fix it."""


def driver_name_for(provisioner_name: str) -> str:
    """`domain/name` -> `name.domain`; a name without '/' is kept as it is. Checked."""
    domain, slash, name = provisioner_name.partition("/")
    return check_driver_name(f"{name}.{domain}" if slash else provisioner_name)


def check_driver_name(name: str) -> str:
    if len(name) > MAX_LENGTH:
        raise DriverNameError(
            f"CSI driver name {name!r} is {len(name)} characters; the CSI spec allows at most"
            f" {MAX_LENGTH}: choose a shorter provisioner name"
        )
    if not _DRIVER_NAME.fullmatch(name):
        raise DriverNameError(
            f"CSI driver name {name!r} must be alphanumerics, '-' and '.', beginning and ending"
            " with an alphanumeric (CSI spec, GetPluginInfo): choose a provisioner name such as"
            f" {defaults.PROVISIONER_NAME}"
        )
    return name


DEFAULT_DRIVER_NAME = driver_name_for(defaults.PROVISIONER_NAME)
