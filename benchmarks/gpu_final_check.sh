#!/usr/bin/env bash
# One call on a 2-GPU machine (~9 minutes): the two-rank straggler benchmark (NCCL), then auto's single-GPU paired
# rounds split over the two GPUs, then the pipeline's GPU tests. Results and logs under $OUT (results.tgz).
#   bash benchmarks/gpu_final_check.sh
set -u
source benchmarks/gpu_env.sh
timeout 180 python benchmarks/distributed_stragglers.py --out $o --tag h200x2 > $o/stragglers.log 2>&1
echo "stragglers exit $?" >> $o/stragglers.log
runs="python benchmarks/pipeline_runs.py --rounds 5 --steps 600 --configs serial,auto,on+graph --out $o"
(CUDA_VISIBLE_DEVICES=0 timeout 240 $runs --workloads article:8,article:32 --tag h200-article \
  2>&1 | grep -v -E "$quiet") > $o/gpu0.log 2>&1 &
(CUDA_VISIBLE_DEVICES=1 timeout 240 $runs --workloads resnet50:32,resnet50:32:bf16 --tag h200-resnet50 2>&1 \
  | grep -v -E "$quiet"; CUDA_VISIBLE_DEVICES=1 timeout 80 python -m pytest -m gpu tests/pipeline -q -p no:cacheprovider) \
  > $o/gpu1.log 2>&1 &
wait
tar czf $OUT/results.tgz -C $o .
tail -n 2 $o/gpu1.log; tail -n 30 $o/stragglers.log | cut -c1-300
for f in $o/pipeline_runs-*.md; do grep -E "^\| |auto: StreamPipeline" $f | cut -c1-600; done
