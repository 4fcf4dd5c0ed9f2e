"""The path book as the other parts read it, each through a narrow view of its own: the PV
names the volume informer holds (what the claim decisions check a new volume's name against),
the helper pods' last look before a pod is built (`RunChecks`), and the CSIStorageCapacity set
the capacity publisher draws from it (`CapacitySource`). Each reads the book under its lock;
none leads back into the provisioner that holds the book."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from provisioner.capacity.storage_capacity import CapacityObject, desired_capacities
from provisioner.configuration.config_watch import ConfigSource
from provisioner.kube.informer import Informer
from provisioner.objects.records import VolumeRecord
from provisioner.provisioning.caches import Caches
from provisioner.provisioning.paths import PathBook


class InformerVolumeNames:
    """The PV names the volume informer holds, as a collection the pure core can test."""

    def __init__(self, informer: Informer[VolumeRecord]) -> None:
        self._informer = informer

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._informer.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._informer.keys())

    def __len__(self) -> int:
        return len(self._informer)


class BookRunChecks:
    """The path book behind its lock, as the helper pods ask it for its last look before a
    pod is built (`pods.RunChecks`)."""

    def __init__(self, book: PathBook, lock: threading.Lock) -> None:
        self._book = book
        self._lock = lock

    def helper_run_problem(self, volume_name: str, *, teardown: bool) -> str | None:
        with self._lock:
            return self._book.helper_run_problem(volume_name, teardown=teardown)


class BookCapacities:
    """The CSIStorageCapacity set for the current config, nodes, classes and book, as the
    capacity publisher reads it on its thread (`CapacitySource`)."""

    def __init__(
        self,
        config: ConfigSource,
        caches: Caches,
        book: PathBook,
        lock: threading.Lock,
        *,
        provisioner_name: str,
    ) -> None:
        self._config = config
        self._caches = caches
        self._book = book
        self._lock = lock
        self._provisioner_name = provisioner_name

    def desired(self, driver_wants_capacity: bool) -> dict[str, CapacityObject]:
        with self._lock:
            entries = self._book.entries()
        return desired_capacities(
            self._config.current.config,
            [record for _, record in self._caches.classes.items()],
            dict(self._caches.nodes.items()),
            entries,
            provisioner_name=self._provisioner_name,
            driver_wants_capacity=driver_wants_capacity,
        )
