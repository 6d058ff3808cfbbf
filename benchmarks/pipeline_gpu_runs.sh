#!/usr/bin/env bash
# StreamPipeline on one GPU as users pay for it, in one call on a 2-GPU machine (~8 minutes): whole runs in five
# paired rounds, split over the two GPUs (each run uses one), then the pipeline's GPU tests on the second GPU.
# Results and logs under $OUT (results.tgz), the tables last.
#   bash benchmarks/pipeline_gpu_runs.sh
set -u
source benchmarks/gpu_env.sh
run() { python benchmarks/pipeline_runs.py --rounds 5 --out $o "$@" 2>&1 | grep -v -E "$quiet"; }
(
  CUDA_VISIBLE_DEVICES=0 run --workloads article:8,article:32 --configs serial,auto,on+graph --steps 600 --tag h200-article
  CUDA_VISIBLE_DEVICES=0 run --workloads resnet50:128 --configs serial,auto --steps 300 --tag h200-resnet50-128
) > $o/gpu0.log 2>&1 &
(
  CUDA_VISIBLE_DEVICES=1 run --workloads resnet50:32,resnet50:32:bf16 --configs serial,auto,on+graph --steps 600 --tag h200-resnet50
  CUDA_VISIBLE_DEVICES=1 timeout 200 python -m pytest -m gpu tests/pipeline -q -p no:cacheprovider -x
) > $o/gpu1.log 2>&1 &
wait
tar czf $OUT/results.tgz -C $o .
tail -3 $o/gpu1.log
for f in $o/pipeline_runs-*.md; do grep -E "^\| |^- .*: [0-9]+ / " $f; done
