"""A tensor's last dim crosses devices only in whole 32-wide tiles per device.

Tenstorrent activations are laid out in 32x32 tiles, so a tensor's last dim (its columns)
is stored in whole tiles: 25136 columns take 786 tiles, 16 of them padding. tt-mlir lowers a
gather of columns to a TTNN ``all_gather`` of the tiled pieces; for a GPT-OSS-20B-shaped LM
head split 8 ways on its vocabulary (201088 / 8 = 25136 per device) its own TTNN output
(jax-tt-plugin 0.1.3, checked 2026-12-05) is ``ttnn.all_gather`` of ``1x1x25136`` held as
``1x786`` tiles into ``1x1x201088`` held as ``1x6284`` tiles: 8 x 786 tiles gathered into
6284, the padding of every piece inside the result. tt-metal runs no such gather: its
all_gather tests (``tests/ttnn/unit_tests/operations/ccl/test_all_gather.py``,
``is_unsupported_case``) call a last-dim gather whose per-device size is not a multiple of
32 an "Unsupported test case"; its slice, the scatter's other half, stops on the same
condition (``slice_device_operation.cpp``: TT_FATAL "Can only slice tilized tensor with
width begin index aligned to tiles"). tt-mlir's partitioned program computes the right
answer (the numerics check runs it on CPU); what the device does with it is not covered
by any check here.

GPT-OSS-20B's LM head is the case in the record: tt-xla issue 3484 ("GPT-OSS-20B Hang
during lm_head sharding"), and the tt-forge-models 20B loader keeps ``lm_head`` replicated
since. That issue's configuration (2x4, the vocab split 4 ways: 50272 per device, whole
tiles) is not this rule's: the issue names no cause, and this rule does not claim to be
it. What the rule claims is the tile condition above, for every model.

- ``breaks``: the propagated module gathers (``sdy.all_gather``) or slices on device
  (``sdy.all_slice``) an activation's last dim in pieces that are not whole 32-wide tiles
  (a vocab-split LM head's logits gathered from 25136-wide pieces; Falcon-7B's 4544
  hidden features gathered from 568-wide pieces). A weight (sliced once at load, row-major
  until its layout op) is not this rule's.
"""

from shard_opt.rules import Rule
from shard_opt.rules.tile_aligned import TILE


class TileColumns(Rule):
    def breaks(self, walk) -> bool:
        return (any(unaligned_columns(whole, piece) for whole, piece in walk.slices)
                or any(unaligned_columns(whole, piece) for piece, whole in walk.gathers))


def unaligned_columns(whole, piece) -> bool:
    """Whether a last dim of local size ``whole[-1]`` crosses devices in pieces of ``piece[-1]``
    that are not whole 32-wide tiles."""
    if not piece or len(whole) != len(piece):
        return False
    return piece[-1] < whole[-1] and piece[-1] % TILE != 0


RULE = TileColumns(
    "tile-columns", "a tensor's last dim crosses devices only in whole 32-wide tiles per device", "tt_metal_tile_width",
    "inf",
    "a gather or on-device slice of an activation's last dim in pieces that are not whole 32-wide tiles (a "
    "vocab-split LM head's logits, 201088 / 8 = 25136 per device) is a TTNN all_gather tt-metal does not support "
    "(its pieces' tile padding lands inside the result) or a slice TTNN stops on; priced infinite. GPT-OSS-20B's "
    "vocab-split lm_head hangs (tt-xla issue 3484)")
