#!/usr/bin/env bash
# StreamPipeline under DDP on two GPUs (NCCL), then the single-GPU paired rounds of auto, split over the two GPUs,
# in one call (~9 minutes). Results and logs under $OUT (results.tgz), the tables last.
#   bash benchmarks/pipeline_gpu_ddp_runs.sh
set -u
source benchmarks/gpu_env.sh
run() { python benchmarks/pipeline_runs.py --rounds 5 --out $o "$@" 2>&1 | grep -v -E "$quiet"; }
timeout 270 python benchmarks/pipeline_runs.py --rounds 5 --out $o --devices 2 --workloads resnet50:16 \
  --configs serial,auto,on+graph,copy --steps 600 --tag h200x2-ddp > $o/ddp.log 2>&1
(CUDA_VISIBLE_DEVICES=0 timeout 290 run --workloads article:8,article:32 --configs serial,auto,on+graph --steps 600 \
  --tag h200-article) > $o/gpu0.log 2>&1 &
(CUDA_VISIBLE_DEVICES=1 timeout 290 run --workloads resnet50:32,resnet50:32:bf16 --configs serial,auto,on+graph \
  --steps 600 --tag h200-resnet50) > $o/gpu1.log 2>&1 &
wait
tar czf $OUT/results.tgz -C $o .
for f in $o/pipeline_runs-*.md; do grep -E "^\| |auto: StreamPipeline" $f | cut -c1-400; done
