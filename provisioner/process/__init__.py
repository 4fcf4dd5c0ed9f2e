"""The process: the only place that builds and wires the wings (`app`), the probe and metrics
server, logging, the takeover of a predecessor's installation (`predecessors`: which pods block,
pure; `predecessor_watch`: waiting for them and watching while leading) and the removal of an
installation.
"""
