#!/usr/bin/env bash
# StreamPipeline on a GPU in two device calls of under 10 minutes each; logs and results under
# ${OUT:-benchmarks/results}, a short table last.
#   bash benchmarks/pipeline_gpu_check.sh check   # GPU tests, then auto vs serial in paired rounds (~6 min)
#   bash benchmarks/pipeline_gpu_check.sh table   # every column for the seven configurations (~8 min)
#   bash benchmarks/pipeline_gpu_check.sh graph   # GPU tests; auto (with its CUDA-graph way), on+graph and serial in
#                                                 # paired rounds on the backbone workloads (~6 min)
#   bash benchmarks/pipeline_gpu_check.sh auto    # auto, auto held serial, serial: longer paired rounds; a profiled
#                                                 # window of the augmentation workload at batch 64 (~8 min)
set -u
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
quiet="Warning|warn|Tip|GPU avail|TPU|HPU|LOCAL_RANK|max_steps"
case "${1:-check}" in
  check)
    timeout 200 python -m pytest -m gpu tests -q -p no:cacheprovider > "$out/gpu_tests.log" 2>&1
    timeout 300 python benchmarks/pipeline_throughput.py --configs serial,auto --steps 300 --tag h200-auto-paired \
      --workloads frozen:8:3,frozen:32:2,augment:32:2,balanced:32:2 --out "$out" 2>&1 | grep -v -E "$quiet" > "$out/auto.log"
    echo "== gpu tests"; tail -1 "$out/gpu_tests.log"
    echo "== auto vs serial (paired rounds)"
    grep -E "^\| |^- " "$out/pipeline_throughput-h200-auto-paired.md" ;;
  table)
    timeout 540 python benchmarks/pipeline_throughput.py --steps 300 --tag h200-full \
      --workloads frozen:8,balanced:32,augment:16,augment:64,frozen:32,augment:32,frozen:128 --out "$out" 2>&1 \
      | grep -v -E "$quiet" > "$out/full.log"
    grep -E "^\| " "$out/pipeline_throughput-h200-full.md" ;;
  graph)
    timeout 150 python -m pytest -m gpu tests -q -p no:cacheprovider > "$out/gpu_tests.log" 2>&1
    timeout 330 python benchmarks/pipeline_throughput.py --configs serial,auto,on+graph --steps 300 --tag h200-auto-graph \
      --workloads frozen:8:5,balanced:32:3,frozen:32:2 --out "$out" 2>&1 | grep -v -E "$quiet" > "$out/auto_graph.log"
    echo "== gpu tests"; tail -1 "$out/gpu_tests.log"
    grep -E "^\| |^- " "$out/pipeline_throughput-h200-auto-graph.md" ;;
  auto)
    timeout 480 python benchmarks/pipeline_throughput.py --configs serial,auto,auto_serial --steps 600 --tag h200-auto-long \
      --workloads frozen:8:5,balanced:32:4,augment:64:4 --out "$out" 2>&1 | grep -v -E "$quiet" > "$out/auto_long.log"
    timeout 90 python examples/gpu_augmentation.py --image-size 256 --batch-size 64 --steps 260 --workers 8 \
      --pipeline on --profile-at 200 --root "$out/augment64" > "$out/augment64_profile.log" 2>&1
    grep -E "^\| |^- " "$out/pipeline_throughput-h200-auto-long.md"
    grep -v -E "$quiet" "$out/augment64_profile.log" | tail -60 ;;
  *) echo "usage: pipeline_gpu_check.sh check|table|graph|auto" >&2; exit 2 ;;
esac
