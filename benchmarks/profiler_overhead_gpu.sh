#!/usr/bin/env bash
# One call on one H200 (under 9 minutes): adds rounds to the profiler-overhead result file carried along in the
# working tree, then prints the table. Each call continues where the last one stopped; about 3 calls complete
# 7 rounds of no profiler against profiler="streamprof" and 3 rounds of the full options and PyTorchProfiler, on the
# host-bound ViT-S/16 linear probe (bf16-mixed, batch 64) and the GPU-bound segmentation (batch 32), 2,000 steps each.
#   bash benchmarks/profiler_overhead_gpu.sh
# The updated benchmarks/results/profiler_overhead-$TAG.{jsonl,md} come back under $OUT: copy them over the
# ones in benchmarks/results/ (and commit) before the next call.
set -u
source benchmarks/gpu_env.sh
# the series of the code since the trace is saved off the training thread and windows are planned within 3/4 of the
# budget (h200-overhead: the series before, code 9e0f7a9-8793b3e)
tag=${TAG:-h200-overhead-b}
# EXTRAS_LAST=--extras-last puts the extra configurations (EXTRA_CONFIGS, "" for none) in the last 3 rounds;
# ROUNDS=N stops this call at round N
EXTRAS_LAST=${EXTRAS_LAST:-}
timeout ${RUNS_TIMEOUT:-450} python benchmarks/profiler_overhead.py --workloads vit:64:bf16,seg:32 --steps 2000 \
  --rounds ${ROUNDS:-7} --extra-rounds 3 --extra-configs "${EXTRA_CONFIGS-streamprof-full,pytorch}" $EXTRAS_LAST \
  --workers 4 --time-limit ${TIME_LIMIT:-400} --run-timeout 200 --out $OUT --tag $tag \
  --resume benchmarks/results/profiler_overhead-$tag.jsonl > $o/overhead.log 2>&1
echo "profiler_overhead exit $?"
cp $o/overhead.log $OUT/profiler_overhead-$tag.log 2>/dev/null
grep -E '^\{' $o/overhead.log | cut -c1-300 | tail -n 20
grep -E '^(\||- )' $OUT/profiler_overhead-$tag.md | cut -c1-400
