"""The plugin of local-path-storage's Pulumi package (docs/pulumi-package.md): the Python
language host runs this file to serve the LocalPathStorage component, for
`pulumi package add <repository>/pulumi-package` and `pulumi package get-schema`."""

from components.pulumi_package import host_provider

if __name__ == "__main__":
    host_provider()
