"""local-path-storage: a local-path storage provisioner for Kubernetes."""
