"""The CSI node plugin: Identity and Node services (CSI spec v1.x over gRPC, unix socket),
registered with the kubelet by the plugin itself (registration_server.py says why no sidecar),
with a /healthz for a liveness probe (liveness.py).

It bind-mounts a local volume's directory where the kubelet asks, and reports its usage and
condition (`NodeGetVolumeStats`). It never trusts a request's volume handle as a path: the
directory comes from the volume context and must lie strictly inside one of this node's base
paths (config.json), walked without following symlinks.

The messages are generated from the spec's csi.proto (and the kubelet's plugin registration
api.proto, of k8s.io/kubelet at our kubelet's release) into `generated/` and committed, rather
than generated at build time or at venv bootstrap: the image build installs wheels only (no
protoc in it), mypy needs the stubs to type-check every caller, and a committed file is what a
reader and a reviewer see. The files carry a header saying how to regenerate them
(`python -m scripts.generate_csi_proto`), and a test fails when they differ from a fresh
generation with the pinned spec and grpcio-tools. The spec is pinned at v1.12.0, the newest
that still carries `VolumeCondition` in `NodeGetVolumeStats`: the kubelet (v1.36, built against
spec v1.9.0) reads a volume's health only from there; v1.13.0 removed it.

Layout: pure decisions (`node_paths`, `mount_table`, `volume_condition`, `node_requests`,
`driver_name`, `options`) beside thin I/O (`mounts`, `volume_usage`), the services
(`identity_server`, `node_server`, `registration_server`), their gRPC binding (`services`),
the liveness check (`liveness`) and the process (`server`, `__main__`).

With `--manage-volumes`, `__main__` also starts provisioner.node_volumes, which holds the
Kubernetes client this package does without: it makes and removes the node's CSI volumes'
directories, and NodePublishVolume asks it for the setup (node_server.VolumeSetups) first.
"""
