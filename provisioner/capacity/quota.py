"""Hard size limits where the filesystem can enforce them: XFS or ext4 project quotas.

Never assumed: the helper looks at the filesystem holding the volume (its type and mount
options in /proc/self/mountinfo, prjquota or pquota) and asks `xfs_quota` whether project quota
enforcement is on; only then does it mark the volume's directory tree as a project and set a
hard block limit of the claim's size. Anywhere else there is no quota and nothing fails: the
provisioner measures usage instead (see `usage`).

Setting a quota takes CAP_SYS_ADMIN and the filesystem's device: the helper template must grant
them (which needs --allow-unsafe-helper-template). On a filesystem with enforcement on, a
quota that cannot be set fails the setup with the reason: an admin who turned project quotas on
expects them enforced, and a volume without its limit would say otherwise.

Project IDs are unique per filesystem: a hash of the volume name into ~2^31 values collides
(2% odds at 10k volumes, 44% at 50k) and colliding volumes would share one hard limit. The
hash is only the first candidate; the setup takes the first one of `PROJECT_ID_PROBES` in a
row that `xfs_quota report` shows unused (no blocks, no limits), under a lock on the base
path (flock on its directory) so two setups there cannot both find the same one free. The ID
is recorded where the resize finds it and no API object must carry it: on the directory
itself (its project ID, read back with `project -c`). The resize accepts only an ID in the
volume's own run of candidates: a root tenant able to change its directory's project ID can
point the resize at nothing else than IDs a collision could have given it.

`LPS_MOUNTINFO` (default /proc/self/mountinfo) may be set in the helper template's env: the
tests point it at a recorded mount table, as no kernel here has quota support.
"""

from __future__ import annotations

import hashlib

PROJECT_ID_MIN = 1 << 20
"""Below: left to the admin's own /etc/projects."""
PROJECT_ID_SPAN = (1 << 31) - PROJECT_ID_MIN
PROJECT_ID_PROBES = 1000
"""Candidates tried after the hashed one: at 50k volumes on one filesystem a run of even ten
used IDs in a row is vanishingly rare; a full run fails the setup with the reason."""


def project_id_for(volume_name: str) -> int:
    """The volume's first candidate project ID: its run of candidates starts here."""
    digest = int(hashlib.sha256(volume_name.encode()).hexdigest()[:8], 16)
    return PROJECT_ID_MIN + digest % PROJECT_ID_SPAN


# Run with VOL_DIR bind-mounted at its own path (a mount point xfs_quota accepts), LPS_SIZE the
# limit in bytes, LPS_PROJECT_ID (the first candidate) and LPS_PROJECT_ID_PROBES, LPS_BASE_VIEW
# (the base path's directory, the lock), and LPS_QUOTA_MODE "set" (pick a free ID, mark the
# tree and limit it) or "resize" (the limit of the ID the directory carries). Says
# `quota PROJECT BYTES` or `no-quota WHY` on its output and in LPS_RESULT (when set: the
# helper's termination-message file).
QUOTA_SCRIPT = """\
set -u
mountinfo="${LPS_MOUNTINFO:-/proc/self/mountinfo}"
# The mount holding VOL_DIR: the longest mount point equal to it or a whole-component prefix
# of it (the last such line when mounts are stacked). The mount table writes a space, tab, line
# break or backslash in a mount point as an octal escape; awk reads the path from its
# environment, as `awk -v` would read a backslash in it as an escape.
fs="$(awk '
  BEGIN {
    dir = ENVIRON["VOL_DIR"]
    code["040"] = " "; code["011"] = "\\t"; code["012"] = "\\n"; code["134"] = "\\\\"
  }
  function unescaped(text,   out, octal) {
    out = ""
    while (match(text, /\\\\[0-7][0-7][0-7]/)) {
      octal = substr(text, RSTART + 1, 3)
      out = out substr(text, 1, RSTART - 1) (octal in code ? code[octal] : substr(text, RSTART, 4))
      text = substr(text, RSTART + 4)
    }
    return out text
  }
  { mp = unescaped($5)
    if (mp == "/" || dir == mp || index(dir, mp "/") == 1) {
      if (length(mp) >= best) {
        best = length(mp)
        for (i = 7; i <= NF; i++) if ($i == "-") break
        found = $(i + 1) " " $(i + 3)
      }
    }
  }
  END { print found }' "$mountinfo" 2>/dev/null)"
fstype="${fs%% *}"
options=",${fs#* },"
report() { echo "$1"; if [ -n "${LPS_RESULT:-}" ]; then echo "$1" > "$LPS_RESULT"; fi; }
no_quota() { report "no-quota $1"; exit 0; }
case "$fstype" in
  xfs) foreign="" ;;
  ext4) foreign="-f" ;;
  *) no_quota "${fstype:-an unknown filesystem} has no project quotas" ;;
esac
case "$options" in
  *,prjquota,*|*,pquota,*) ;;
  *) no_quota "$fstype is mounted without prjquota" ;;
esac
command -v xfs_quota >/dev/null 2>&1 || no_quota "the helper image has no xfs_quota"
state="$(xfs_quota -x $foreign -c "state -p" "$VOL_DIR" 2>&1)" || no_quota "xfs_quota state: $state"
case "$state" in
  *"Enforcement: ON"*) ;;
  *) no_quota "project quota enforcement is off on $fstype" ;;
esac
# xfs_quota splits its commands at blanks and reads quotes and backslashes in them (and so
# does dash's echo: printf says the path as it is).
case "$VOL_DIR" in
  *[[:space:]\\\\\\"\\']*)
    printf 'cannot set a project quota on %s: it has a blank, quote or backslash\\n' \\
      "$VOL_DIR" >&2
    exit 1 ;;
esac
failed() {
  echo "project quotas are enforced on $fstype but $1 on $VOL_DIR failed: $2;" \\
    "the helper needs CAP_SYS_ADMIN and the device (see docs/configure.md, Usage and quotas)" >&2
  exit 1
}
refuse_id() { echo "no project quota for $VOL_DIR: $1" >&2; exit 1; }
first="$LPS_PROJECT_ID"
last=$((first + LPS_PROJECT_ID_PROBES - 1))
# The project ID the directory carries: checked against ID 0, `project -c` names it (a
# mismatch), or says nothing but its summary when it is 0.
check="$(xfs_quota -x $foreign -c "project -c -d 0 -p $VOL_DIR 0" "$VOL_DIR" 2>&1)"
case "$check" in
  *"$VOL_DIR - project identifier is not set (inode="*)
    carried="${check##*"$VOL_DIR - project identifier is not set (inode="}"
    carried="${carried%%,*}" ;;
  *Processed*) carried=0 ;;
  *) failed "reading the project ID" "$check" ;;
esac
case "$carried" in ""|*[!0-9]*) failed "reading the project ID" "$check" ;; esac
ours=no
if [ "$carried" -ge "$first" ] && [ "$carried" -le "$last" ]; then ours=yes; fi
if [ "${LPS_QUOTA_MODE:-set}" = set ]; then
  # One setup at a time per base path picks and marks: the lock is the base path's directory.
  command -v flock >/dev/null 2>&1 || refuse_id "the helper image has no flock"
  exec 9<"${LPS_BASE_VIEW:-$VOL_DIR}"
  flock -x 9 || refuse_id "cannot lock ${LPS_BASE_VIEW:-$VOL_DIR}"
  if [ "$ours" = yes ]; then
    id="$carried"  # an earlier attempt of this setup marked it
  else
    listing="$(xfs_quota -x $foreign -c "report -p -n -N" "$VOL_DIR" 2>&1)" ||
      failed "listing the project IDs in use" "$listing"
    used="$(printf '%s\n' "$listing" |
      awk '/^#[0-9]/ && ($2 != 0 || $3 != 0 || $4 != 0) { print substr($1, 2) }')"
    id="$first"
    while printf '%s\n' "$used" | grep -qx "$id"; do
      [ "$id" -lt "$last" ] || refuse_id "project IDs $first to $last are all in use"
      id=$((id + 1))
    done
  fi
  out="$(xfs_quota -x $foreign -c "project -s -p $VOL_DIR $id" \\
    -c "limit -p bhard=$LPS_SIZE $id" "$VOL_DIR" 2>&1)"
else
  [ "$carried" -ne 0 ] || no_quota "$VOL_DIR carries no project ID (set up without a quota)"
  [ "$ours" = yes ] || refuse_id "it carries project ID $carried, not one of this volume's \\
($first to $last): someone changed it on the node; set it back with xfs_quota project -s"
  id="$carried"
  out="$(xfs_quota -x $foreign -c "limit -p bhard=$LPS_SIZE $id" "$VOL_DIR" 2>&1)"
fi
status=$?
# Older xfs_quota versions say what failed but exit 0. Their messages are read without the
# volume's path, which is the tenant's to name ("mirror", "cannot-lose").
said="$(printf '%s\n' "$out" | awk '
  BEGIN { dir = ENVIRON["VOL_DIR"] }
  { line = $0; rest = ""
    while ((i = index(line, dir)) > 0) {
      rest = rest substr(line, 1, i - 1); line = substr(line, i + length(dir))
    }
    print rest line }')"
case "$said" in *[Cc]annot*|*"not permitted"*|*rror*) status=1 ;; esac
[ "$status" -eq 0 ] || failed "setting one" "$out"
report "quota $id $LPS_SIZE"
"""


def quota_environment(volume_name: str, size_bytes: int) -> dict[str, str]:
    """What the setup's guard needs to set the quota after a successful setup."""
    return {
        "LPS_QUOTA_SCRIPT": QUOTA_SCRIPT,
        "LPS_QUOTA_MODE": "set",
        "LPS_PROJECT_ID": str(project_id_for(volume_name)),
        "LPS_PROJECT_ID_PROBES": str(PROJECT_ID_PROBES),
        "LPS_SIZE": str(size_bytes),
    }
