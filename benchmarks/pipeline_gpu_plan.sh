#!/usr/bin/env bash
# On one GPU: the GPU tests, then several pipeline_runs.py sets, each "WORKLOADS@CONFIGS@STEPS@TAG@SECONDS", in
# 5 paired rounds. Results and logs straight under $OUT (a set cut short keeps the workloads it finished).
#   TESTS="tests/pipeline/test_gpu.py ..." bash benchmarks/pipeline_gpu_plan.sh "busy:32@serial,on,auto@300@busy@150" ...
set -u
source benchmarks/gpu_env.sh
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  tests=${TESTS:-tests/pipeline/test_gpu.py tests/profiling/test_profiler_gpu.py tests/transforms tests/distributed/test_gpu_nccl.py}
  timeout ${TESTS_TIMEOUT:-170} python -m pytest -m gpu -q -p no:cacheprovider -rs $tests > $OUT/gpu_tests.log 2>&1
fi
for spec in "$@"; do
  IFS=@ read -r workloads configs steps tag seconds <<< "$spec"
  echo "== $spec" >> $OUT/runs.log
  timeout ${seconds:-300} python benchmarks/pipeline_runs.py --rounds ${ROUNDS:-5} --steps $steps --configs $configs \
    --workloads $workloads --out $OUT --tag $tag 2>&1 | grep -v -E "$quiet" >> $OUT/runs.log
done
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log 2>/dev/null | tail -n 12
for f in $OUT/pipeline_runs-*.md; do grep -E "^\| " $f | cut -c1-400; done
