"""The shell: the loop that carries the core's decisions out.

The generic loop (`controller`: informers -> work queue -> workers -> retries) and the
local-path side it drives (`local_path_watches`: what it watches and which keys an event
queues; `local_path_provisioner`: the path book, the hand-overs to the helper batcher), the
actions that call the API and run helper pods, the process (`app`, options, logs, the probe and
metrics server), the config watch and the node scans. It imports `provisioner.core` for every
decision (all but the loop, which imports only `provisioner.kube`) and `provisioner.kube` for
the client layer; the core never imports it.
"""
