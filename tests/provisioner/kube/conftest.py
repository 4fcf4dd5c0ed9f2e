"""Fixtures for the cluster tests of the kube shell, on top of the session `cluster` fixture
(tests/conftest.py): our own rate-limited clients, and a fresh namespace per test."""

from collections.abc import Iterator

import pytest

from localcluster import LocalCluster
from provisioner.kube.client import KubeClients, create_clients


@pytest.fixture
def clients(cluster: LocalCluster) -> Iterator[KubeClients]:
    created = create_clients(str(cluster.kubeconfig), qps=50, burst=100, environ={})
    yield created
    created.close()


@pytest.fixture
def namespace(cluster_namespace: str) -> str:
    return cluster_namespace
