"""shard-opt: find the fastest sharding of a model across a mesh of Tenstorrent chips."""

__version__ = "0.1.0"
