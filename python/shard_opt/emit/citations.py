"""Sources a report may cite: key -> (short title, precise reference).

Every entry restates a fact from the project's reference notes
(``shared/references/anchors.md`` and ``tenstorrent.md``); nothing here is new. The
``EVIDENCE`` table names, per key, a phrase the notes contain, so a test can check
that each citation is still backed by them.

Use ``Citer`` to number citations in order of first use and print the sources table::

    >>> c = Citer()
    >>> c.cite("megatron")
    '[1]'
    >>> c.cite("megatron", "tt_xla_llama")
    '[1][2]'
"""

from __future__ import annotations

CITATIONS: dict[str, tuple[str, str]] = {
    # Reference schemes (anchors.md, "Reference schemes").
    "megatron": (
        "Megatron-LM (Shoeybi et al. 2019)",
        "arXiv 1909.08053, section 3, figures 3-4: MLP column-parallel then row-parallel; "
        "attention split by heads, output projection row-parallel; two all-reduces in the "
        "forward path per transformer layer",
    ),
    "sequence_parallel": (
        "Sequence parallelism (Korthikanti et al. 2022)",
        "arXiv 2205.05198, section 4.2.2, figures 5-6: the all-reduce becomes all-gather + "
        "reduce-scatter at equal bandwidth; activation memory per layer falls",
    ),
    "zero": (
        "ZeRO (Rajbhandari et al. 2019)",
        "arXiv 1910.02054, section 5 (memory per stage) and section 7 (communication: "
        "stage 3 = 1.5x data parallel)",
    ),
    "shardy": (
        "Shardy (openxla/shardy)",
        "propagates user shardings by priority; sdy-insert-explicit-reshards + "
        "sdy-reshard-to-collectives make the collectives explicit",
    ),
    # Tenstorrent stack (tenstorrent.md).
    "tt_xla_llama": (
        "tt-xla Llama tensor-parallel example",
        "tenstorrent/tt-xla examples/pytorch/llama.py: q/k/v/gate/up (\"model\", None), "
        "o/down (None, \"model\"), KV cache (None, \"model\", None, None)",
    ),
    "torch_xla_spmd": (
        "tt-xla PyTorch SPMD set-up",
        "CONVERT_SHLO_TO_SHARDY=1, xr.use_spmd(), Mesh(np.arange(N), shape, (\"batch\", "
        "\"model\")), xs.mark_sharding(tensor, mesh, spec), torch.compile(model, backend=\"tt\") "
        "(tt-xla examples/pytorch/llama.py; torch_xla.distributed.spmd)",
    ),
    "tt_torch_constraint": (
        "tt-xla intermediate sharding constraints",
        "tt_torch.sharding.sharding_constraint_tensor(t, mesh, spec), used as a back-to-back "
        "pair (replicated anchor, then the sharded spec) to stop Shardy pushing a sharding "
        "back through a reshape",
    ),
    "tt_mlir_pipeline": (
        "tt-mlir StableHLO pipeline",
        "tenstorrent/tt-mlir lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp: sdy "
        "user-priority propagation with conservativePropagation=true, InsertExplicitReshards, "
        "ReshardToCollectives, ShardyCCLCanonicalization, FuseDistributedCustomCalls",
    ),
    "tt_mlir_6843": (
        "tt-mlir PR 6843 (ShardyCCLCanonicalization)",
        "all_reduce + all_slice fused into reduce_scatter",
    ),
    "tt_mlir_fuse_rms_norm": (
        "tt-mlir FuseDistributedCustomCalls",
        "all_gather + rms_norm + all_slice -> distributed_rms_norm "
        "(lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp)",
    ),
    "tt_mlir_3370": (
        "tt-mlir issue 3370",
        "sdy.collective_permute is not lowered: error \"not implemented yet\" (hit by "
        "Llama-3.2-90B-Vision, FLUX.2, Llama-70B embedding reshard)",
    ),
    "tt_mlir_all_to_all": (
        "tt-mlir TTIRToTTNN all_to_all lowering",
        "tenstorrent/tt-mlir TTIRToTTNN.cpp: all_to_all lowered to N*(N-1) pairwise "
        "ttnn.point_to_point + concat: slow",
    ),
    "tt_mlir_all_slice": (
        "tt-mlir all_slice lowering",
        "all_slice of a replicated tensor is a local slice, no communication "
        "(tt-mlir ShardyToTTIRPatterns.cpp)",
    ),
    "tt_mlir_8961": (
        "tt-mlir PR 8961",
        "all_reduce lowered to a native ttnn.all_reduce since 2026-07",
    ),
    "tt_mlir_8216": (
        "tt-mlir issue 8216",
        "spatial (H/W/D) convolution sharding needs a halo exchange that is not exposed: "
        "shard channels instead",
    ),
    "tt_xla_3643": (
        "tt-xla issue 3643",
        "sharded reshape split/merge fails (\"number of output elements doesn't match\"); "
        "workaround: a replicated-then-sharded constraint pair",
    ),
    "tt_xla_2975": (
        "tt-xla issue 2975",
        "an output sharding constraint on an (N,1) mesh is broken",
    ),
    "tt_metal_36749_37884": (
        "tt-metal issues 36749, 37884",
        "bf16 reduce_scatter loses precision",
    ),
    "tt_metal_33540": (
        "tt-metal issue 33540",
        "all_reduce on a 1-D line fabric gives low PCC",
    ),
    "tt_metal_43749": (
        "tt-metal issue 43749",
        "all_reduce on a Galaxy 1x32 mesh hangs",
    ),
    "tt_mlir_4668": (
        "tt-mlir issue 4668 (supported meshes)",
        "tt-mlir include/ttmlir/Dialect/StableHLO/Utils/ShardingUtils.h SupportedMeshes: "
        "1x1 1x2 1x4 1x8 1x16 1x32 1x64 2x2 2x4 2x8 4x4 4x8 4x16 4x32 8x4 8x8 8x16; "
        "error \"Mesh is not valid\"",
    ),
    "tt_xla_mesh_shapes": (
        "tt-xla sharding skill, standard mesh shapes",
        "tenstorrent/tt-xla .claude/skills/sharding-model-analysis/references/mesh_shapes.md: "
        "32 -> (8,4); 8 -> (2,4) or (1,8); 4 -> (1,4); 2 -> (1,2); 1 -> (1,1)",
    ),
    "playbook": (
        "Tenstorrent sharding-analysis playbook",
        "tt-xla .claude/skills/sharding-model-analysis: optimize for speed, not memory; "
        "minimize CCLs or their size; shard for memory only as a loud fallback",
    ),
    "tt_mlir_7517": (
        "tt-mlir PR 7517 (AutoShardingPass)",
        "one mesh axis, per-argument single-dim options, exhaustive to 50,000 configurations, "
        "heuristic cost (1.0 / 1.5 weights), \"not hardware-calibrated\"",
    ),
    "tt_metal_ccl_bandwidth": (
        "tt-metal CCL bandwidth",
        "tt-metal tech_reports/CCLs/CCL_bandwidth.md: bytes on the bottleneck link, "
        "all_gather and reduce_scatter (N-1)/N*T, all_reduce 2(N-1)/N*T, all_to_all "
        "floor(N/2)*ceil(N/2)/N*T",
    ),
    "tt_metal_ccl_fits_wh": (
        "tt-metal fitted CCL latency, Wormhole LoudBox",
        "tt-metal tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md: fixed "
        "per-invocation cost of several microseconds plus bytes over link bandwidth",
    ),
    "tt_metal_ccl_fits_bh": (
        "tt-metal CCL efficiency, Blackhole Galaxy",
        "tt-metal tech_reports/CCLs/results/SUMMARY_blackhole_bfloat16_8192.md",
    ),
    "tt_metal_ccl_ops": (
        "tt-metal TTNN CCL operations",
        "tt-metal tech_reports/CCLs/TTNN_CCL_Operations.md: reductions are Sum only",
    ),
}

# key -> a phrase the reference notes contain (a test keeps citations honest).
EVIDENCE: dict[str, str] = {
    "megatron": "1909.08053",
    "sequence_parallel": "2205.05198",
    "zero": "1910.02054",
    "shardy": "sdy-reshard-to-collectives",
    "tt_xla_llama": "examples/pytorch/llama.py",
    "torch_xla_spmd": "CONVERT_SHLO_TO_SHARDY",
    "tt_torch_constraint": "sharding_constraint_tensor",
    "tt_mlir_pipeline": "StableHLOPipelines.cpp",
    "tt_mlir_6843": "PR 6843",
    "tt_mlir_fuse_rms_norm": "distributed_rms_norm",
    "tt_mlir_3370": "issue 3370",
    "tt_mlir_all_to_all": "TTIRToTTNN.cpp",
    "tt_mlir_all_slice": "ShardyToTTIRPatterns.cpp",
    "tt_mlir_8961": "PR 8961",
    "tt_mlir_8216": "issue 8216",
    "tt_xla_3643": "tt-xla issue 3643",
    "tt_xla_2975": "tt-xla issue 2975",
    "tt_metal_36749_37884": "36749, 37884",
    "tt_metal_33540": "33540",
    "tt_metal_43749": "43749",
    "tt_mlir_4668": "4668",
    "tt_xla_mesh_shapes": "mesh_shapes.md",
    "playbook": "sharding-model-analysis",
    "tt_mlir_7517": "PR 7517",
    "tt_metal_ccl_bandwidth": "CCL_bandwidth.md",
    "tt_metal_ccl_fits_wh": "SUMMARY_wormhole_b0_bfloat16_6144.md",
    "tt_metal_ccl_fits_bh": "SUMMARY_blackhole_bfloat16_8192.md",
    "tt_metal_ccl_ops": "TTNN_CCL_Operations.md",
}


class Citer:
    """Numbers citations in order of first use; ``table()`` lists the ones used."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def cite(self, *keys: str) -> str:
        out = []
        for key in keys:
            if key not in CITATIONS:
                raise KeyError(f"unknown citation {key!r}")
            if key not in self.order:
                self.order.append(key)
            out.append(f"[{self.order.index(key) + 1}]")
        return "".join(out)

    def table(self) -> str:
        lines = ["| # | Source | Reference |", "|---|---|---|"]
        for i, key in enumerate(self.order, 1):
            title, ref = CITATIONS[key]
            lines.append(f"| [{i}] | {title} | {ref} |")
        return "\n".join(lines)
