"""Pulumi components of local-path-storage: the provisioner deployment and its StorageClasses.

settings.py turns stack config into the typed arguments of args.py (pure, engine-free);
deployment.py and storage_classes.py build the Kubernetes objects; program.py wires them up.
"""
