"""A token dimension is split only into whole 32-row tiles per device.

Tenstorrent tensors are laid out in 32x32 tiles. A sequence-parallel split whose shard is not
a whole number of tiles per device is sliced on device by ``ttnn.mesh_partition``, a TTNN
``slice`` that stops on a tilized tensor whose slice does not start and end on a tile
boundary: ``TT_FATAL "Can only slice tilized tensor with height begin index aligned to
tiles"`` (tt-metal ``slice_device_operation.cpp``). tt-xla PR 5309 hit it sharding the Wan 2.2
DiT's token dim over an 8-way sequence axis and padded the length to a multiple of SP*32;
tt-mlir PR 8867 has since kept ``mesh_partition`` row-major, so the slice passes and its
consumers re-tilize, padding a 16-row shard to a full 32-row tile: half the shard's work is
padding and nothing is saved over a 32-row shard (docs/costmodel.md 2.0: rows are priced in
whole tiles). Either way a sub-tile token split buys nothing the compiler runs.

- ``excludes``: the token dims of the model's inputs (``candidates.dim_class``: a token-id
  input's sequence, a float activation's second dim, a KV cache's positions) may be split
  only by factors that leave a multiple of 32 on each device: ``units`` = size // 32 (1: not
  at all, under 64 tokens or off a multiple of 32); ``site_excludes`` the same for the
  token dims of a constraint site (a reshape inside the model whose dim is indexed by
  token dims only: Falcon's fused QKV split into heads, [1, 128, 73, 64], may not take its
  128 tokens 8 ways).
- ``breaks``: the propagated module slices an activation's whole-tile row dim (a tensor's
  second-to-last, a multiple of 32) on device (an ``sdy.all_slice``: TTNN's
  ``mesh_partition``) into shards that are not whole tiles: 128 token rows into 16 per chip.
  A weight sliced on device (a replicated weight Shardy splits: const-eval, once at load) is
  not this rule's. A row dim that was not whole
  tiles to begin with (8 heads of a [.., heads, head_dim] tensor) and the column dim (the
  features, other rules' matter) are not this rule's.
"""

from shard_opt.rules import Rule

TILE = 32  # tt-metal tt_metal/api/tt-metalium/constants.hpp: TILE_HEIGHT = TILE_WIDTH = 32


def tile_units(size: int) -> int:
    """The split factors a dim of ``size`` may take and stay whole tiles: those dividing the
    returned count (size // 32 when size is a multiple of 32, else 1: no split)."""
    return size // TILE if size % TILE == 0 and size >= TILE else 1


def token_dims(arg) -> tuple[int, ...]:
    """The dims of a model argument that hold tokens (``candidates.dim_class``: the search's
    own reading of an argument's dims), which become an activation's tile rows."""
    from shard_opt.candidates import dim_class

    return tuple(d for d in range(len(arg.shape)) if dim_class(arg.kind, arg.shape, arg.dtype, d) == "token")


class TileAligned(Rule):
    def excludes(self, model, structure):
        out = {}
        for a in model.arguments:
            for d in token_dims(a):
                units = tile_units(a.shape[d])
                if units < a.shape[d]:
                    out[(a.index, d)] = units
        return out

    def site_excludes(self, shape, classes):
        return {d: tile_units(shape[d]) for d, cs in enumerate(classes)
                if d < len(shape) and cs and set(cs) == {"token"} and tile_units(shape[d]) < shape[d]}

    def breaks(self, walk) -> bool:
        return any(unaligned_slice(before, after) for before, after in walk.slices)


def unaligned_slice(before, after) -> bool:
    """Whether an on-device slice from local shape ``before`` to ``after`` cuts a row dim of
    whole 32-row tiles (the second-to-last) into shards that are not whole tiles."""
    if len(after) < 2 or len(before) != len(after):
        return False
    return after[-2] < before[-2] and before[-2] % TILE == 0 and after[-2] % TILE != 0


RULE = TileAligned(
    "tile-aligned", "a token dimension is split only into whole 32-row tiles per device", "tt_xla_5309", "exclude",
    "a sequence split must leave a multiple of 32 tokens on each device: a tile-unaligned on-device slice stops "
    "TTNN (\"Can only slice tilized tensor\"), and a padded sub-tile shard does the work of a whole tile (a "
    "propagated module that slices whole-tile rows into partial tiles is priced infinite)")
