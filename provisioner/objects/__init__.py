"""The API objects as the provisioner reads them: the compact records informers keep (claims,
volumes, classes, nodes), the msgspec structs they are decoded into, and Kubernetes quantities.
Pure: every other wing reads these, none of them imports anything above.
"""
