"""Sharding value types: a device mesh and per-tensor shardings.

Small frozen, hashable values that print in Shardy's syntax and parse back from it.
Syntax checked against openxla/shardy `docs/sharding_representation.md` and what
jaxlib 0.10.2 prints after propagation, e.g.::

    sdy.mesh @mesh = <["batch"=2, "model"=4]>
    #sdy.sharding<@mesh, [{"model"}, {}]>
    %9 = sdy.all_reduce {"model"} %8 out_sharding=<@mesh, [{"batch"}, {}]> : tensor<128x64xf32>

Sub-axes (``"model":(1)2``) can appear in shardings Shardy propagates; they are
parsed and their size is honoured when computing local shapes.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from shard_opt.errors import UserError

DEFAULT_AXIS_NAMES = ("batch", "model")  # tt-xla's names (references/tenstorrent.md section 1)

# tt-mlir `SupportedMeshes` (include/ttmlir/Dialect/StableHLO/Utils/ShardingUtils.h),
# references/tenstorrent.md section 1. 1-D meshes are normalised to (1, N).
TT_MLIR_SUPPORTED_MESHES = (
    (1, 1), (1, 2), (1, 4), (1, 8), (1, 16), (1, 32), (1, 64), (2, 2), (2, 4), (2, 8),
    (4, 4), (4, 8), (4, 16), (4, 32), (8, 4), (8, 8), (8, 16),
)


@dataclass(frozen=True)
class Mesh:
    """A logical device mesh: axis names and sizes, major to minor.

    >>> Mesh.parse("2x4")
    Mesh(shape=(2, 4), axes=('batch', 'model'))
    >>> str(Mesh.parse("2x4"))
    'sdy.mesh @mesh = <["batch"=2, "model"=4]>'
    """

    shape: tuple[int, ...]
    axes: tuple[str, ...] = DEFAULT_AXIS_NAMES
    name: str = "mesh"

    def __post_init__(self):
        if len(self.shape) != len(self.axes):
            raise UserError(
                f"mesh {self.spec} has {len(self.shape)} dims but {len(self.axes)} axis names "
                f"({','.join(self.axes)}); give one name per dim with --axis-names"
            )

    @staticmethod
    def parse(spec: str, axes: tuple[str, ...] | None = None) -> "Mesh":
        """Parse ``RxC`` (or ``N``, normalised to ``1xN``)."""
        text = spec.strip().lower()
        if not re.fullmatch(r"\d+(x\d+)*", text):
            raise UserError(f"--mesh {spec!r}: expected RxC such as 2x4 (or N for 1xN)")
        shape = tuple(int(p) for p in text.split("x"))
        if any(s < 1 for s in shape):
            raise UserError(f"--mesh {spec!r}: every mesh dim must be at least 1")
        if len(shape) == 1:
            shape = (1, shape[0])
        if len(shape) > 2 and axes is None:
            raise UserError(f"--mesh {spec!r}: a mesh with {len(shape)} dims needs --axis-names")
        return Mesh(shape, tuple(axes) if axes else DEFAULT_AXIS_NAMES[: len(shape)])

    @property
    def spec(self) -> str:
        return "x".join(str(s) for s in self.shape)

    @property
    def num_devices(self) -> int:
        return math.prod(self.shape)

    def axis_size(self, axis: str) -> int:
        # called per axis of every sharding a search prices: index the tuples, build no dict
        try:
            return self.shape[self.axes.index(axis)]
        except ValueError:
            raise KeyError(axis) from None

    def check_supported(self) -> None:
        """Raise a UserError unless tt-mlir accepts this mesh shape."""
        if tuple(self.shape) not in TT_MLIR_SUPPORTED_MESHES:
            shapes = " ".join(f"{r}x{c}" for r, c in TT_MLIR_SUPPORTED_MESHES)
            raise UserError(
                f"mesh {self.spec} is not one tt-mlir accepts (tt-mlir issue 4668, "
                f"'Mesh is not valid'); choose one of: {shapes} (tt-mlir's SupportedMeshes, "
                f"include/ttmlir/Dialect/StableHLO/Utils/ShardingUtils.h)"
            )

    def __str__(self) -> str:
        axes = ", ".join(f'"{a}"={s}' for a, s in zip(self.axes, self.shape))
        return f"sdy.mesh @{self.name} = <[{axes}]>"


_SUBAXIS = re.compile(r'"([^"]+)"(?::\((\d+)\)(\d+))?')


@dataclass(frozen=True)
class AxisRef:
    """A mesh axis, or a sub-axis ``"x":(pre)size`` of one."""

    name: str
    pre: int = 1
    size: int | None = None  # None: the full axis

    def length(self, mesh: Mesh) -> int:
        return self.size if self.size is not None else mesh.axis_size(self.name)

    def __str__(self) -> str:
        if self.size is None:
            return f'"{self.name}"'
        return f'"{self.name}":({self.pre}){self.size}'


def parse_axis_refs(text: str) -> list[AxisRef]:
    """Every axis or sub-axis named in ``text``, in order: ``{"model":(2)2}`` -> [model:(2)2]."""
    return [AxisRef(n, int(pre), int(size)) if size else AxisRef(n) for n, pre, size in _SUBAXIS.findall(text)]


@dataclass(frozen=True)
class TensorSharding:
    """Per-dimension mesh axes of one tensor; ``()`` is a replicated dim.

    ``dims[i]`` lists the axes dim ``i`` is split on, major to minor. Dims are closed
    (``{"model"}``) unless ``open_dims`` says otherwise (``{"model", ?}``).

    >>> s = TensorSharding.of([["model"], []])
    >>> s.to_attr()
    '#sdy.sharding<@mesh, [{"model"}, {}]>'
    >>> s.local_shape((256, 64), Mesh((2, 4)))
    (64, 64)
    """

    dims: tuple[tuple[AxisRef, ...], ...]
    mesh_name: str = "mesh"
    open_dims: frozenset[int] = frozenset()

    @staticmethod
    def of(dims, mesh_name: str = "mesh") -> "TensorSharding":
        """Build from plain lists of axis names, e.g. ``[["model"], []]``."""
        return TensorSharding(
            tuple(tuple(a if isinstance(a, AxisRef) else AxisRef(a) for a in d) for d in dims),
            mesh_name,
        )

    @staticmethod
    def replicated(rank: int, mesh_name: str = "mesh") -> "TensorSharding":
        return TensorSharding(tuple(() for _ in range(rank)), mesh_name)

    @staticmethod
    @functools.lru_cache(maxsize=65536)
    def parse(text: str) -> "TensorSharding":
        """Parse ``#sdy.sharding<@mesh, [...]>`` or the ``<@mesh, [...]>`` body Shardy prints.

        Cached: a search parses the same few hundred sharding strings over and over.
        """
        m = re.search(r"<\s*@([\w.$-]+)\s*,\s*\[(.*?)\]\s*(?:,[^>]*)?>", text)
        if not m:
            raise ValueError(f"not an sdy tensor sharding: {text}")
        mesh_name, body = m.group(1), m.group(2)
        dims, open_dims = [], set()
        for i, dim in enumerate(re.findall(r"\{([^}]*)\}", body)):
            if "?" in dim:
                open_dims.add(i)
            dims.append(tuple(parse_axis_refs(dim)))
        return TensorSharding(tuple(dims), mesh_name, frozenset(open_dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_replicated(self) -> bool:
        return all(not d for d in self.dims)

    def axis_names(self) -> list[list[str]]:
        """The plan-JSON form: per dim, the axis names (sub-axes by their full axis)."""
        return [[a.name for a in d] for d in self.dims]

    def split_factor(self, dim: int, mesh: Mesh) -> int:
        return math.prod(a.length(mesh) for a in self.dims[dim])

    def local_shape(self, shape, mesh: Mesh) -> tuple[int, ...]:
        """Per-device shape (ceil division, as Shardy pads a non-divisible dim)."""
        if len(shape) != self.rank:
            return tuple(shape)  # rank mismatch: treat as replicated
        return tuple(-(-s // self.split_factor(i, mesh)) for i, s in enumerate(shape))

    def body(self) -> str:
        """``<@mesh, [{"model"}, {}]>``: the attribute's body (candidate keys are made of them)."""
        return _body(self)

    def partition_spec(self) -> tuple:
        """The PyTorch / JAX partition spec: per dim None (whole), an axis name, or a tuple of them.

        >>> TensorSharding.of([["batch", "model"], []]).partition_spec()
        (('batch', 'model'), None)
        """
        return tuple(None if not d else d[0].name if len(d) == 1 else tuple(a.name for a in d) for d in self.dims)

    def spec_text(self) -> str:
        """The partition spec as Python source: ``("model", None)`` (a 1-tuple keeps its comma).

        >>> TensorSharding.of([["model"]]).spec_text()
        '("model",)'
        """
        parts = ["None" if x is None else "(" + ", ".join(f'"{a}"' for a in x) + ")" if isinstance(x, tuple)
                 else f'"{x}"' for x in self.partition_spec()]
        return "(" + parts[0] + ",)" if len(parts) == 1 else "(" + ", ".join(parts) + ")"

    def dims_text(self) -> str:
        """The dims as Shardy writes them, axis names only: ``[{"model"}, {}]``."""
        return "[" + ", ".join("{" + ", ".join(f'"{a.name}"' for a in d) + "}" for d in self.dims) + "]"

    def to_attr(self) -> str:
        return _to_attr(self)

    def __str__(self) -> str:
        return self.to_attr()


@functools.lru_cache(maxsize=65536)
def _body(s: TensorSharding) -> str:
    # once per sharding: a search writes and keys the same few hundred on every candidate
    parts = []
    for i, d in enumerate(s.dims):
        axes = [str(a) for a in d]
        if i in s.open_dims:
            axes.append("?")
        parts.append("{" + ", ".join(axes) + "}")
    return f"<@{s.mesh_name}, [{', '.join(parts)}]>"


@functools.lru_cache(maxsize=65536)
def _to_attr(s: TensorSharding) -> str:
    return f"#sdy.sharding{_body(s)}"
