#!/usr/bin/env bash
# Install this checkout on a GPU machine that has torch and Lightning but no package registry: the wheels of our
# small dependencies travel in .whl/ (see benchmarks/results/README.md), the package itself without its dependencies.
set -eu
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || python3 -m pip install --no-deps --no-build-isolation -e .
python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__, torch.cuda.device_count(), 'GPUs')"
python3 -c "import orjson, msgspec, isal" 2>/dev/null || {
  echo "gpu_setup: orjson, msgspec or isal is missing on this machine: put their wheels in .whl/ and carry it" \
       "(pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64" \
       "-d .whl orjson msgspec isal timm kornia kornia_rs diffusers)" >&2
  exit 1
}
