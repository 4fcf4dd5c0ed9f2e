#!/usr/bin/env bash
# Installs (once) the Debian packages a real node of the local cluster needs, in one place:
#   runc                          the OCI runtime containerd's shim runs
#   containernetworking-plugins   bridge + host-local: each node's private pod network
#   docker-registry               the local registry the nodes pull every image from
#   skopeo, umoci                 pack the busybox and pause images, push images to the registry
#   busybox-static                the busybox image's one binary (the default helperImage)
#   gcc, libc6-dev                a static `pause` for the pause image
#   iptables                      the kubelet looks for it at start, even with no chains to make
#   bubblewrap                    the CSI node plugin runs each volume step confined (bwrap); the
#                                 plugin runs in the node's mount namespace, so it is the node's
#   btrfs-progs                   mkfs.btrfs for the nodes' btrfs disks, and the `btrfs` tool the
#                                 tests check the plugin's own btrfs ioctls against
# apt-get runs only when something is missing, so a second run prints one line and returns.
set -euo pipefail
packages=(runc containernetworking-plugins docker-registry skopeo umoci busybox-static gcc libc6-dev iptables bubblewrap btrfs-progs)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-node-packages: all ${#packages[@]} node packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-node-packages: missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "install-node-packages: installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# --no-install-recommends: docker-registry recommends nothing we run, and the rest pull in extras
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-node-packages: done"
