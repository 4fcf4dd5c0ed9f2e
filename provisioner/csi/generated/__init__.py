"""CSI messages generated from the spec's csi.proto: never edit; regenerate with
`python -m scripts.generate_csi_proto` (see that script and provisioner/csi/__init__.py)."""
