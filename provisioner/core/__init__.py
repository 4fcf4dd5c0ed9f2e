"""The pure core: what the provisioner decides, with no I/O.

The config model, which claims and volumes are ours and what each needs now, path rendering and
safety, the PersistentVolume and helper pod for an action, budgets, capacity, expansion, orphans
and the node scripts. Nothing here imports the kubernetes client, `provisioner.kube` or
`provisioner.shell` (an import contract holds it), so every decision is testable as a function.
"""
