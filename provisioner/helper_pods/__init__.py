"""Helper pods end to end: the pods that make, copy, resize and remove volume directories on a
node. Their shapes (one volume's steps, batch pods, the clone and resize steps: pure), the
planner and outcomes of batch pods (pure), and the I/O that runs them (`pod_runner`, `pod_runs`,
`pod_batcher`, the pod index and events). A step that removes or empties a directory is built
only from a permit of the removal gate (`provisioning.removal_gate`).
"""
