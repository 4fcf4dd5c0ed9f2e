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

`LPS_MOUNTINFO` (default /proc/self/mountinfo) may be set in the helper template's env: the
tests point it at a recorded mount table, as no kernel here has quota support.
"""

from __future__ import annotations

import hashlib

PROJECT_ID_MIN = 1 << 20
"""Below: left to the admin's own /etc/projects."""
PROJECT_ID_SPAN = (1 << 31) - PROJECT_ID_MIN


def project_id_for(volume_name: str) -> int:
    """The volume's project id: deterministic, so a retried setup or a resize finds it again."""
    digest = int(hashlib.sha256(volume_name.encode()).hexdigest()[:8], 16)
    return PROJECT_ID_MIN + digest % PROJECT_ID_SPAN


# Run with VOL_DIR bind-mounted at its own path (a mount point xfs_quota accepts), LPS_SIZE the
# limit in bytes, LPS_PROJECT_ID, and LPS_QUOTA_MODE "set" (mark the tree and limit it) or
# "resize" (the limit only). Says `quota PROJECT BYTES` or `no-quota WHY` on its output and in
# LPS_RESULT (when set: the helper's termination-message file).
QUOTA_SCRIPT = """\
set -u
mountinfo="${LPS_MOUNTINFO:-/proc/self/mountinfo}"
fs="$(awk -v dir="$VOL_DIR" '
  { mp = $5; gsub(/\\\\040/, " ", mp)
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
case "$VOL_DIR" in
  *[[:space:]\\"\\']*) echo "cannot set a project quota on $VOL_DIR: it has a blank or quote" >&2
    exit 1 ;;
esac
if [ "${LPS_QUOTA_MODE:-set}" = set ]; then
  out="$(xfs_quota -x $foreign -c "project -s -p $VOL_DIR $LPS_PROJECT_ID" \\
    -c "limit -p bhard=$LPS_SIZE $LPS_PROJECT_ID" "$VOL_DIR" 2>&1)"
else
  out="$(xfs_quota -x $foreign -c "limit -p bhard=$LPS_SIZE $LPS_PROJECT_ID" "$VOL_DIR" 2>&1)"
fi
status=$?
# Older xfs_quota versions say what failed but exit 0.
case "$out" in *[Cc]annot*|*"not permitted"*|*rror*) status=1 ;; esac
if [ "$status" -ne 0 ]; then
  echo "project quotas are enforced on $fstype but setting one on $VOL_DIR failed: $out;" \\
    "the helper needs CAP_SYS_ADMIN and the device (see Usage and quotas in the README)" >&2
  exit 1
fi
report "quota $LPS_PROJECT_ID $LPS_SIZE"
"""


def quota_environment(volume_name: str, size_bytes: int) -> dict[str, str]:
    """What the setup's guard needs to set the quota after a successful setup."""
    return {
        "LPS_QUOTA_SCRIPT": QUOTA_SCRIPT,
        "LPS_QUOTA_MODE": "set",
        "LPS_PROJECT_ID": str(project_id_for(volume_name)),
        "LPS_SIZE": str(size_bytes),
    }
