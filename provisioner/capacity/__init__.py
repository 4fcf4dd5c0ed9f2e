"""Capacity: what each base path may still hold (budgets), the CSIStorageCapacity objects the
scheduler reads (pure) and their publisher, and the project quotas that enforce a volume's size
on the node where the filesystem can.
"""
