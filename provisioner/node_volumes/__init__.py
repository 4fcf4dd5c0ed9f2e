"""The node plugin's volume manager (`python -m provisioner.csi --manage-volumes`): makes and
removes this node's CSI volumes' directories without a helper pod.

It watches only the PVs labelled for its node (objects/node_handoff.py, the hand-off with the
controller), runs the same steps a helper pod's containers run (`volume_steps`, built by
helper_pods.pod_shapes.step_command) as processes (`step_runner`), one process per volume at a
time under a host-wide lock, with a record of what it did (`volume_state`, `volume_records`),
after checking the path against this node's base paths (`volume_checks`) and the gate's permit
against the PV (`volume_executor`); then marks the PV (`volume_watch`). `plugin` starts it.

Limits worth knowing: the setup and teardown code runs in the plugin's container, where every
base path of the node is writable (a helper pod's code sees only its volume's directory); the
guard still checks VOL_DIR before it runs. Records of volumes whose PV went while the plugin
was down stay behind (a few bytes each); those it sees deleted are dropped.
"""
