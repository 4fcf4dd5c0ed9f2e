"""The CSI driver name, derived from the provisioner name.

A provisioner name is `domain/name` (`local-path-storage.io/local-path`); a CSI driver name
may not hold a '/', must be at most 63 characters of alphanumerics, '-' and '.', beginning and
ending with an alphanumeric, and should be a domain name (spec: GetPluginInfo); it is also the
name of the cluster's CSIDriver object, so it must be a DNS subdomain (lowercase). Turning
`domain/name` into `name.domain` (`local-path.local-path-storage.io`) keeps it under the
project's domain, as the community's drivers do (`hostpath.csi.k8s.io`), and lets each
installation's provisioner name give its own driver name.
"""

from __future__ import annotations

from provisioner.configuration import defaults

# The house's one DNS-subdomain rule, the one class parameters are checked with.
from provisioner.configuration.class_parameters import _DNS_SUBDOMAIN as DNS_SUBDOMAIN

MAX_LENGTH = 63


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
    if not DNS_SUBDOMAIN.fullmatch(name):
        raise DriverNameError(
            f"CSI driver name {name!r} must be a DNS subdomain: lowercase alphanumerics, '-'"
            " and '.', each dot-separated part beginning and ending with an alphanumeric (the"
            " CSI spec and the CSIDriver object's name): choose a provisioner name such as"
            f" {defaults.PROVISIONER_NAME}"
        )
    return name


DEFAULT_DRIVER_NAME = driver_name_for(defaults.PROVISIONER_NAME)
