"""Scans of what is on the nodes: orphan directories no volume owns (listed by a read-only helper
pod, removed only through the removal gate), usage measured where there is no quota, the
leader's periodic node scan and the `orphans` command.
"""
