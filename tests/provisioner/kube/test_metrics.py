from provisioner.kube.metrics import Metrics
from provisioner.loop.controller import WorkQueue


def test_each_metrics_object_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.provision_total.labels(**{"class": "local-path", "source": ""}).inc()
    assert (
        first.registry.get_sample_value(
            "controller_persistentvolumeclaim_provision_total",
            {"class": "local-path", "source": ""},
        )
        == 1
    )
    assert (
        second.registry.get_sample_value(
            "controller_persistentvolumeclaim_provision_total",
            {"class": "local-path", "source": ""},
        )
        is None
    )


def test_the_standard_names_are_exposed() -> None:
    metrics = Metrics()
    metrics.provision_failed_total.labels(**{"class": "c", "source": ""}).inc()
    metrics.provision_duration_seconds.labels(**{"class": "c", "source": ""}).observe(1.5)
    metrics.delete_total.labels(**{"class": "c"}).inc()
    metrics.delete_failed_total.labels(**{"class": "c"}).inc()
    metrics.delete_duration_seconds.labels(**{"class": "c"}).observe(0.5)
    metrics.observe_helper_pod("create", "succeeded", 2.0)
    metrics.config_reload_total.labels(result="success").inc()
    metrics.leader.labels(name="lease").set(1)
    text = metrics.exposition().decode()
    for name in (
        "controller_persistentvolumeclaim_provision_failed_total",
        "controller_persistentvolumeclaim_provision_duration_seconds_bucket",
        "controller_persistentvolume_delete_total",
        "controller_persistentvolume_delete_failed_total",
        "controller_persistentvolume_delete_duration_seconds_count",
        'local_path_helper_pod_duration_seconds_count{action="create",outcome="succeeded"}',
        'local_path_config_reload_total{result="success"}',
        'leader_election_master_status{name="lease"} 1.0',
    ):
        assert name in text


def test_work_queue_metrics() -> None:
    metrics = Metrics()
    queue = WorkQueue[str]("claims", metrics=metrics.queue_metrics("claims"))
    queue.add("a")
    queue.add("b")
    queue.add("a")
    queue.add_rate_limited("c")
    sample = metrics.registry.get_sample_value
    assert sample("workqueue_adds_total", {"name": "claims"}) == 2
    assert sample("workqueue_depth", {"name": "claims"}) == 2
    assert sample("workqueue_retries_total", {"name": "claims"}) == 1
