"""A provisioned volume gets a directory of its own, never one that already holds someone's data.

Why: a Retain volume's directory outlives its PV. With a pathPattern such as
`{{ .PVC.Namespace }}/{{ .PVC.Name }}`, a new claim of the same namespace and name (a namespace
deleted and recreated by another team) renders the same path; a setup that accepts an existing
directory (`mkdir || [ -d ]`, a hostPath `DirectoryOrCreate`) hands it the old team's data.

The rule, applied by the fixed `prepare` step (pod_shapes.PREPARE_SCRIPT) before any setup code
runs, so that it holds for a custom setup script or setupCommand as well: the volume's own directory
is made with one `mkdir`, which fails when anything is there (atomic: no check that passes and
then finds someone else's directory in its place). When it is there, it is used only if

- it is this volume's own earlier attempt (a provisioner that died after the setup, before the
  PV was saved): its owner marker names this volume, or
- the class opts in with `reuseExistingData: "true"` (to give a recreated StatefulSet claim its
  data back), or
- it is empty and no marker names another volume (nothing to hand over; also covers a `prepare`
  that died between its `mkdir` and its marker).

Otherwise the step fails, naming the path, and the claim gets a Warning event with it.

Where the marker lives, and why there: the marker is a file in `<base>/OWNERS_DIR`, named by
the SHA-256 of the volume's path and holding the volume's (the PV's) name, with MARKER_REUSED_SUFFIX
after it when `prepare` found the directory and reused it. Not in the volume:
its tenant controls everything in it, so an old tenant could leave a marker that names a
future claim; and a file in a fresh volume breaks programs that want an empty directory
(initdb, mysqld --initialize). The owners directory is written only by the fixed `prepare` and
`finish` steps, which have the base path read-write; setup and teardown code sees the base path
read-only, and no volume can be the owners directory (paths.check_volume_path refuses the name).
Even a forged marker would have to name this volume, `pvc-<claim UID>`, a UID the API server
draws when the claim is made: no earlier tenant of the directory can know it in advance.

A volume directly in its base path whose folder carries the volume's name (rancher's default
`<pvName>_<namespace>_<claim>`, or `{{ .PVName }}`) skips `prepare`, as before: the kubelet makes
that directory, and one that already exists can only be this claim's own, since its name
holds the claim's UID.
"""

from __future__ import annotations

import hashlib

OWNERS_DIR = ".local-path-storage-owners"
"""In every base path: one marker per volume directory a `prepare` made (see the docstring)."""
MARKER_REUSED_SUFFIX = " reused"
"""After the volume's name in its marker: `prepare` found the directory and reused it (data a
class with reuseExistingData hands over, or an empty directory); a marker holding the name
alone says the volume made it. The previous version, which reads the whole marker as the
volume's name, sees a reused marker as another volume's: it refuses to remove the directory or
to hand it out again, never the reverse. A marker it wrote (the name alone) reads here as
made, also for a directory it reused; a give-back of a reuseExistingData class is refused on
the API side whatever the marker says (removal_gate)."""
COPIED_SUFFIX = ".copied"
"""After a marker's name: the file that says a CSI clone's copy into the directory is whole
(node_volumes.clone_copy), holding the volume's name; `finish` removes it with the marker."""
REUSE_PARAMETER = "reuseExistingData"
"""The StorageClass parameter (a boolean, default false) that hands an existing directory,
with its data, to a new claim whose path renders to it."""


# Part of PREPARE_SCRIPT, after its parents are made: $fresh is "yes" when its `mkdir` made
# VOL_DIR, empty when VOL_DIR was there already (a plain directory, no symbolic link). The marker
# says whether this volume made the directory (MARKER_REUSED_SUFFIX when it was found and
# reused); a retry keeps what the first attempt wrote.
CLAIM_DIRECTORY = f"""\
owners="$LPS_BASE/{OWNERS_DIR}"
if [ -L "$owners" ]; then refuse "$owners is a symbolic link"; fi
marker="$owners/$(printf '%s' "$VOL_DIR" | sha256sum | cut -d ' ' -f 1)"
origin="$LPS_VOLUME"
if [ -z "$fresh" ]; then
  owner="$(cat "$marker" 2>/dev/null)" || owner=""
  if [ "$owner" = "$LPS_VOLUME" ] || [ "$owner" = "$LPS_VOLUME{MARKER_REUSED_SUFFIX}" ]; then
    origin="$owner"
    echo "$VOL_DIR: made by an earlier attempt for this volume; using it"
  elif [ "${{LPS_REUSE_EXISTING_DATA:-}}" = true ]; then
    origin="$LPS_VOLUME{MARKER_REUSED_SUFFIX}"
    echo "$VOL_DIR: already exists; the class sets {REUSE_PARAMETER}, so its data is reused"
  elif [ -z "$owner" ] && [ -z "$(ls -A "$VOL_DIR")" ]; then
    origin="$LPS_VOLUME{MARKER_REUSED_SUFFIX}"
    echo "$VOL_DIR: already exists, empty; using it"
  else
    refuse "it already exists with data this claim did not write (a retained volume of an\\
 earlier claim?): move or remove it, or set the StorageClass parameter {REUSE_PARAMETER}:\\
 \\"true\\" to hand it to a new claim whose path renders to it"
  fi
fi
if [ ! -d "$owners" ]; then
  mkdir "$owners" 2>/dev/null || [ -d "$owners" ] || refuse "cannot create $owners"
fi
printf '%s\\n' "$origin" > "$marker.$LPS_VOLUME"
mv -f "$marker.$LPS_VOLUME" "$marker"
"""
# Every removal's last check on the node, just before anything is removed (the proof that
# travels with the pod, see removal_gate.OwnerCheck): the marker in $owners_root (the base path
# as the script sees it) must name LPS_REMOVAL_OWNER (with LPS_REMOVAL_MADE_ONLY, as the volume
# that made the directory), or be absent with LPS_REMOVAL_ABSENT_OK. Anything else, a marker of
# another volume above all, is refused and nothing is removed.
OWNER_CHECK = f"""\
if [ -L "$owners_root/{OWNERS_DIR}" ]; then refuse "$LPS_BASE/{OWNERS_DIR} is a symbolic link"; fi
marker="$owners_root/{OWNERS_DIR}/$(printf '%s' "$VOL_DIR" | sha256sum | cut -d ' ' -f 1)"
owner="$(cat "$marker" 2>/dev/null)" || owner=""
case "$owner" in
  "") [ -n "${{LPS_REMOVAL_ABSENT_OK:-}}" ] || \\
      refuse "no owner marker says $LPS_REMOVAL_OWNER made it; left as it is" ;;
  "$LPS_REMOVAL_OWNER") ;;
  "$LPS_REMOVAL_OWNER{MARKER_REUSED_SUFFIX}") [ -z "${{LPS_REMOVAL_MADE_ONLY:-}}" ] || \\
      refuse "$LPS_REMOVAL_OWNER did not make it, it found and reused it; left as it is" ;;
  *) refuse "its owner marker names $owner, not $LPS_REMOVAL_OWNER; left as it is" ;;
esac
"""
# Part of FINISH_SCRIPT, once VOL_DIR is gone: its marker goes with it.
FORGET_DIRECTORY = f"""\
marker="$LPS_BASE/{OWNERS_DIR}/$(printf '%s' "$VOL_DIR" | sha256sum | cut -d ' ' -f 1)"
if [ ! -L "$LPS_BASE/{OWNERS_DIR}" ]; then rm -f "$marker" "$marker{COPIED_SUFFIX}"; fi
"""


def owner_marker_path(base_path: str, volume_path: str) -> str:
    """Where `prepare` keeps the owner marker of the directory `volume_path` (the scripts'
    `$marker`: the SHA-256 of the path, in the base path's OWNERS_DIR)."""
    digest = hashlib.sha256(volume_path.encode()).hexdigest()
    return f"{base_path}/{OWNERS_DIR}/{digest}"
