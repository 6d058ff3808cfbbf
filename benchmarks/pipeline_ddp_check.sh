#!/usr/bin/env bash
# StreamPipeline under DDP taken apart, plus the single-GPU state of the code and the Lightning-made traces,
# in one call on a 2-GPU machine; everything under $OUT (all.tgz), the tables last.
#   bash benchmarks/pipeline_ddp_check.sh
set -u
source benchmarks/gpu_env.sh
CUDA_VISIBLE_DEVICES=0 timeout 120 python benchmarks/capture_traces.py --out $o/traces \
  --scenarios lightning_pytorchprofiler_augment,streamprof_augment --batch-size 32 --image-size 256 > $o/capture.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 200 python benchmarks/pipeline_runs.py --workloads article:8,resnet50:32 \
  --configs serial,auto,on,on+graph --steps 400 --rounds 1 --tag h200-1gpu-before --out $o 2>&1 | grep -v -E "$quiet" > $o/single.log
timeout 300 python benchmarks/pipeline_ddp_diagnose.py --devices 2 --workloads resnet50:16 --steps 400 --rounds 1 \
  --profile serial,copy,on --profile-at 250 --profile-stack --tag h200-ddp-diagnose --out $o 2>&1 | grep -v -E "$quiet" > $o/ddp.log
tar czf $OUT/all.tgz -C $o .
tail -3 $o/capture.log
grep -E "^\| |^- " $o/pipeline_runs-h200-1gpu-before.md
grep -E "^\| |^- " $o/pipeline_runs-h200-ddp-diagnose.md
