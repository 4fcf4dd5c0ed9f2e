#!/usr/bin/env bash
# Builds the Pulumi engine from Go modules: the CLI, the Python language host (+ its exec shim)
# and the Kubernetes resource provider, at the versions pinned in versions.env (which must match
# the pip packages pulumi and pulumi-kubernetes). Called by scripts/build-go-tools.sh (target
# "pulumi"); a second run with the same versions builds nothing.
#
#   scripts/build-pulumi-engine.sh             build what is missing
#   scripts/build-pulumi-engine.sh --bin-dir   print the directory to put on PATH, build nothing
#   scripts/build-pulumi-engine.sh --smoke     build, then `pulumi preview` + `pulumi up` a tiny
#                                              Python program rendering a ConfigMap to YAML
#
# Result: $CACHE/bin/pulumi-$PULUMI_VERSION/ holds pulumi, pulumi-language-python,
# pulumi-language-python-exec and pulumi-resource-kubernetes (a link to
# $CACHE/bin/pulumi-resource-kubernetes-$PULUMI_KUBERNETES_VERSION). Put it on PATH: the engine
# then finds the language host and the provider as ambient plugins.
#
# Exit status: 0 built (or already there), 1 a build step failed, 3 the Go module proxy this
# machine reaches does not serve the engine's modules, so the engine cannot be built here.
#
# The release commits are found through the proxy (Origin of the sdk module's .info); where the
# proxy does not record them, set PULUMI_COMMIT / PULUMI_KUBERNETES_COMMIT (full hashes of the
# release tags) in versions.env or the environment.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null
source "$here/versions.env"
CACHE="${LPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-path-storage}"
BIN="$CACHE/bin"
WORK="$CACHE/build"
log_dir="$CACHE/logs"
export GOFLAGS="${GOFLAGS:--buildvcs=false}" GOTOOLCHAIN=local

PV="$PULUMI_VERSION"                        # v3.272.0
KV="$PULUMI_KUBERNETES_VERSION"             # v4.34.2
PMAJ="${PV%%.*}"; KMAJ="${KV%%.*}"          # v3, v4
PULUMI_REPO=github.com/pulumi/pulumi
K8S_REPO=github.com/pulumi/pulumi-kubernetes
SDK_MOD="$PULUMI_REPO/sdk/$PMAJ"
PKG_MOD="$PULUMI_REPO/pkg/$PMAJ"
PYHOST_MOD="$PULUMI_REPO/sdk/python/cmd/pulumi-language-python/$PMAJ"
KSDK_MOD="$K8S_REPO/sdk/$KMAJ"
KPROV_MOD="$K8S_REPO/provider/$KMAJ"
OUT="$BIN/pulumi-$PV"
PROVIDER_BIN="$BIN/pulumi-resource-kubernetes-$KV"

if [ "${1:-}" = "--bin-dir" ]; then echo "$OUT"; exit 0; fi

mkdir -p "$BIN" "$WORK" "$log_dir"
command -v go >/dev/null || { echo "build-pulumi-engine: the Go toolchain is missing: install Go >= 1.26 and put 'go' on PATH" >&2; exit 1; }
command -v python3 >/dev/null || { echo "build-pulumi-engine: python3 is needed to edit JSON files" >&2; exit 1; }

current_log=""
run() { # run <log name> <command...>: quiet unless it fails
  local log="$log_dir/$1.log"; shift
  if ! "$@" >>"$log" 2>&1; then
    echo "failed"
    echo "build-pulumi-engine: FAILED: $* (in $PWD)" >&2
    echo "build-pulumi-engine: full log: $log" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}
unavailable() { # unavailable <message>: the proxy will not give us a module; exit 3
  echo "unavailable"
  echo "build-pulumi-engine: $1" >&2
  echo "build-pulumi-engine: the Pulumi engine cannot be built from the Go module proxy this machine reaches (log: $log_dir/$current_log.log)" >&2
  exit 3
}
step() { printf '  building %-34s ' "$1"; }
started() { date +%s; }
done_in() { echo "done in $(( $(date +%s) - $1 ))s"; }
gob() { nice -n 10 go "$@"; }

# json_field <file> <python expression on d>: print a field of a JSON document ('' if absent)
json_field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); print(v if v is not None else "")' "$1" "$2" 2>/dev/null || true; }

# download <module@query>: `go mod download -json`; prints the JSON to $dl (a file) and returns
# non-zero if the proxy refused. Run from a scratch dir so no go.mod around us interferes.
dl="$WORK/.download.json"
download() {
  (cd "$WORK" && go mod download -json "$1") >"$dl" 2>>"$log_dir/$current_log.log" || true
  echo "go mod download -json $1:" >>"$log_dir/$current_log.log"; cat "$dl" >>"$log_dir/$current_log.log"
  [ -s "$dl" ] && [ -z "$(json_field "$dl" 'd.get("Error")')" ]
}

# resolve <module> <tag version> <commit>: print the version of <module> to require: the tag if
# the proxy serves it, else the pseudo-version the go command derives for <commit>.
resolve() {
  local mod="$1" tag="$2" commit="$3"
  if download "$mod@$tag"; then echo "$tag"; return 0; fi
  [ -n "$commit" ] || return 1
  download "$mod@$commit" || return 1
  json_field "$dl" 'd["Version"]'
}

# tag_commit <sibling module> <tag> <override>: the commit of a release tag: the override if set,
# else the Origin hash the proxy recorded for a module of the same repository at that tag.
tag_commit() {
  if [ -n "$3" ]; then echo "$3"; return 0; fi
  download "$1@$2" || return 0
  local info; info=$(json_field "$dl" 'd.get("Info")')
  [ -n "$info" ] && json_field "$info" '(d.get("Origin") or {}).get("Hash")'
}

# copy_replaces <go.mod of an upstream module> : re-declare its non-local replaces in ./go.mod
copy_replaces() {
  local r
  while read -r r; do [ -n "$r" ] && run "$current_log" go mod edit -replace "$r"; done < <(
    go mod edit -json "$1" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    new = r["New"]
    if not new.get("Version"):
        continue  # a local path in the upstream repository
    old = r["Old"]["Path"] + ("@" + r["Old"]["Version"] if r["Old"].get("Version") else "")
    print(old + "=" + new["Path"] + "@" + new["Version"])')
}

build_cli() {
  [ -x "$OUT/pulumi" ] && [ -x "$OUT/pulumi-language-python" ] && [ -f "$OUT/pulumi-language-python-exec" ] && return 0
  step "pulumi $PV (cli, python host)"; local t; t=$(started)
  current_log=pulumi-cli; : >"$log_dir/$current_log.log"
  local d="$WORK/pulumi-cli-$PV"; rm -rf "$d"; mkdir -p "$d"

  download "$SDK_MOD@$PV" || unavailable "$SDK_MOD@$PV is not served by the Go module proxy"
  local sdk_dir; sdk_dir=$(json_field "$dl" 'd["Dir"]')
  local commit; commit=$(tag_commit "$SDK_MOD" "$PV" "${PULUMI_COMMIT:-}")
  local pkg_v pyhost_v
  local why="(and the proxy records no commit for $SDK_MOD@$PV: set PULUMI_COMMIT to the commit of tag $PV)"
  [ -z "$commit" ] || why="(nor at the tag commit $commit)"
  pkg_v=$(resolve "$PKG_MOD" "$PV" "$commit") || unavailable "$PKG_MOD@$PV is not served by the Go module proxy $why"
  local pkg_gomod; pkg_gomod=$(json_field "$dl" 'd["GoMod"]')
  [ -n "$commit" ] || unavailable "no commit known for pulumi $PV (the proxy records none): set PULUMI_COMMIT to the commit of tag $PV"
  pyhost_v=$(resolve "$PYHOST_MOD" "$PV" "$commit") || unavailable "$PYHOST_MOD is not served by the Go module proxy at commit $commit"
  local pyhost_gomod; pyhost_gomod=$(json_field "$dl" 'd["GoMod"]')

  cd "$d"
  run "$current_log" go mod init lps.local/pulumi-cli-build
  # pkg and the python host replace sdk (and pkg) with ../ paths: pin both, for every version.
  run "$current_log" go mod edit -require "$PKG_MOD@$pkg_v" -require "$SDK_MOD@$PV" -require "$PYHOST_MOD@$pyhost_v" \
    -replace "$PKG_MOD=$PKG_MOD@$pkg_v" -replace "$SDK_MOD=$SDK_MOD@$PV" \
    -tool "$PKG_MOD/cmd/pulumi" -tool "$PYHOST_MOD"
  copy_replaces "$pkg_gomod"     # github.com/atotto/clipboard => github.com/tgummerer/clipboard
  copy_replaces "$pyhost_gomod"
  run "$current_log" gob mod tidy
  local ld="-s -w -X $SDK_MOD/go/common/version.Version=$PV"
  mkdir -p out
  run "$current_log" gob build -trimpath -ldflags "$ld" -o out/pulumi "$PKG_MOD/cmd/pulumi"
  run "$current_log" gob build -trimpath -ldflags "$ld" -o out/pulumi-language-python "$PYHOST_MOD"
  # The language host refuses to start without this shim next to it; it ships in the sdk module.
  install -m 0755 "$sdk_dir/python/cmd/pulumi-language-python-exec" out/pulumi-language-python-exec
  mkdir -p "$OUT"
  for f in pulumi-language-python-exec pulumi-language-python pulumi; do mv "out/$f" "$OUT/$f"; done
  done_in "$t"
}

build_provider() {
  [ -x "$PROVIDER_BIN" ] && return 0
  step "pulumi-kubernetes $KV (provider)"; local t; t=$(started)
  current_log=pulumi-kubernetes; : >"$log_dir/$current_log.log"
  local d="$WORK/pulumi-kubernetes-$KV"; rm -rf "$d"; mkdir -p "$d"

  download "$KSDK_MOD@$KV" || unavailable "$KSDK_MOD@$KV is not served by the Go module proxy"
  local commit; commit=$(tag_commit "$KSDK_MOD" "$KV" "${PULUMI_KUBERNETES_COMMIT:-}")
  # provider/vN has no tags of its own: require it at the release commit.
  [ -n "$commit" ] || unavailable "no commit known for pulumi-kubernetes $KV (the proxy records none): set PULUMI_KUBERNETES_COMMIT to the commit of tag $KV"
  download "$KPROV_MOD@$commit" || unavailable "$KPROV_MOD is not served by the Go module proxy at commit $commit"
  local prov_v prov_dir prov_gomod
  prov_v=$(json_field "$dl" 'd["Version"]'); prov_dir=$(json_field "$dl" 'd["Dir"]'); prov_gomod=$(json_field "$dl" 'd["GoMod"]')

  cd "$d"
  run "$current_log" go mod init lps.local/pulumi-kubernetes-build
  run "$current_log" go mod edit -require "$KPROV_MOD@$prov_v" -require "$KSDK_MOD@$KV" -replace "$KSDK_MOD=$KSDK_MOD@$KV"
  copy_replaces "$prov_gomod"
  # Upstream's main package embeds schema-embed.json and terraform-mapping-embed.json, generated
  # by its generate.go and absent from the module: rebuild that package here, generated files
  # included (go build -overlay does not apply to go:embed).
  local src="$prov_dir/provider/cmd/pulumi-resource-kubernetes" main="cmd/pulumi-resource-kubernetes"
  [ -d "$src" ] || src="$prov_dir/cmd/pulumi-resource-kubernetes"
  mkdir -p "$main"
  local f; for f in "$src"/*; do
    case "$(basename "$f")" in generate.go|*_test.go|schema-embed.json|terraform-mapping-embed.json) ;; *) install -m 0644 "$f" "$main/" ;; esac
  done
  run "$current_log" python3 - "$main" "${KV#v}" <<'EOF'
import json, os, sys
d, version = sys.argv[1], sys.argv[2]
schema = json.load(open(os.path.join(d, "schema.json")))
schema["version"] = version
json.dump(schema, open(os.path.join(d, "schema-embed.json"), "w"), separators=(",", ":"))
mapping = json.load(open(os.path.join(d, "terraform-mapping.json")))
json.dump(mapping, open(os.path.join(d, "terraform-mapping-embed.json"), "w"), separators=(",", ":"))
EOF
  run "$current_log" gob mod tidy
  mkdir -p out
  run "$current_log" gob build -trimpath -ldflags "-s -w -X $KPROV_MOD/pkg/version.Version=${KV#v}" -o out/pulumi-resource-kubernetes "./$main"
  mv out/pulumi-resource-kubernetes "$PROVIDER_BIN"
  done_in "$t"
}

link_provider() { ln -sfn "../$(basename "$PROVIDER_BIN")" "$OUT/pulumi-resource-kubernetes"; }

smoke() { # preview + up of a ConfigMap rendered to YAML, offline, with a private PULUMI_HOME
  local venv; venv=$("$here/scripts/bootstrap-venv.sh" | tail -n 1)
  local tmp; tmp=$(mktemp -d)
  mkdir -p "$tmp/home" "$tmp/state" "$tmp/prog"
  cat >"$tmp/prog/Pulumi.yaml" <<EOF
name: lps-smoke
runtime:
  name: python
  options:
    virtualenv: $venv
EOF
  cat >"$tmp/prog/__main__.py" <<EOF
import pulumi
import pulumi_kubernetes as k8s

p = k8s.Provider("render", render_yaml_to_directory="$tmp/rendered")
k8s.core.v1.ConfigMap("smoke", metadata={"name": "smoke"}, data={"k": "v"},
                      opts=pulumi.ResourceOptions(provider=p))
EOF
  (
    cd "$tmp/prog"
    export PATH="$OUT:$PATH" PULUMI_HOME="$tmp/home" PULUMI_SKIP_UPDATE_CHECK=true \
      PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true PULUMI_CONFIG_PASSPHRASE=x
    pulumi login "file://$tmp/state" && pulumi stack init smoke && pulumi preview && pulumi up --yes
  ) >"$log_dir/pulumi-smoke.log" 2>&1 || { echo "build-pulumi-engine: smoke test FAILED: log $log_dir/pulumi-smoke.log" >&2; tail -n 30 "$log_dir/pulumi-smoke.log" >&2; return 1; }
  find "$tmp/rendered" -name '*.yaml' | grep -q . || { echo "build-pulumi-engine: smoke test rendered no YAML" >&2; return 1; }
  rm -rf "$tmp"
  echo "  pulumi smoke test (preview + up, rendered YAML) ok"
}

# Each part in a subshell: when the proxy refuses one, still report whether the other is there.
status=0
(build_cli) || status=$?
[ "$status" = 1 ] && exit 1
(build_provider) || { s=$?; [ "$s" = 1 ] && exit 1; status=$s; }
[ "$status" = 0 ] || exit "$status"
link_provider
if [ "${1:-}" = "--smoke" ]; then smoke; fi
