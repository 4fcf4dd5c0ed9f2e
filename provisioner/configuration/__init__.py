"""What the operator configures: the one config model (config.json, the scripts, helperPod.yaml)
that the runtime, the Pulumi components and the policy pack all parse, the command-line options
and their defaults; and `config_watch`, which follows the mounted ConfigMap and keeps the last
good config in force when a new one is refused. Everything but `config_watch` is pure.
"""
