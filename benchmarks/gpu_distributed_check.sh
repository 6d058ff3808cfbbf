#!/usr/bin/env bash
# One call on a 2-GPU machine (about 2.5 minutes): the distributed GPU tests, `pytest -m gpu tests/distributed` (the
# two-rank NCCL straggler benchmark; FSDP and FSDP2 under Lightning on one GPU, world 1, and on two GPUs with NCCL),
# their benchmark result files and the log under $OUT (results-distributed.tgz); a summary last.
#   bash benchmarks/gpu_distributed_check.sh
set -u
source benchmarks/gpu_env.sh
STREAMPROF_BENCH_OUT=$o timeout 450 python -m pytest -m gpu -q -p no:cacheprovider -rs tests/distributed \
  > $o/gpu_tests.log 2>&1
echo "pytest exit $?" >> $o/gpu_tests.log
tar czf $OUT/results-distributed.tgz -C $o .
tail -n 12 $o/gpu_tests.log | cut -c1-400
for f in $o/distributed_fsdp-*.md $o/distributed_stragglers-*.md; do
  [ -f "$f" ] && { echo "== $(basename $f)"; grep -E "^## |^\| [0-9]|^Collective|Problems" "$f" | cut -c1-400; }
done
