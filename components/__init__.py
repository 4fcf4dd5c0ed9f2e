"""Pulumi components of local-path-storage: the provisioner deployment and its StorageClasses.

stack_config.py reads the stack's raw config; settings.py validates it into StackSettings
(each key declared once, read by stack_values.py; pure, engine-free), which holds the typed
arguments of args.py; deployment.py and storage_classes.py build the Kubernetes objects;
program.py wires them up.
"""
