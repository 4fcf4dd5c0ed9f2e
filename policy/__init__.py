"""The local-path-storage policy pack (Pulumi CrossGuard): guardrails in every preview and up.

The checks are pure functions on plain resource dicts (the camelCase inputs the Kubernetes
provider receives), one module per concern, unit-tested without an engine; `pack.py` wraps
them as Pulumi policies and `__main__.py` serves them when the engine runs
`pulumi preview --policy-pack policy`. Rules the runtime already has (config.json, the helper
template's allow-list) are the runtime's own: `provisioner.configuration.config` and
`provisioner.helper_pods.pod_shapes`.
"""
