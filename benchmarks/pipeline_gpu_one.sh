#!/usr/bin/env bash
# On one GPU: the GPU tests, then whole runs of serial, auto and the graphed way in 5 paired rounds
# (~8 minutes). Results and logs under $OUT (results-TAG.tgz); a short table last.
#   bash benchmarks/pipeline_gpu_one.sh [WORKLOADS] [STEPS] [CONFIGS] [TAG]
set -u
source benchmarks/gpu_env.sh
workloads=${1:-article:8,resnet50:32,resnet50:32:bf16,article:32}
steps=${2:-600}
configs=${3:-serial,auto,on+graph}
tag=${4:-h200-one}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 170 python -m pytest -m gpu -q -p no:cacheprovider tests/pipeline/test_gpu.py tests/test_profiler_gpu.py \
    tests/transforms tests/distributed/test_gpu_nccl.py > $o/gpu_tests.log 2>&1
fi
timeout ${RUNS_TIMEOUT:-400} python benchmarks/pipeline_runs.py --rounds 5 --steps $steps --configs $configs \
  --workloads $workloads --out $o --tag $tag 2>&1 | grep -v -E "$quiet" > $o/runs.log
tar czf $OUT/results-$tag.tgz -C $o .
tail -n 2 $o/gpu_tests.log 2>/dev/null
tail -n 3 $o/runs.log
for f in $o/pipeline_runs-$tag.md; do grep -E "^\| |auto: StreamPipeline" $f | cut -c1-600; done
