"""Sources a report may cite, and the claims each one supports.

A report cites by *claim*: ``cite.for_claim("megatron-two-allreduce", about=sentence)``
returns the markers of the sources whose entry lists that claim, and refuses a sentence
that does not say what the claim says (``CLAIMS[claim].wording``) or a source that does
not support it. So the code cannot attach a citation to a sentence its source does not
back; a sentence stating a bare computed fact ("the modeled step is 70 us faster") asks
for no citation at all.

Every source restates a fact from the project's reference notes
(``shared/references/*.md``); nothing here is new. ``EVIDENCE`` names, per key, a phrase
the notes contain, so a test can check that each citation is still backed by them.

    >>> c = Citer()
    >>> c.for_claim("megatron-pair", "gate/up column-parallel, down row-parallel: a column->row pair")
    '[1][2]'
    >>> c.uses[0].claim, c.uses[0].keys
    ('megatron-pair', ('megatron', 'playbook_general_sharding'))
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Claim(NamedTuple):
    says: str     # what a sentence citing for this claim asserts
    wording: str  # a regex (case-insensitive) such a sentence matches


class Source(NamedTuple):
    title: str
    reference: str
    supports: frozenset  # claim ids


# Claim ids -> what they assert. A sentence citing for a claim must match its wording.
CLAIMS: dict[str, Claim] = {
    # How the plan was computed
    "shardy-propagation": Claim("Shardy propagates shardings and makes the collectives explicit", r"Shardy"),
    "tt-mlir-pipeline": Claim("tt-mlir's StableHLO pipeline: user-priority conservative propagation, explicit "
                              "reshards, ShardyCCLCanonicalization", r"tt-mlir's StableHLO pipeline"),
    "ccl-canonicalization": Claim("all_reduce + all_slice are fused into reduce_scatter", r"reduce_scatter"),
    "fused-distributed-norm": Claim("all_gather + rms_norm + all_slice -> distributed_rms_norm",
                                    r"distributed_rms_norm"),
    "ccl-fits-wormhole": Claim("fitted CCL latency on the Wormhole LoudBox: a fixed cost plus bytes over bandwidth",
                               r"fitted|fixed|latency"),
    "ccl-fits-blackhole": Claim("measured CCL efficiency on Blackhole", r"fitted|fixed|latency|Blackhole"),
    "ccl-link-bytes": Claim("bytes on the bottleneck link per collective kind", r"busiest link|bottleneck link"),
    "tuned-ccl-profile": Claim("per-op kernel times of tt-metal's Llama-70B Galaxy decode", r"Galaxy"),
    # The playbook's objective
    "speed-objective": Claim("optimize for speed; minimize the CCLs or their size", r"speed|fastest|fewest"),
    "memory-not-objective": Claim("memory balance is not an objective", r"memory"),
    "memory-loud-fallback": Claim("shard for memory only as a loud fallback", r"memory"),
    "one-mesh-per-pipeline": Claim("one mesh shape per pipeline, optimal for the slowest model", r"slowest"),
    # Target
    "standard-mesh": Claim("the standard mesh shapes per device count", r"standard"),
    "tt-mlir-supported-mesh": Claim("the meshes tt-mlir accepts", r"tt-mlir"),
    "block-float-weights": Claim("bfp8 / bfp4 block-float weights through experimental_weight_dtype",
                                 r"bfp|block.float"),
    # Schemes
    "megatron-pair": Claim("column-parallel then row-parallel: the intermediate is never gathered, one all-reduce "
                           "closes the pair", r"column.{0,3}row|column-parallel"),
    "megatron-attention-heads": Claim("attention is split by heads, the output projection row-parallel", r"heads"),
    "megatron-one-allreduce-per-pair": Claim("one all-reduce per column->row pair", r"one all[_-]reduce"),
    "megatron-two-allreduce": Claim("two all-reduces in the forward path per transformer layer",
                                    r"two all[_-]reduces"),
    "tt-xla-llama-plan": Claim("tt-xla's Llama plan: q/k/v/gate/up (\"model\", None), o/down (None, \"model\")",
                               r"tt-xla"),
    "row-parallel-allreduce": Claim("a row-parallel matmul leaves partial sums: one all-reduce", r"partial sums"),
    "norm-stats-allreduce": Claim("a norm over a split axis all-reduces its (small) statistics", r"statistics|stats"),
    "sequence-kv-allgather": Claim("attention over a sequence-split activation all-gathers K and V along the "
                                   "sequence axis", r"K and V|K/V"),
    "allreduce-decomposition": Claim("all_reduce = reduce_scatter + all_gather",
                                     r"reduce_scatter.*all_gather|all_gather.*reduce_scatter"),
    "sequence-parallel": Claim("sequence parallelism: the all-reduce becomes all-gather + reduce-scatter",
                               r"sequence"),
    "data-parallel-input": Claim("data parallel marks the input's batch dim only: fully local", r"batch|data parallel"),
    "intermediate-constraint": Claim("tt-xla constrains intermediates with sharding_constraint_tensor, a replicated "
                                     "anchor then the sharded spec", r"constraint"),
    "expert-parallel": Claim("whole experts per device", r"expert"),
    "loader-spec": Claim("a tt-forge-models loader's load_shard_spec is its hand-written plan",
                         r"load_shard_spec|loader"),
    "divisibility": Claim("a sharded dim must divide by its axis size; safe_mark_sharding replicates otherwise",
                          r"divide"),
    "autoshard-pass": Claim("tt-mlir's AutoShardingPass and its heuristic cost", r"AutoSharding"),
    # Compiler and runtime limitations
    "compiler-limitation": Claim("a pattern the compiler or runtime rejects, miscompiles or runs badly", r"\w"),
    "collective-permute-unsupported": Claim("collective_permute is not lowered by tt-mlir", r"collective_permute"),
    "all-to-all-slow": Claim("all_to_all lowers to N*(N-1) point_to_point ops", r"all_to_all"),
    "all-slice-local": Claim("an all_slice of a replicated value is a local slice", r"all_slice"),
    "native-all-reduce": Claim("all_reduce lowers to a native ttnn.all_reduce", r"native"),
    "line-allreduce-pcc": Claim("all_reduce on a 1-D line fabric has given low PCC", r"PCC"),
    "galaxy-1x32-hang": Claim("all_reduce on a Galaxy 1x32 mesh hangs", r"1x32"),
    "bf16-reduce-scatter-precision": Claim("bf16 reduce_scatter loses precision", r"reduce_scatter"),
    "spatial-conv-halo": Claim("spatial conv sharding needs a halo exchange tt-mlir does not expose",
                               r"halo|spatial"),
    "reshape-constraint-pair": Claim("a sharded reshape fails; a replicated-then-sharded constraint pair avoids it",
                                     r"reshape"),
    "residual-stream-replicated": Claim("the residual stream must stay replicated (else silent corruption)",
                                        r"residual"),
    "fused-split-miscompile": Claim("split / chunk across a sharded fused dim miscompiles", r"split|chunk|fused"),
    "kv-heads-replicated": Claim("layers with 1-2 KV heads cannot be head-sharded", r"KV|K/V"),
    "tile-aligned-shards": Claim("a sequence-parallel split must leave whole 32-row tiles on each device",
                                 r"tile|32"),
    "tile-columns": Claim("a tensor's last dim crosses devices only in whole 32-wide tiles per device",
                          r"tile|32"),
    "tiled-vocab-head-hang": Claim("GPT-OSS-20B hangs with its lm_head split on vocab", r"GPT-OSS|lm_head|vocab"),
    "mixed-axis-contraction": Claim("a contraction whose operands are split on different mesh axes lowers to "
                                    "collective_permute or loses accuracy; the bring-ups keep each contraction "
                                    "on one axis", r"axis|axes"),
    "ccl-sum-only": Claim("CCL reductions are Sum only", r"sum"),
    "zero-stages": Claim("ZeRO memory per stage", r"ZeRO"),
    "torch-xla-spmd": Claim("the tt-xla PyTorch SPMD set-up", r"SPMD|mark_sharding"),
    # Serving (--serve)
    "serving-columns": Claim("tt-inference-server reports a deployment by ISL, OSL, concurrency, TTFT, TPOT, "
                             "tokens/s/user and tokens/s", r"tt-inference-server"),
    "kv-per-token": Claim("KV bytes per token = 2 x layers x KV heads x head_dim x bytes; per chip divided by "
                          "min(TP, KV heads)", r"KV"),
    "sharded-topk": Claim("vocab-split logits sampled with the tenstorrent.topk composite instead of an "
                          "all_gather of the vocabulary", r"top-?k"),
    "disaggregated-prefill": Claim("prefill on its own mesh, the KV cache handed to decode in a stated layout",
                                   r"prefill"),
    "multi-host-links": Claim("links per edge of multi-Galaxy meshes (tt-metal mesh graph descriptors)",
                              r"link|channel"),
}

_LIMITS = "compiler-limitation"


def _src(title: str, reference: str, *claims: str) -> Source:
    return Source(title, reference, frozenset(claims))


CITATIONS: dict[str, Source] = {
    # Reference schemes (anchors.md, "Reference schemes").
    "megatron": _src(
        "Megatron-LM (Shoeybi et al. 2019)",
        "arXiv 1909.08053, section 3, figures 3-4: MLP column-parallel then row-parallel; "
        "attention split by heads, output projection row-parallel; two all-reduces in the "
        "forward path per transformer layer",
        "megatron-pair", "megatron-attention-heads", "megatron-two-allreduce"),
    "sequence_parallel": _src(
        "Sequence parallelism (Korthikanti et al. 2022)",
        "arXiv 2205.05198, section 4.2.2, figures 5-6: the all-reduce becomes all-gather + "
        "reduce-scatter at equal bandwidth; activation memory per layer falls",
        "sequence-parallel", "allreduce-decomposition"),
    "zero": _src(
        "ZeRO (Rajbhandari et al. 2019)",
        "arXiv 1910.02054, section 5 (memory per stage) and section 7 (communication: "
        "stage 3 = 1.5x data parallel)",
        "zero-stages"),
    "shardy": _src(
        "Shardy (openxla/shardy)",
        "propagates user shardings by priority; sdy-insert-explicit-reshards + "
        "sdy-reshard-to-collectives make the collectives explicit",
        "shardy-propagation"),
    # Tenstorrent stack (tenstorrent.md).
    "tt_xla_llama": _src(
        "tt-xla Llama tensor-parallel example",
        "tenstorrent/tt-xla examples/pytorch/llama.py: q/k/v/gate/up (\"model\", None), "
        "o/down (None, \"model\"), KV cache (None, \"model\", None, None)",
        "tt-xla-llama-plan"),
    "torch_xla_spmd": _src(
        "tt-xla PyTorch SPMD set-up",
        "CONVERT_SHLO_TO_SHARDY=1, xr.use_spmd(), Mesh(np.arange(N), shape, (\"batch\", "
        "\"model\")), xs.mark_sharding(tensor, mesh, spec), torch.compile(model, backend=\"tt\") "
        "(tt-xla examples/pytorch/llama.py; torch_xla.distributed.spmd)",
        "torch-xla-spmd"),
    "tt_torch_constraint": _src(
        "tt-xla intermediate sharding constraints",
        "tt_torch.sharding.sharding_constraint_tensor(t, mesh, spec), used as a back-to-back "
        "pair (replicated anchor, then the sharded spec) to stop Shardy pushing a sharding "
        "back through a reshape",
        "intermediate-constraint", "reshape-constraint-pair"),
    "tt_mlir_pipeline": _src(
        "tt-mlir StableHLO pipeline",
        "tenstorrent/tt-mlir lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp: sdy "
        "user-priority propagation with conservativePropagation=true, InsertExplicitReshards, "
        "ReshardToCollectives, ShardyCCLCanonicalization, FuseDistributedCustomCalls",
        "tt-mlir-pipeline"),
    "tt_mlir_6843": _src(
        "tt-mlir PR 6843 (ShardyCCLCanonicalization)",
        "all_reduce + all_slice fused into reduce_scatter",
        "ccl-canonicalization"),
    "tt_mlir_fuse_rms_norm": _src(
        "tt-mlir FuseDistributedCustomCalls",
        "all_gather + rms_norm + all_slice -> distributed_rms_norm "
        "(lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp)",
        "fused-distributed-norm"),
    "tt_mlir_3370": _src(
        "tt-mlir issue 3370",
        "sdy.collective_permute is not lowered: error \"not implemented yet\" (hit by "
        "Llama-3.2-90B-Vision, FLUX.2, Llama-70B embedding reshard)",
        "collective-permute-unsupported", _LIMITS),
    "tt_mlir_all_to_all": _src(
        "tt-mlir TTIRToTTNN all_to_all lowering",
        "tenstorrent/tt-mlir TTIRToTTNN.cpp: all_to_all lowered to N*(N-1) pairwise "
        "ttnn.point_to_point + concat: slow",
        "all-to-all-slow", _LIMITS),
    "tt_mlir_all_slice": _src(
        "tt-mlir all_slice lowering",
        "all_slice of a replicated tensor is a local slice, no communication "
        "(tt-mlir ShardyToTTIRPatterns.cpp)",
        "all-slice-local"),
    "tt_mlir_8961": _src(
        "tt-mlir PR 8961",
        "all_reduce lowered to a native ttnn.all_reduce since 2026-07",
        "native-all-reduce"),
    "tt_mlir_8216": _src(
        "tt-mlir issue 8216",
        "spatial (H/W/D) convolution sharding needs a halo exchange that is not exposed: "
        "shard channels instead",
        "spatial-conv-halo", _LIMITS),
    "tt_xla_3643": _src(
        "tt-xla issue 3643",
        "sharded reshape split/merge fails (\"number of output elements doesn't match\"); "
        "workaround: a replicated-then-sharded constraint pair",
        "reshape-constraint-pair", _LIMITS),
    "tt_metal_36749_37884": _src(
        "tt-metal issues 36749, 37884",
        "bf16 reduce_scatter loses precision",
        "bf16-reduce-scatter-precision", _LIMITS),
    "tt_metal_33540": _src(
        "tt-metal issue 33540",
        "all_reduce on a 1-D line fabric gives low PCC",
        "line-allreduce-pcc", _LIMITS),
    "tt_metal_43749": _src(
        "tt-metal issue 43749",
        "all_reduce on a Galaxy 1x32 mesh hangs",
        "galaxy-1x32-hang", _LIMITS),
    "tt_mlir_4668": _src(
        "tt-mlir issue 4668 (supported meshes)",
        "tt-mlir include/ttmlir/Dialect/StableHLO/Utils/ShardingUtils.h SupportedMeshes: "
        "1x1 1x2 1x4 1x8 1x16 1x32 1x64 2x2 2x4 2x8 4x4 4x8 4x16 4x32 8x4 8x8 8x16; "
        "error \"Mesh is not valid\"",
        "tt-mlir-supported-mesh", _LIMITS),
    "tt_xla_mesh_shapes": _src(
        "tt-xla sharding skill, standard mesh shapes",
        "tenstorrent/tt-xla .claude/skills/sharding-model-analysis/references/mesh_shapes.md: "
        "32 -> (8,4); 8 -> (2,4) or (1,8); 4 -> (1,4); 2 -> (1,2); 1 -> (1,1)",
        "standard-mesh"),
    "playbook": _src(
        "Tenstorrent sharding-analysis playbook",
        "tt-xla .claude/skills/sharding-model-analysis SKILL.md core rules: optimize for speed, not "
        "memory (memory balance is not an objective); minimize CCLs or their size; shard for "
        "memory only as a loud fallback; one mesh shape per pipeline, the one optimal for the "
        "slowest model",
        "speed-objective", "memory-not-objective", "memory-loud-fallback", "one-mesh-per-pipeline"),
    "playbook_general_sharding": _src(
        "Tenstorrent sharding playbook, general_sharding.md",
        "tt-xla .claude/skills/sharding-model-analysis/references/general_sharding.md: Megatron "
        "TP is the default; a matmul pair is split so the activation between them is never "
        "gathered, one all-reduce per pair (column-parallel: no collective; row-parallel: "
        "one all-reduce)",
        "megatron-pair", "megatron-one-allreduce-per-pair"),
    "playbook_ccl_cheatsheet": _src(
        "Tenstorrent sharding playbook, ccl_cheatsheet.md",
        "tt-xla .claude/skills/sharding-model-analysis/references/ccl_cheatsheet.md: "
        "column-parallel matmul, no collective; row-parallel matmul, 1 all-reduce (the local "
        "output is a partial sum); a reduction (norm / softmax stats) over a sharded axis, "
        "1 all-reduce of the reduced stats, small; attention over a sequence-sharded activation "
        "needing full K/V, all-gather K and V along the sequence axis; all_reduce = "
        "reduce_scatter + all_gather",
        "row-parallel-allreduce", "norm-stats-allreduce", "allreduce-decomposition", "sequence-kv-allgather",
        "megatron-one-allreduce-per-pair"),
    "playbook_shardy_sharding": _src(
        "Tenstorrent sharding playbook, shardy_sharding.md",
        "tt-xla .claude/skills/sharding-model-analysis/references/shardy_sharding.md: nn.Linear "
        "weight is [out, in] (column-parallel dim 0, row-parallel dim 1); data parallel marks "
        "the input's batch dim only, fully local, no collectives; the sharded dim must divide "
        "cleanly by the axis size (safe_mark_sharding falls back to replication otherwise)",
        "data-parallel-input", "divisibility"),
    "tt_mlir_7517": _src(
        "tt-mlir PR 7517 (AutoShardingPass)",
        "one mesh axis, per-argument single-dim options, exhaustive to 50,000 configurations, "
        "heuristic cost (1.0 / 1.5 weights), \"not hardware-calibrated\"",
        "autoshard-pass"),
    "tt_metal_ccl_bandwidth": _src(
        "tt-metal CCL bandwidth",
        "tt-metal tech_reports/CCLs/CCL_bandwidth.md: bytes on the bottleneck link, "
        "all_gather and reduce_scatter (N-1)/N*T, all_reduce 2(N-1)/N*T, all_to_all "
        "floor(N/2)*ceil(N/2)/N*T",
        "ccl-link-bytes"),
    "tt_metal_ccl_fits_wh": _src(
        "tt-metal fitted CCL latency, Wormhole LoudBox",
        "tt-metal tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md: fixed "
        "per-invocation cost of several microseconds plus bytes over link bandwidth",
        "ccl-fits-wormhole"),
    "tt_metal_ccl_fits_bh": _src(
        "tt-metal CCL efficiency, Blackhole Galaxy",
        "tt-metal tech_reports/CCLs/results/SUMMARY_blackhole_bfloat16_8192.md",
        "ccl-fits-blackhole"),
    "tt_metal_ccl_ops": _src(
        "tt-metal TTNN CCL operations",
        "tt-metal tech_reports/CCLs/TTNN_CCL_Operations.md: reductions are Sum only",
        "ccl-sum-only"),
    "tt_metal_galaxy_llama70b": _src(
        "tt-metal Llama-3.3-70B Galaxy decode, per-op kernel times",
        "tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json: device kernel "
        "duration of each op of a decoder layer (norms with fused stats all_gather, SDPA as one "
        "kernel, all_reduce ~13.3 us, reduce_scatter ~7.2 us), traced, 6U Galaxy, batch 32",
        "tuned-ccl-profile"),
    "tt_xla_weight_dtype": _src(
        "Block-float weights (tt-metal bfp8 / bfp4)",
        "bfp8 = 8-bit mantissas sharing one exponent per 16 values, bfp4 = 4-bit mantissas "
        "likewise; tt-xla exposes them as experimental_weight_dtype (\"bfp_bf8\", \"bfp_bf4\"); "
        "tt-xla PR 5073 runs Llama-3.1-70B on 8 Wormhole chips with bfp_bf8 (required to fit)",
        "block-float-weights"),
    # Expert shard specs (expert_specs.md).
    "tt_forge_loader_spec": _src(
        "tt-forge-models ModelLoader shard specs",
        "ModelLoader.load_shard_spec(model) returns {tensor: partition_spec} and "
        "ModelLoader.get_mesh_config(num_devices) the mesh shape; tensors not listed are "
        "replicated (e.g. tt-forge-models llama/causal_lm/pytorch/loader.py)",
        "loader-spec"),
    "tt_forge_mixtral": _src(
        "tt-forge-models Mixtral 8x7B loader",
        "mlp.experts.gate_up_proj (\"model\", None, None), mlp.experts.down_proj (\"model\", None, "
        "None): whole experts per device (expert parallel); the router stays replicated",
        "expert-parallel"),
    "expert_residual_stream": _src(
        "tt-forge-models Llama-70B / Nemotron loaders (residual stream)",
        "embed_tokens (None, \"batch\") and the norms (\"batch\",) keep the residual stream "
        "replicated, which forces the all-reduce after every row-parallel o_proj/down_proj; "
        "without them propagation infers a \"model\"-sharded residual stream and drops those "
        "collectives, silently corrupting the result (PCC ~0.37)",
        "residual-stream-replicated", _LIMITS),
    "expert_fused_split": _src(
        "tt-forge-models Qwen3.5 / Molmo loaders (fused weights)",
        "torch.split / chunk across a sharded fused dim cuts the sharded axis at points that "
        "do not align with the per-device boundaries, which miscompiles under Shardy; naive "
        "column-TP on a fused q|k|v weight mis-partitions Q/K/V",
        "fused-split-miscompile", _LIMITS),
    "expert_kv_heads": _src(
        "tt-forge-models Gemma 4 loader (KV heads)",
        "layers with 1-2 KV heads cannot be head-sharded: K/V stay replicated",
        "kv-heads-replicated", _LIMITS),
    # Read with the search tool, not (yet) in the reference notes: VERIFIED_ELSEWHERE.
    "tt_xla_5309": _src(
        "tt-xla PR 5309 (Wan 2.2 sequence-parallel DiT)",
        "when the token length over the sequence-parallel axis is not a multiple of the 32x32 tile, "
        "ttnn.mesh_partition slices with a tile-unaligned begin and stops: TT_FATAL \"Can only slice "
        "tilized tensor with height begin index aligned to tiles\"; fixed by padding the length to a "
        "multiple of SP*32",
        "tile-aligned-shards", _LIMITS),
    "tt_metal_tile_width": _src(
        "tt-metal TTNN all_gather and slice on tiled tensors",
        "tests/ttnn/unit_tests/operations/ccl/test_all_gather.py is_unsupported_case: a gather on the last "
        "dim whose per-device size is not a multiple of 32 is an \"Unsupported test case\"; "
        "slice_device_operation.cpp: TT_FATAL \"Can only slice tilized tensor with width begin index aligned "
        "to tiles\" (output_tensor_shape[-1] % TILE_WIDTH == 0)",
        "tile-columns", _LIMITS),
    "tt_xla_3484": _src(
        "tt-xla issue 3484 (GPT-OSS-20B lm_head)",
        "GPT-OSS-20B hangs with 2-D shard specs when lm_head is split (\"model\", \"batch\"); 120B does not; "
        "the tt-forge-models 20B loader keeps lm_head replicated since",
        "tiled-vocab-head-hang", _LIMITS),
    "tt_forge_models_one_axis": _src(
        "tt-forge-models PRs 857, 775, 847, 853 (one mesh axis per contraction)",
        "bring-ups moved from 2-D alternating specs to specs whose collectives stay on one mesh axis: a "
        "contraction whose operands are split on different axes lowers to sdy.collective_permute or loses "
        "accuracy (Lumina PCC 0.093 -> 0.93 with every collective on one axis)",
        "mixed-axis-contraction", _LIMITS),
    # Serving (serving.md).
    "tt_inference_server": _src(
        "tt-inference-server model specs and benchmarks",
        "tenstorrent/tt-inference-server workflows/model_specs/prod/llm.yaml (max_concurrency, max_context, "
        "data_parallel_size, MESH_DEVICE per model and device); benchmarks over an ISL / OSL / concurrency grid "
        "reporting TTFT, TPOT, tokens/s/user and total tokens/s",
        "serving-columns"),
    "kv_cache_sizing": _src(
        "KV cache per token (tt-xla PRs 5731, 5872)",
        "KV bytes per token = 2 x layers x KV heads x head_dim x bytes per element; per chip divided by "
        "min(TP, KV heads); vLLM sized the cache as if unsharded until tt-xla PR 5731",
        "kv-per-token"),
    "tt_xla_5004": _src(
        "tt-xla PR 5004 (sharded top-k sampling)",
        "vocab-sharded logits sampled with the tenstorrent.topk composite (tt-mlir PR 8601) replace the "
        "~128k-vocab all_gather of every decode step",
        "sharded-topk"),
    "tt_metal_disaggregation": _src(
        "tt-metal disaggregated prefill (tt-metal PR 42568, PR 52292)",
        "prefill on its own mesh with a KV layout contract toward decode (K heads then V heads, one head per "
        "TP column); a shared prefill engine in models/demos/common/prefill",
        "disaggregated-prefill"),
    "tt_metal_mesh_graphs": _src(
        "tt-metal mesh graph descriptors",
        "tt_metal/fabric/mesh_graph_descriptors/: 4 channels inside one WH Galaxy; 1 on the WH dual (8x8) and "
        "quad (8x16) meshes; 2 on the 16x8 ring-by-ring",
        "multi-host-links"),
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
    "tt_metal_36749_37884": "36749, 37884",
    "tt_metal_33540": "33540",
    "tt_metal_43749": "43749",
    "tt_mlir_4668": "4668",
    "tt_xla_mesh_shapes": "mesh_shapes.md",
    "playbook": "sharding-model-analysis",
    "playbook_general_sharding": "general_sharding.md",
    "playbook_ccl_cheatsheet": "ccl_cheatsheet.md",
    "playbook_shardy_sharding": "shardy_sharding.md",
    "tt_mlir_7517": "PR 7517",
    "tt_metal_ccl_bandwidth": "CCL_bandwidth.md",
    "tt_metal_ccl_fits_wh": "SUMMARY_wormhole_b0_bfloat16_6144.md",
    "tt_metal_ccl_fits_bh": "SUMMARY_blackhole_bfloat16_8192.md",
    "tt_metal_ccl_ops": "TTNN_CCL_Operations.md",
    "tt_metal_galaxy_llama70b": "decoder_perf_targets_6u.json",
    "tt_xla_weight_dtype": "experimental_weight_dtype",
    "tt_forge_loader_spec": "load_shard_spec(model)",
    "tt_forge_mixtral": "whole experts per device",
    "expert_residual_stream": "PCC ~0.37",
    "expert_fused_split": "miscompiles under Shardy",
    "expert_kv_heads": "Gemma 4 loader",
    "tt_inference_server": "workflows/model_specs/prod/llm.yaml",
    "kv_cache_sizing": "min(TP, KV heads)",
    "tt_xla_5004": "tt-xla PR 5004",
    "tt_metal_disaggregation": "PR 42568",
    "tt_metal_mesh_graphs": "mesh_graph_descriptors",
}

# key -> where a source not (yet) in the reference notes was read, and a phrase of it: the
# rest of the table restates the notes (EVIDENCE); these were read with the search tool and
# carry their address and the date they were read. Each key is in exactly one of the two.
VERIFIED_ELSEWHERE: dict[str, str] = {
    "tt_xla_5309": "https://github.com/tenstorrent/tt-xla/pull/5309 (merged 2026-06-22; read 2026-12-05): "
                   "\"Pad the post-patchify sequence length to a multiple of SP*32 so every SP shard is a whole "
                   "number of tiles\"",
    "tt_metal_tile_width": "https://github.com/tenstorrent/tt-metal/blob/main/tests/ttnn/unit_tests/operations/"
                           "ccl/test_all_gather.py (read 2026-12-05): is_unsupported_case, \"dim == 3 and "
                           "input_shape[dim] // num_devices % 32 != 0\" -> \"Unsupported test case\"",
    "tt_xla_3484": "https://github.com/tenstorrent/tt-xla/issues/3484 (open; read 2026-12-05): \"GPT-OSS-20B Hang "
                   "during lm_head sharding with 2d shard specs\"",
    "tt_forge_models_one_axis": "https://github.com/tenstorrent/tt-forge-models/pull/857 (merged; read 2026-12-05): "
                                "\"the sharded output fails with a PCC drop of 0.093 ... Every contraction dim now "
                                "stays on one axis\"; /780 (the collective_permute error); /775, /847, /853 as issue "
                                "32 cites them (not read)",
}


def sources_for(claim: str) -> tuple[str, ...]:
    """The keys whose entry supports ``claim``, in table order."""
    if claim not in CLAIMS:
        raise KeyError(f"unknown claim {claim!r}")
    return tuple(k for k, s in CITATIONS.items() if claim in s.supports)


class Use(NamedTuple):
    """One citation in a report: the text it is attached to, the claim, the keys, the marker."""
    about: str
    claim: str
    keys: tuple
    marker: str


class Citer:
    """Numbers citations in order of first use; ``table()`` lists the ones used.

    ``uses`` records every citation (the text it follows, its claim, its keys), so a test
    can check each marker against what its sources support.
    """

    def __init__(self) -> None:
        self.order: list[str] = []
        self.uses: list[Use] = []

    def for_claim(self, claim: str, about: str, *, via: tuple | list | None = None) -> str:
        """Markers for the sources backing ``claim``, placed right after ``about``.

        Args:
          claim: a ``CLAIMS`` id.
          about: the text the marker follows (written as ``f"{about} {marker}"``); it must
            match the claim's wording.
          via: only these keys (each must support the claim), e.g. the source a plan names.
        """
        if claim not in CLAIMS:
            raise KeyError(f"unknown claim {claim!r}")
        if not re.search(CLAIMS[claim].wording, about, re.I):
            raise ValueError(f"the sentence {about!r} does not state claim {claim!r} ({CLAIMS[claim].says})")
        keys = tuple(via) if via else sources_for(claim)
        if not keys:
            raise KeyError(f"no source supports claim {claim!r}")
        for key in keys:
            if key not in CITATIONS:
                raise KeyError(f"unknown citation {key!r}")
            if claim not in CITATIONS[key].supports:
                raise ValueError(f"citation {key!r} does not support claim {claim!r}")
        marker = ""
        for key in keys:
            if key not in self.order:
                self.order.append(key)
            marker += f"[{self.order.index(key) + 1}]"
        self.uses.append(Use(about, claim, keys, marker))
        return marker

    def sentence(self, claim: str, text: str, end: str = ".") -> str:
        """``text`` with its citation: ``"text [n]."``."""
        return f"{text} {self.for_claim(claim, text)}{end}"

    def supports(self, key: str, claim: str) -> bool:
        return key in CITATIONS and claim in CITATIONS[key].supports

    def table(self) -> str:
        lines = ["| # | Source | Reference |", "|---|---|---|"]
        for i, key in enumerate(self.order, 1):
            title, ref, _ = CITATIONS[key]
            lines.append(f"| [{i}] | {title} | {ref} |")
        return "\n".join(lines)
