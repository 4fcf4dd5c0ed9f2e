"""The Pulumi program of local-path-storage (see Pulumi.yaml and components/README.md)."""

from components.program import main

main()
