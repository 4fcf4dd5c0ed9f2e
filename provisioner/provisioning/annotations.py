"""The annotations and the finalizer this provisioner reads and writes on claims and PVs: the
names the external-provisioner library and rancher use, and those of our own."""

PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"

STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"

BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"

SELECTED_NODE = "volume.kubernetes.io/selected-node"

VOLUME_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"

NODE_ANNOTATION = "local-path-storage.io/node"

RANCHER_NODE_ANNOTATION = "local.path.provisioner/selected-node"

BASE_PATH_ANNOTATION = "local-path-storage.io/base-path"
"""On a claim: the base path chosen for it, so that every attempt (a retry, the next leader
after a crash) works in the same place and never leaves a directory on another one."""

DIRECTORY_REMOVED_ANNOTATION = "local-path-storage.io/directory-removed"
"""On a PV: its teardown removed the directory (set in the write that removes our finalizer).
A teardown redone after that (the PV's DELETE failed, or the process died before it) deletes
the PV without a helper pod: a pod would wait for a directory that is not there, or, should a
new volume's directory appear at the path meanwhile, start and remove it."""

RELEASED_FOR_NODE_LOSS_ANNOTATION = "local-path-storage.io/released-for-node-loss"
"""On a PV: the node it was on had been gone for its class's `nodeLossGracePeriod`, and the API
server carried out the DELETE of its claim (that claim's UID: its answer said so, or, the answer
lost, a fresh read showed the claim gone or going); the value is `node-name/claim-uid`
(`node_loss_release_mark`). Such a PV, once Released, is let go without a helper pod and its
data left on that node, even should the node come back (the orphan report lists it then). The
mark proves only the claim it names: a release whose DELETE was refused (a 403) or not carried
out (a 5xx, no answer) leaves no mark, and an older bare mark (the node's name alone, set
before the DELETE was sent) proves nothing, so that such a volume stays an ordinary Delete
volume, torn down when its node is there."""


def node_loss_release_mark(node_name: str, claim_uid: str) -> str:
    """The RELEASED_FOR_NODE_LOSS_ANNOTATION value for the claim of `claim_uid` deleted."""
    return f"{node_name}/{claim_uid}"
