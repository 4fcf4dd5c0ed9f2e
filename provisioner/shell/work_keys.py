"""The work queue's keys: what the loop (`controller`) queues and the local-path side
(`local_path_provisioner`) wakes, apart from both so neither imports the other for them."""

CLAIM = "claim"
VOLUME = "volume"
HELPER_POD = "helper-pod"
Key = tuple[str, str]
"""(CLAIM, claim uid), (VOLUME, volume name) or (HELPER_POD, its informer key)."""
