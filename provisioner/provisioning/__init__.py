"""Provisioning: what a claim or volume of ours calls for and carrying it out. The pure rules
(`claims` and the PV that answers one, the path book and its budgets in `paths`,
`fresh_directory`, `clones`, `expansion`, `base_path_checks`, and `removal_gate`, the one gate
every removal of a directory passes) beside their I/O (`local_path_provisioner`, which the loop
drives one key at a time; `actions`, the API writes; `removals`, which gathers a removal's proof
when it decides).
"""
