# Sourced by the GPU call scripts: install this checkout (gpu_setup.sh), a scratch folder $o for results and logs,
# and $quiet, the pattern of Lightning's start-up chatter that the logs leave out.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
bash benchmarks/gpu_setup.sh || exit 1
o=/tmp/o
mkdir -p "$o"
quiet="Warning|warn|Tip|GPU avail|TPU|HPU|LOCAL_RANK|max_steps|litlogger|Seed set"
