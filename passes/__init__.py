"""shard-opt's Python MLIR passes, one per file, named after the pass's CLI name.

The registry (``shard_opt.pass_manager``) imports them lazily by name; outside
packages add passes through the ``shard_opt.passes`` entry-point group.
"""
