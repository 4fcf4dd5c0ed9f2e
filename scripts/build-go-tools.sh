#!/usr/bin/env bash
# Builds the Go tooling the tests, demo and benchmark need, from Go modules, into a cache
# outside the repository keyed by version: a second run with the same versions builds nothing.
#
#   scripts/build-go-tools.sh [cluster|reference|all]...
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

build_kubernetes() {
  local v="$KUBERNETES_VERSION"
  have "kube-apiserver-$v" && have "kube-controller-manager-$v" && have "kube-scheduler-$v" && return 0
  step "kubernetes $v (3 binaries)"; local t; t=$(started)
  local d="$WORK/kubernetes-$v"; rm -rf "$d"; mkdir -p "$d"; cd "$d"; : >"$log_dir/kubernetes.log"
  local staging_version="v0.${v#v1.}"
  run kubernetes go mod init lps.local/kubernetes-build
  # k/k requires its staging modules at v0.0.0 with ./staging replaces; point each at its
  # published release instead (see docs in shared/guide/test-infra.md).
  local proxy; proxy=$(go env GOPROXY); proxy="${proxy%%,*}"
  [ "$proxy" = direct ] || [ "$proxy" = off ] && proxy=https://proxy.golang.org
  local mods; mods=$(curl -fsSL "$proxy/k8s.io/kubernetes/@v/$v.mod" | awk '/=> .\/staging/{print $1}')
  [ -n "$mods" ] || { echo "build-go-tools: could not read the staging module list of k8s.io/kubernetes $v" >&2; exit 1; }
  local m; for m in $mods; do run kubernetes go mod edit -replace "$m=$m@$staging_version"; done
  run kubernetes go mod edit -require "k8s.io/kubernetes@$v"
  for m in kube-apiserver kube-controller-manager kube-scheduler; do
    run kubernetes go get -tool "k8s.io/kubernetes/cmd/$m@$v"
  done
  local minor="${v#v1.}"; minor="${minor%%.*}"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p out
  run kubernetes go build -trimpath -ldflags "$ld" -o out/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
  for m in kube-apiserver kube-controller-manager kube-scheduler; do mv "out/$m" "$BIN/$m-$v"; done
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


targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(cluster)
for target in "${targets[@]}"; do
  case "$target" in
    cluster) build_etcd; build_kwok; build_kubernetes ;;
    reference) build_reference ;;
    all) build_etcd; build_kwok; build_kubernetes; build_reference ;;
    *) echo "build-go-tools: unknown target '$target' (cluster|reference|all)" >&2; exit 2 ;;
  esac
done
