#!/usr/bin/env bash
# auto against serial and the graphed way in 5 paired rounds, split over two GPUs, then the pipeline's GPU tests
# (~4 minutes). Results and logs under $OUT (results.tgz).
#   bash benchmarks/pipeline_gpu_auto_check.sh
set -u
source benchmarks/gpu_env.sh
runs="python benchmarks/pipeline_runs.py --rounds 5 --steps 600 --configs serial,auto,on+graph --out $o"
(CUDA_VISIBLE_DEVICES=0 timeout 200 $runs --workloads article:8,resnet50:32:bf16 --tag h200-auto-a 2>&1 \
  | grep -v -E "$quiet") > $o/gpu0.log 2>&1 &
(CUDA_VISIBLE_DEVICES=1 timeout 200 $runs --workloads resnet50:32 --tag h200-auto-b 2>&1 | grep -v -E "$quiet"; \
  CUDA_VISIBLE_DEVICES=1 timeout 60 python -m pytest -m gpu tests/pipeline -q -p no:cacheprovider) > $o/gpu1.log 2>&1 &
wait
tar czf $OUT/results.tgz -C $o .
tail -n 2 $o/gpu1.log
for f in $o/pipeline_runs-*.md; do grep -E "^\| |auto: StreamPipeline" $f | cut -c1-500; done
