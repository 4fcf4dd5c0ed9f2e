"""The shell: the loop that carries the core's decisions out.

The controller (informers -> work queue -> workers -> retries) and the local-path provisioner it
drives (the path book, the hand-overs to the helper pods), the actions that call the API, the
helper pods behind one object (`pods`), the process (`app`, options, logs, the probe and
metrics server), the config watch and the node scans. It imports `provisioner.core` for every
decision and `provisioner.kube` for the client layer; the core never imports it.
"""
