#!/usr/bin/env bash
# On one GPU: the GPU tests, then whole runs of serial, auto and the graphed way in 5 paired rounds
# (~8 minutes). Results and logs straight under $OUT (a call cut short keeps what finished); a short table last.
#   bash benchmarks/pipeline_gpu_one.sh [WORKLOADS] [STEPS] [CONFIGS] [TAG]
# TESTS (the GPU test files; default below), SKIP_TESTS=1 and RUNS_TIMEOUT (seconds) in the environment.
set -u
source benchmarks/gpu_env.sh
workloads=${1:-article:8,resnet50:32,resnet50:32:bf16,article:32}
steps=${2:-600}
configs=${3:-serial,auto,on+graph}
tag=${4:-h200-one}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  tests=${TESTS:-tests/pipeline/test_gpu.py tests/profiling/test_profiler_gpu.py tests/transforms tests/distributed/test_gpu_nccl.py}
  timeout ${TESTS_TIMEOUT:-170} python -m pytest -m gpu -q -p no:cacheprovider -rs $tests > $OUT/gpu_tests.log 2>&1
fi
timeout ${RUNS_TIMEOUT:-400} python benchmarks/pipeline_runs.py --rounds ${ROUNDS:-5} --steps $steps --configs $configs \
  --workloads $workloads --out $OUT --tag $tag 2>&1 | grep -v -E "$quiet" > $OUT/runs.log
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log 2>/dev/null | tail -n 12
tail -n 3 $OUT/runs.log
for f in $OUT/pipeline_runs-$tag.md; do grep -E "^\| " $f | cut -c1-600; done
