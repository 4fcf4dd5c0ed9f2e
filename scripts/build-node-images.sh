#!/usr/bin/env bash
# Builds the images a real node needs besides the provisioner's, from Debian packages only
# (nothing may be pulled from outside this machine), as OCI layouts in the cache:
#   pause    registry.k8s.io/pause:3.10 (containerd's pinned sandbox image): a static `pause`
#            of a few lines, like kubernetes' build/pause/linux/pause.c
#   busybox  docker.io/library/busybox:1.37.0 (the default helperImage): Debian's
#            busybox-static (really busybox 1.35), one link per applet, an /etc/passwd
#   coreutils  busybox with Debian's GNU cp (coreutils) in /usr/bin, first on PATH, and dash
#            as sh: a helper image that can clone volumes (the clone step needs GNU cp, as the
#            README tells users), without a distribution's whole root
# The cache key covers this script and the packages' versions, so a second run builds nothing.
# Prints the cache directory on stdout (OCI layouts `pause` and `busybox`, tag `latest`) (progress on stderr). Needs scripts/install-node-packages.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${LPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-path-storage}"
versions=$(dpkg-query -W -f '${Package}=${Version} ' busybox-static coreutils dash gcc libc6-dev umoci)
key=$({ cat "$here/scripts/build-node-images.sh"; echo "$versions"; } | sha256sum | cut -c1-16)
out="$CACHE/node-images-$key"
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
echo "build-node-images: building pause, busybox and coreutils images from Debian packages" >&2
mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/node-images-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
# pause: exits on INT/TERM, reaps the children of the pod's shared PID namespace
cat > pause.c <<'C'
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void sigdown(int s) { (void)s; _exit(0); }
static void sigreap(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0); }
int main(void) {
  struct sigaction down = {0}; down.sa_handler = sigdown;
  sigaction(SIGINT, &down, NULL); sigaction(SIGTERM, &down, NULL);
  struct sigaction reap = {0}; reap.sa_handler = sigreap; reap.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &reap, NULL);
  for (;;) pause();
  return 1;
}
C
gcc -static -Os -s -o pause pause.c
# new_image LAYOUT: an empty image `LAYOUT:latest` unpacked rootless into LAYOUT-bundle
new_image() {
  umoci init --layout "$1" >/dev/null
  umoci new --image "$1:latest"
  umoci unpack --rootless --image "$1:latest" "$1-bundle" >/dev/null
}
new_image pause-oci
cp pause pause-oci-bundle/rootfs/pause
umoci repack --image pause-oci:latest pause-oci-bundle
umoci config --image pause-oci:latest --config.entrypoint /pause --config.user 65535:65535 --config.workingdir /
new_image busybox-oci
root=busybox-oci-bundle/rootfs
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root" "$root/var" "$root/home"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
umoci repack --image busybox-oci:latest busybox-oci-bundle
umoci config --image busybox-oci:latest --config.cmd sh \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
new_image coreutils-oci
cp -a busybox-oci-bundle/rootfs/. coreutils-oci-bundle/rootfs/
root=coreutils-oci-bundle/rootfs
# install_binary FROM TO: a host binary into the image, with its shared libraries and loader
# at the paths ldd names
install_binary() {
  mkdir -p "$root$(dirname "$2")"; rm -f "$root$2"; cp "$1" "$root$2"
  for library in $(ldd "$1" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$library")"; cp -L "$library" "$root$library"
  done
}
install_binary /usr/bin/cp /usr/bin/cp
# Debian's busybox sh runs its own applets before anything on PATH: dash as sh, so that `cp`
# is GNU cp (the other commands stay busybox's, through their links)
install_binary /bin/dash /bin/sh
umoci repack --image coreutils-oci:latest coreutils-oci-bundle
umoci config --image coreutils-oci:latest --config.cmd sh \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# umoci config leaves the superseded manifests behind: keep only the final one
umoci gc --layout pause-oci; umoci gc --layout busybox-oci; umoci gc --layout coreutils-oci
mkdir result; mv pause-oci result/pause; mv busybox-oci result/busybox
mv coreutils-oci result/coreutils
rm -rf "$out"; mv result "$out"; touch "$out/.complete"
echo "build-node-images: done ($out)" >&2
echo "$out"
