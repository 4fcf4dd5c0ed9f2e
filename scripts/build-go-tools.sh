#!/usr/bin/env bash
# Builds the Go tooling the tests, demo and benchmark need, from Go modules, into a cache
# outside the repository keyed by version: a second run with the same versions builds nothing.
#
#   scripts/build-go-tools.sh [cluster|node|reference|csi-sanity|snapshot-controller|all]...
#
# node: what a real node runs beside the cluster (kubelet, containerd); its Debian packages come
# from scripts/install-node-packages.sh.
#
# Prints one progress line per tool; on failure prints the failing command and the path of
# its full log, and exits non-zero.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null
source "$here/versions.env"
CACHE="${LPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-path-storage}"
BIN="$CACHE/bin"
WORK="$CACHE/build"
mkdir -p "$BIN" "$WORK"
export GOFLAGS="${GOFLAGS:--buildvcs=false}" GOTOOLCHAIN=local
command -v go >/dev/null || { echo "build-go-tools: the Go toolchain is missing: install Go >= 1.26 and put 'go' on PATH" >&2; exit 1; }

log_dir="$CACHE/logs"; mkdir -p "$log_dir"
run() { # run <log name> <command...>: quiet unless it fails
  local log="$log_dir/$1.log"; shift
  if ! "$@" >>"$log" 2>&1; then
    echo "build-go-tools: FAILED: $* (in $PWD)" >&2
    echo "build-go-tools: full log: $log" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}
have() { [ -x "$BIN/$1" ]; }
step() { printf '  building %-34s ' "$1"; }
started() { date +%s; }
done_in() { echo "done in $(( $(date +%s) - $1 ))s"; }

build_etcd() {
  local out="etcd-$ETCD_VERSION"; have "$out" && return 0
  step "etcd $ETCD_VERSION"; local t; t=$(started)
  local d="$WORK/etcd-$ETCD_VERSION"; rm -rf "$d"; mkdir -p "$d"; cd "$d"; : >"$log_dir/etcd.log"
  run etcd go mod init lps.local/etcd-build
  run etcd go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  run etcd go build -trimpath -ldflags "-s -w" -o "$BIN/$out.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/$out.tmp" "$BIN/$out"; done_in "$t"
}

# kubernetes_wrapper DIR LOG: a throw-away module in DIR that requires k8s.io/kubernetes at the
# pinned version. k/k requires its staging modules at v0.0.0 with ./staging replaces; point each
# at its published release instead (see docs in shared/guide/test-infra.md).
kubernetes_wrapper() {
  local d="$1" log="$2" v="$KUBERNETES_VERSION"
  rm -rf "$d"; mkdir -p "$d"; cd "$d"; : >"$log_dir/$log.log"
  local staging_version="v0.${v#v1.}"
  run "$log" go mod init lps.local/kubernetes-build
  local proxy; proxy=$(go env GOPROXY); proxy="${proxy%%,*}"
  [ "$proxy" = direct ] || [ "$proxy" = off ] && proxy=https://proxy.golang.org
  local mods; mods=$(curl -fsSL "$proxy/k8s.io/kubernetes/@v/$v.mod" | awk '/=> .\/staging/{print $1}')
  [ -n "$mods" ] || { echo "build-go-tools: could not read the staging module list of k8s.io/kubernetes $v" >&2; exit 1; }
  local m; for m in $mods; do run "$log" go mod edit -replace "$m=$m@$staging_version"; done
  run "$log" go mod edit -require "k8s.io/kubernetes@$v"
}

# kubernetes_build LOG CMD...: `go build` the commands of the wrapper in $PWD, versions stamped,
# into $BIN as CMD-<version>.
kubernetes_build() {
  local log="$1"; shift
  local v="$KUBERNETES_VERSION" m pkgs=()
  for m in "$@"; do run "$log" go get -tool "k8s.io/kubernetes/cmd/$m@$v"; pkgs+=("k8s.io/kubernetes/cmd/$m"); done
  local minor="${v#v1.}"; minor="${minor%%.*}"
  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p out
  run "$log" go build -trimpath -ldflags "$ld" -o out/ "${pkgs[@]}"
  for m in "$@"; do mv "out/$m" "$BIN/$m-$v"; done
}

build_kubernetes() {
  local v="$KUBERNETES_VERSION"
  have "kube-apiserver-$v" && have "kube-controller-manager-$v" && have "kube-scheduler-$v" && return 0
  step "kubernetes $v (3 binaries)"; local t; t=$(started)
  kubernetes_wrapper "$WORK/kubernetes-$v" kubernetes
  kubernetes_build kubernetes kube-apiserver kube-controller-manager kube-scheduler
  done_in "$t"
}

# The real nodes' kubelet: the same wrapper as the control plane, in a directory of its own so
# the two groups can be built independently (the Go build cache is shared, so a warm control
# plane build makes this one quick).
build_kubelet() {
  local v="$KUBERNETES_VERSION"
  have "kubelet-$v" && return 0
  step "kubelet $v"; local t; t=$(started)
  kubernetes_wrapper "$WORK/kubelet-$v" kubelet
  kubernetes_build kubelet kubelet
  done_in "$t"
}

# containerd, ctr and the runc shim from the module proxy. The graph drivers this machine has
# no libraries for are left out by tags; the shim is static (CGO off), as upstream ships it,
# since it outlives containerd restarts and must not depend on the host's libc.
build_containerd() {
  local v="$CONTAINERD_VERSION" module=github.com/containerd/containerd/v2
  have "containerd-$v" && have "ctr-$v" && have "containerd-shim-runc-v2-$v" && return 0
  step "containerd $v (3 binaries)"; local t; t=$(started)
  local d="$WORK/containerd-$v"; rm -rf "$d"; mkdir -p "$d"; cd "$d"; : >"$log_dir/containerd.log"
  run containerd go mod init lps.local/containerd-build
  run containerd go get "$module@$v"
  run containerd go get -tool "$module/cmd/containerd@$v" "$module/cmd/ctr@$v" "$module/cmd/containerd-shim-runc-v2@$v"
  local ld="-s -w -X $module/version.Version=$v"
  mkdir -p out
  run containerd go build -trimpath -tags "no_btrfs no_devmapper no_zfs no_aufs" -ldflags "$ld" -o out/ \
    "$module/cmd/containerd" "$module/cmd/ctr"
  run containerd env CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ld" -o out/ \
    "$module/cmd/containerd-shim-runc-v2"
  local b; for b in containerd ctr containerd-shim-runc-v2; do mv "out/$b" "$BIN/$b-$v"; done
  done_in "$t"
}

build_kwok() {
  local out="kwok-$KWOK_VERSION"; have "$out" && return 0
  step "kwok $KWOK_VERSION"; local t; t=$(started)
  : >"$log_dir/kwok.log"
  run kwok env GOBIN="$WORK/kwok-gobin" go install -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$WORK/kwok-gobin/kwok" "$BIN/$out"; done_in "$t"
}

build_reference() {
  local v="$RANCHER_LOCAL_PATH_VERSION" out="local-path-provisioner-$RANCHER_LOCAL_PATH_VERSION"
  have "$out" && return 0
  step "rancher local-path-provisioner $v"; local t; t=$(started)
  : >"$log_dir/reference.log"
  # `go install pkg@version` asks the checksum database about the module's dependencies, which
  # this workplace's proxy answers with 404; building inside the module verifies every
  # dependency against the module's own go.sum instead.
  local module=github.com/rancher/local-path-provisioner src
  src=$(GONOSUMDB="$module" go mod download -json "$module@$v" 2>>"$log_dir/reference.log" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { echo "build-go-tools: could not download $module@$v (log: $log_dir/reference.log)" >&2; exit 1; }
  local d="$WORK/reference-$v"; rm -rf "$d"; cp -r "$src" "$d"; chmod -R u+w "$d"; cd "$d"
  run reference go build -trimpath -ldflags "-s -w" -o "$BIN/$out.tmp" .
  mv "$BIN/$out.tmp" "$BIN/$out"; done_in "$t"
}

# csi-sanity, the CSI community's conformance suite, run against our node plugin by the tests.
# Built inside its own module like the reference, for the same reason: its go.sum verifies the
# dependencies, not the checksum database.
build_csi_sanity() {
  local v="$CSI_TEST_VERSION" out="csi-sanity-$CSI_TEST_VERSION"
  have "$out" && return 0
  step "csi-sanity $v"; local t; t=$(started)
  : >"$log_dir/csi-sanity.log"
  local module=github.com/kubernetes-csi/csi-test/v5 src
  src=$(GONOSUMDB="$module" go mod download -json "$module@$v" 2>>"$log_dir/csi-sanity.log" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { echo "build-go-tools: could not download $module@$v (log: $log_dir/csi-sanity.log)" >&2; exit 1; }
  local d="$WORK/csi-sanity-$v"; rm -rf "$d"; cp -r "$src" "$d"; chmod -R u+w "$d"; cd "$d"
  run csi-sanity go build -trimpath -ldflags "-s -w -X main.VERSION=$v" -o "$BIN/$out.tmp" ./cmd/csi-sanity
  mv "$BIN/$out.tmp" "$BIN/$out"; done_in "$t"
}

# module_dir LOG MODULE@VERSION: the directory of a downloaded module (read-only, in the module
# cache). Its own go.sum is not consulted here; the checksum database verifies the zip.
module_dir() {
  local log="$1" dir
  dir=$(go mod download -json "$2" 2>>"$log_dir/$log.log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { echo "build-go-tools: could not download $2 (log: $log_dir/$log.log)" >&2; exit 1; }
  echo "$dir"
}

# The common snapshot controller (external-snapshotter) and the CRDs it serves. Upstream's go.mod
# replaces its client module by ./client, which neither `go install` nor the module zip can
# follow; a throw-away wrapper module ignores a dependency's replaces, so it pins the client
# module at its published tag instead. The CRDs are copied beside the binary, in a directory
# keyed by the same versions, so the cluster finds both without the module cache.
build_snapshot_controller() {
  local v="$EXTERNAL_SNAPSHOTTER_VERSION" cv="$EXTERNAL_SNAPSHOTTER_CLIENT_VERSION" gv="$GATEWAY_API_VERSION"
  local out="snapshot-controller-$v" crds="$CACHE/crds/snapshot-$cv-gateway-$gv"
  local module=github.com/kubernetes-csi/external-snapshotter/v8
  local client=github.com/kubernetes-csi/external-snapshotter/client/v8
  have "$out" && [ -f "$crds/complete" ] && return 0
  step "snapshot-controller $v"; local t; t=$(started)
  local d="$WORK/snapshot-controller-$v"; rm -rf "$d"; mkdir -p "$d"; cd "$d"; : >"$log_dir/snapshot-controller.log"
  if ! have "$out"; then
    run snapshot-controller go mod init lps.local/snapshot-controller-build
    run snapshot-controller go get -tool "$module/cmd/snapshot-controller@$v"
    run snapshot-controller go get "$client@$cv"
    run snapshot-controller go build -trimpath -ldflags "-s -w -X main.version=$v" -o "$BIN/$out.tmp" "$module/cmd/snapshot-controller"
    mv "$BIN/$out.tmp" "$BIN/$out"
  fi
  local cdir gdir; cdir=$(module_dir snapshot-controller "$client@$cv"); gdir=$(module_dir snapshot-controller "sigs.k8s.io/gateway-api@$gv")
  rm -rf "$crds"; mkdir -p "$crds"
  local k; for k in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
    cp "$cdir/config/crd/snapshot.storage.k8s.io_$k.yaml" "$crds/"
  done
  cp "$gdir/config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml" "$crds/"
  chmod u+w "$crds"/*.yaml; : >"$crds/complete"
  done_in "$t"
}

targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(cluster)
for target in "${targets[@]}"; do
  case "$target" in
    cluster) build_etcd; build_kwok; build_kubernetes ;;
    node) build_kubelet; build_containerd ;;
    reference) build_reference ;;
    csi-sanity) build_csi_sanity ;;
    snapshot-controller) build_snapshot_controller ;;
    all) build_etcd; build_kwok; build_kubernetes; build_kubelet; build_containerd; build_reference; build_csi_sanity; build_snapshot_controller ;;
    *) echo "build-go-tools: unknown target '$target' (cluster|node|reference|csi-sanity|snapshot-controller|all)" >&2; exit 2 ;;
  esac
done
