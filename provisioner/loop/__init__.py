"""The loop: informers -> work queue -> workers -> retries, as sig-storage-lib's
ProvisionController is to the Provisioner it drives. Generic: it drives a `Reconciler` (what it
watches; reconcile a key -> settled, in background or failed) and a `Lifecycle`, both Protocols,
and imports only the client layer (an import contract holds it).
"""
