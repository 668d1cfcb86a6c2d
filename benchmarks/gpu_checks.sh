#!/usr/bin/env bash
# The GPU checks of the distributed fine-tune and the fused attention kernels, in one run on one
# CUDA machine: the gpu lane's tests of those paths, then the attention benchmark (every custom
# attention under attention_kernels reference and fused, ratios to SDPA) and the overhead of
# torchrun at world size 1. Each step has its own time limit, the run goes on past a failing step,
# and the whole run ends by BUDGET_S seconds (default 530).
#
#   bash benchmarks/gpu_checks.sh [OUT]     # default OUT: results/gpu_checks
#   STEPS="lane_rectify_triton rectify_tiles" bash benchmarks/gpu_checks.sh OUT   # only those
#   STEPS=first BUDGET_S=570 bash benchmarks/gpu_checks.sh OUT   # a session's first call (FIRST)
#   SWEEP_S=100 ...   # seconds for the tile sweep's candidates (default 150)
#
# The device tool's bare image (CUDA PyTorch, Triton, its own transformers and peft) runs every
# step but the five of NEEDS_INSTALL: those need the project's packages (bitsandbytes, datasets,
# jsonschema, mlflow, snakemake: installing them there takes two calls of wheels), and are reported skipped
# without them. So a session's first call can measure at once, with no install call
# (tests/benchmarks/test_gpu_checks.py runs the other steps' scripts without those packages).
#
# OUT gets summary.txt (device, versions, one line per step: exit status and seconds), checks.log
# (every step's output), gpu_paper.{json,md} and distributed_overhead.{json,md}.
set -u
out=${1:-results/gpu_checks}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} ZOOMATTN_SKIP_SLURM=1
py=${PYTHON:-python3}
log=$out/checks.log
touch "$log"
deadline=$(($(date +%s) + ${BUDGET_S:-530}))

# a session's first call, on the bare image: the defaults turned on after the H200 run of
# 2026-11-27 against their formulas on the card, together for the first time (rectification's
# kernel with key spans and keys-first dK/dV at 128 keys; LKG-RALM's flex with key spans), then
# keys-first dK/dV timed where it was not (causal, training's right padding), and training's
# padded rows skipped (SKIP_PADDED_ROWS: off until timed) against computed
FIRST="lane_rectify_triton lane_lkg_spans rectify_kv_ab rectify_skip_ab"
[[ ${STEPS:-} == first ]] && STEPS=$FIRST
# a name in STEPS that is no step's would run nothing and say nothing
known=" $(sed -n 's/^step \([a-z0-9_]*\) .*/\1/p' "${BASH_SOURCE[0]}" | tr '\n' ' ')"
for name in ${STEPS:-}; do
  if [[ $known != *" $name "* ]]; then
    echo "gpu_checks.sh: no step is named $name; the steps:$known" >&2
    exit 2
  fi
done
# the steps that need the project's packages, absent from the device tool's bare image
NEEDS_INSTALL="attention overhead lane_distributed lane_methods lane_small_dag"
installed=$($py -c "import bitsandbytes, datasets, jsonschema, mlflow, snakemake" 2>/dev/null && echo yes)

step() { # name, limit in seconds, command...
  local name=$1 limit=$2 left t0 rc start
  shift 2
  [[ -n ${STEPS:-} && " $STEPS " != *" $name "* ]] && return
  if [[ -z $installed && " $NEEDS_INSTALL " == *" $name "* ]]; then
    echo "$name skipped: needs the project's packages (bitsandbytes, datasets, jsonschema, mlflow, snakemake)" |
      tee -a "$out/summary.txt"
    return
  fi
  left=$((deadline - $(date +%s)))
  ((left < limit)) && limit=$left
  if ((limit < 15)); then
    echo "$name skipped: no time left" | tee -a "$out/summary.txt"
    return
  fi
  t0=$(date +%s) start=$(($(wc -c <"$log") + 1))
  echo "=== $name (limit ${limit}s): $*" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "$name rc=$rc $(($(date +%s) - t0))s" | tee -a "$out/summary.txt"
  # an A/B step's variants that failed (benchmarks/each.sh names each), under the step's line
  tail -c "+$start" "$log" | grep '^each.sh: status' | sed 's/^/  /' | tee -a "$out/summary.txt"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $py -c "import importlib.metadata as m, torch
names = 'torch triton transformers peft bitsandbytes datasets jsonschema mlflow snakemake'.split()
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return 'absent'
print('cuda', torch.version.cuda, *(f'{n} {version(n)}' for n in names))"
} >"$out/summary.txt" 2>&1
cat "$out/summary.txt"

# LANE_EXTRA: more pytest arguments (the suite passes --collect-only to check every selection)
lane=("$py" -m pytest -q -p no:cacheprovider -rfE --durations=5 ${LANE_EXTRA:-}) # timeout runs commands, not functions
# only the gpu lane's tests of the switches (PADDING_SPANS, KV_KEYS_AS_ROWS of rectification's and
# OpAmp's kernels, RECOMPUTE_ADAPTERS, ROWS_APART; SPLIT_SCORE_GRADIENTS off, rectification at
# ξ = 10), and whether compiled flex keeps
# log α's gradient under activation checkpointing (it did on an H200 under the image's torch 2.11,
# 2026-11-27; the model takes the rows apart there until it passes under the pinned 2.13,
# flex.APART_UNDER_CHECKPOINTING): what a session short of time runs before the A/B steps, so
# that a switch that wins is also known correct on the card
step lane_switches 300 "${lane[@]}" tests/gpu/test_rectify_triton_on_cuda.py \
  tests/gpu/test_opamp_fused_on_cuda.py tests/gpu/test_lkg_flex_on_cuda.py \
  -k "key_span or key_rows or replayed or rows_apart or rounded_once or checkpointing or padded_rows_skipped"
step lane_attention 60 "${lane[@]}" tests/gpu/test_attention_on_cuda.py
# with OpAmp's Triton kernel under its two switches (the padding as key spans, dK/dV as [keys,
# queries] tiles: off until opamp_switches_ab times them), alone and together
step lane_opamp_fused 180 "${lane[@]}" tests/gpu/test_opamp_fused_on_cuda.py
step lane_rectify_triton 130 "${lane[@]}" tests/gpu/test_rectify_triton_on_cuda.py
# LKG-RALM's file, each way of the fused path apart (each compiles its own flex graphs)
step lane_lkg_flex 150 "${lane[@]}" tests/gpu/test_lkg_flex_on_cuda.py -k "score_mod and not padding_spans"
step lane_lkg_rows_apart 150 "${lane[@]}" tests/gpu/test_lkg_flex_on_cuda.py \
  -k "rows_apart and not padding_spans"
# log α detached in the score_mod, its gradient from the guided rows apart
# (LOG_ALPHA_GRADIENT_APART, off until timed: no atomic adds in flex's backward), every test of
# the file, spans and checkpointing included
step lane_lkg_alpha_apart 200 "${lane[@]}" tests/gpu/test_lkg_flex_on_cuda.py \
  -k log_alpha_gradient_apart
step attention 170 $py benchmarks/gpu_paper.py --attention-only --repeats 3 \
  --lengths 2048 4096 8192 32768 --out "$out"
# the rectification kernel under a left-padding mask at 8192 against causal SDPA (generation's
# prompts; training's right padding in rectify_spans_ab), then where its step's time goes: each
# CUDA kernel's time, beside SDPA's
step rectify_padded 60 $py benchmarks/rectified_triton.py --lengths 8192 --padded 0.25 --repeats 3
# where the padded step's memory goes (2.33× SDPA's at 4096 against 1.07× causal on 2026-11-26;
# 0.80× in both since Δ is computed a few heads at a time, 2026-11-27): each variant's step under
# the allocator's history, the blocks live at its peak, the snapshots
step rectify_memory 60 $py benchmarks/rectified_triton.py --lengths 4096 --padded 0.25 --repeats 1 \
  --memory-trace "$out/memory"
step rectify_profile 60 $py benchmarks/rectified_triton.py --profile --lengths 8192 --padded 0.25
# a decoding step (8 queries over a left-padded cache), as evaluation's generation runs it: the
# fused kernel (on its decode tile), which the dispatch takes for decoding since this showed it
# winning (methods/rectify/kernel.py FUSED_DECODING), against the block-wise path and SDPA
step rectify_decode 60 $py benchmarks/rectified_triton.py --decode 8 --lengths 4096 8192 \
  --padded 0.25 --repeats 5
# g's logarithm as lg2.approx (the kernel's) against tl.log (libdevice's logf, before), each in its
# own process on the same card: causal prefill at 4096 and 8192, then a decoding step
ab="$py benchmarks/rectified_triton.py"
step rectify_log_ab 120 bash benchmarks/each.sh "$ab --lengths 4096 8192" \
  "$ab --libdevice-log --lengths 4096 8192" "$ab --decode 8 --lengths 8192 --padded 0.25" \
  "$ab --libdevice-log --decode 8 --lengths 8192 --padded 0.25"
# the kernels' special functions as one .ftz instruction each and g from one exponential (today's)
# against Triton's own and g over the sorted triple (the kernels before 2026-11-27), each in its own
# process on the same card: rectification causal at 4096 and 8192 and a decoding step, then
# OpAmp's kernel padded at 8192
op="$py benchmarks/opamp_triton.py --lengths 8192 --padded 0.25 --repeats 3"
dec="--decode 8 --lengths 8192 --padded 0.25"
step special_ab 200 bash benchmarks/each.sh "$ab --lengths 4096 8192 --repeats 3" \
  "$ab --tritons-special --lengths 4096 8192 --repeats 3" "$ab $dec" "$ab --tritons-special $dec" \
  "$op" "$op --tritons-special"
# a padding mask as bytes against each row's span of real keys (PADDING_SPANS, on since this
# showed it faster on an H200, 2026-11-27), each in its own process on the same card, with
# training's right padding (the padded rows see every real key) and generation's left padding
# (their tiles skipped)
sp="--lengths 4096 8192 --padded 0.25 --repeats 3"
step rectify_spans_ab 200 bash benchmarks/each.sh \
  "$ab --no-padding-spans $sp --padding-side right" "$ab --padding-spans $sp --padding-side right" \
  "$ab --no-padding-spans $sp" "$ab --padding-spans $sp"
# the backward's dZ in two parts (today) against rounded once (SPLIT_SCORE_GRADIENTS off: half
# those products, loops 9-15 % shorter at sm_90), padded and causal, each in its own process
step rectify_split_ab 100 bash benchmarks/each.sh \
  "$ab --lengths 4096 8192 --padded 0.25 --repeats 3" \
  "$ab --rounded-once --lengths 4096 8192 --padded 0.25 --repeats 3" \
  "$ab --lengths 8192 --repeats 3" "$ab --rounded-once --lengths 8192 --repeats 3"
# dK/dV's tiles as [keys, queries] (KV_KEYS_AS_ROWS, on at 16×128 since the H200 timed it under
# left padding, 2026-11-27; compiled for sm_90 they take Hopper's warpgroup MMAs at 64 or 128
# keys: triton_static.md) against the [queries, keys] tiles, each in its own process on the same
# card, both with PADDING_SPANS: causal, training's right padding (neither timed with it yet),
# then left padding, where 64 keys at 4 warps also runs (faster than 128 with the mask's bytes,
# untimed with spans); rectify_tiles sweeps its tiles
kv="--repeats 3 --padding-spans"
step rectify_kv_ab 150 bash benchmarks/each.sh "$ab $kv --lengths 8192 --no-kv-keys-as-rows" \
  "$ab $kv --lengths 8192 --kv-keys-as-rows" \
  "$ab $kv --lengths 4096 8192 --padded 0.25 --padding-side right --no-kv-keys-as-rows" \
  "$ab $kv --lengths 4096 8192 --padded 0.25 --padding-side right --kv-keys-as-rows" \
  "$ab $kv --lengths 4096 8192 --padded 0.25 --no-kv-keys-as-rows" \
  "$ab $kv --lengths 4096 8192 --padded 0.25 --kv-keys-as-rows" \
  "$ab $kv --lengths 4096 8192 --padded 0.25 --kv-keys-as-rows --tiles '{\"kv\": [16, 64, 4, 2]}'"
# LKG-RALM with 2 of 32 heads fused taken apart (benchmarks/relevance_fusion.py: the flex kernel
# alone, with and without log α's gradient), and the guided rows apart (flex.ROWS_APART, off: on an
# H200 under right padding slower at 4096 tokens, faster at 8192): with 2 of 32 heads and with
# every head
step lkg_heads 150 $py benchmarks/relevance_fusion.py --cuda --lengths 4096 8192 --repeats 5 \
  --variants sdpa flex_2of32 flex_2of32_rows_apart flex_2of32_alone flex_2of32_alone_fixed_alpha \
  flex_2of32_alone_rows_apart flex_all flex_all_rows_apart
# few fused heads leave SMs idle (64 forward programs for 2 heads at 4096 tokens at torch's sm_90
# tiles): flex at tiles with twice the programs (flex.FEW_HEADS_TILES as flex.KERNEL_OPTIONS),
# first against the formula in the gpu lane, then timed, the path and the two heads alone; then,
# in a step of its own so that its compiles (a minute or more per shape) cannot cost the fixed
# tiles' timings, flex autotuned by inductor (flex.AUTOTUNE; it prints every candidate's time and
# the one it keeps to the log), 4096 tokens first
step lane_lkg_tiles 200 "${lane[@]}" tests/gpu/test_lkg_flex_tiles_on_cuda.py \
  -k "few_heads and not log_alpha"
step lkg_tiles 150 $py benchmarks/relevance_fusion.py --cuda --lengths 4096 8192 --repeats 5 \
  --variants sdpa flex_2of32 flex_2of32_alone flex_2of32_small_tiles flex_2of32_alone_small_tiles
step lkg_autotune 300 $py benchmarks/relevance_fusion.py --cuda --lengths 4096 8192 --repeats 5 \
  --variants sdpa flex_2of32 flex_2of32_autotuned flex_2of32_alone flex_2of32_alone_autotuned
# training's right padding read by flex's mask_mod as each row's span of real keys
# (flex.PADDING_SPANS, on since this step timed it on an H200, 2026-11-27) instead of one mask
# byte per score of a partial tile (the _mask_bytes variants, the path before): against the formula
# (right and left padding), with the checkpointing test beside it (right padding, read as spans
# since they are the default: a paper-preset fine-tune's path, the rows apart, on the card), then
# timed under a mask of 25% right padding, SDPA under the same
# mask as the baseline (the step above times causal without a mask, where flex reads none); and
# the guided rows apart there (the padding is OTHER, as the model's segments make it, so the rows
# apart are the question and answer rows alone, as without the mask). The lane step compiles
# about six flex graphs, 10-18 s each on an H200 (2026-11-27): its limit leaves room for them
step lane_lkg_spans 190 "${lane[@]}" tests/gpu/test_lkg_flex_on_cuda.py \
  -k "padding_spans and not log_alpha or checkpointing and not log_alpha"
step lkg_spans 240 $py benchmarks/relevance_fusion.py --cuda --padded 0.25 --padding-side right \
  --lengths 4096 8192 --repeats 5 --variants sdpa flex_2of32 flex_2of32_mask_bytes \
  flex_2of32_alone flex_2of32_alone_mask_bytes flex_all flex_all_mask_bytes \
  flex_2of32_rows_apart flex_all_rows_apart
# log α's gradient from the guided rows apart (LOG_ALPHA_GRADIENT_APART, off until this times it:
# log α detached in flex's score_mod, so flex's backward makes no atomic adds) against the score_mod
# and the rows apart, under training's 25 % right padding, SDPA under the same mask first; the two
# fused heads alone with log α fixed (no gradient at all) show what the atomics cost
step lkg_alpha_ab 240 $py benchmarks/relevance_fusion.py --cuda --padded 0.25 --padding-side right \
  --lengths 4096 8192 --repeats 5 --variants sdpa flex_2of32 flex_2of32_log_alpha_apart \
  flex_2of32_rows_apart flex_2of32_alone flex_2of32_alone_fixed_alpha \
  flex_2of32_alone_log_alpha_apart flex_all flex_all_log_alpha_apart flex_all_rows_apart
# (after the first call's lane steps, which a session short of time keeps) training's right-
# padded rows skipped (SKIP_PADDED_ROWS, off until timed: the padded rows attend
# to nothing, a fine-tune's loss and gradients unchanged; at 25 % right padding 40 % of the
# scores the mask allows) against computed, each in its own process on the same card, with key
# spans
sk="--repeats 3 --padding-spans --lengths 4096 8192 --padded 0.25 --padding-side right"
step rectify_skip_ab 80 bash benchmarks/each.sh "$ab $sk --no-skip-padded-rows" \
  "$ab $sk --skip-padded-rows"
# a right-padded batch's plain SDPA with its mask and run causal (attention_kernels {plain: fused},
# off until timed), alone, in OpAmp's stacked path and in LKG-RALM's 2-of-32 fusion, one process;
# its lane test is in lane_attention
step plain_ab 150 $py benchmarks/plain_padding.py --lengths 4096 8192 --repeats 3
# the rectification kernel's tiles: a sweep per kernel at 4096 tokens under that mask, where the
# kernels hold more registers (benchmarks/rectified_triton.py --sweep; docs/kernels.md); each
# candidate's line reaches the log as it is timed, so a sweep cut short still tells; a candidate
# that leaves the device unusable ends the sweep, its JSON keeping the rows and the error
step rectify_tiles $((${SWEEP_S:-150} + 50)) $py benchmarks/rectified_triton.py --sweep --lengths 4096 \
  --padded 0.25 --budget-s "${SWEEP_S:-150}" --out "$out/rectified_tiles.json"
# OpAmp's Triton kernel alone against the stacked SDPA call at 8192 under that mask, then its
# tile sweep (benchmarks/opamp_triton.py; its table, chosen from sm_90 compiles, was never swept)
step opamp_padded 60 $py benchmarks/opamp_triton.py --lengths 8192 --padded 0.25 --repeats 3
# its two switches (rectification's kernel gained from each on an H200), each in its own process
# on the same card: under training's 25 % right padding both off, each alone and both on, then
# under generation's left padding both off and both on; then both on under right padding at the
# keys-first dK/dV tiles that compute each score's exponentials once but spill (the table's 16×64
# at 8 warps repeats them in its two warpgroups: triton_static.md)
os="$py benchmarks/opamp_triton.py --lengths 4096 8192 --padded 0.25 --repeats 3"
both="--padding-side right --padding-spans --kv-keys-as-rows"
step opamp_switches_ab 320 bash benchmarks/each.sh "$os --padding-side right" \
  "$os --padding-side right --padding-spans" "$os --padding-side right --kv-keys-as-rows" \
  "$os $both" "$os" "$os --padding-spans --kv-keys-as-rows" \
  "$os $both --tiles '{\"kv\": [16, 128, 8, 2]}'" "$os $both --tiles '{\"kv\": [16, 64, 4, 2]}'"
step opamp_tiles $((${SWEEP_S:-150} + 50)) $py benchmarks/opamp_triton.py --sweep --lengths 4096 \
  --padded 0.25 --budget-s "${SWEEP_S:-150}" --out "$out/opamp_tiles.json"
# OpAmp's stacked path with its adapters recomputed in backward (fused.RECOMPUTE_ADAPTERS, off
# until this shows its time and memory) against the adapters kept, one layer with the paper's
# adapters (dim 512), beside SDPA, in one process
step opamp_stacked_ab 90 $py benchmarks/opamp_stacked.py --lengths 4096 8192 --repeats 3
# where the stacked path's time goes beyond its two branches' attention (2.0× SDPA's work; the
# H200 timed the step at 4.00× SDPA's time at 8192): one causal step of it and of SDPA taken
# apart by kernel, summed by kind (attention, matrix products, the rest)
step opamp_profile 60 $py benchmarks/opamp_stacked.py --profile --lengths 8192
step overhead 80 $py benchmarks/distributed_overhead.py --layers 2 --steps 6 --out "$out"
step lane_distributed 120 "${lane[@]}" -s tests/gpu/test_distributed_on_cuda.py
step lane_methods 120 "${lane[@]}" tests/gpu/test_methods_on_cuda.py tests/gpu/test_probes_on_cuda.py
step lane_small_dag 300 "${lane[@]}" tests/gpu/test_small_dag_on_cuda.py
grep -E "passed|failed|error" "$log" | tail -20
