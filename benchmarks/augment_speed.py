"""Speed of the DESIGN §2 GPU-augmentation pipeline: our batch transforms vs per-image torchvision.

Pipeline: ToFloat (ToDtype float32, scale) -> RandomCrop 128 -> Resize 256 -> RandomRotation 45 -> GaussianBlur 7
-> Normalize, on uint8 batches of 3x256x256 images resident on ``--device``.

    python -m benchmarks augment-speed [--device cuda] [--batch-sizes 16 32 64] [--iters 100] [--warmup 10] [--tag h200]

Rows: (a) ours, ``Compose`` merging crop+resize+rotation into one warp; (b) ours, every step its own op;
(c) "published style": a Python loop over the images applying torchvision.transforms.v2 functional ops one image
at a time with per-image random parameters; (d) torchvision.transforms.v2.Compose on the whole batch (one set of
random parameters for the whole batch: NOT per-sample, for reference only). Times are ms per batch, median of
``--repeat`` rounds of ``--iters`` batches each, measured with CUDA events on CUDA (after ``--warmup`` batches) and
``time.perf_counter`` on CPU; "host ms" is the time spent issuing the work (CPU side) per batch.
Writes ``<out>/augment_speed-<tag>.{json,md}`` (default ``benchmarks/results/augment-speed``, tag ``<device>-<date>``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _record import code_version, invocation, results_dir  # noqa: E402
from lightning_streamprof.transforms import (  # noqa: E402
    Compose,
    GaussianBlur,
    Normalize,
    RandomCrop,
    RandomRotation,
    Resize,
    ToFloat,
)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CROP, SIZE, DEGREES, KERNEL, SIGMA = 128, 256, 45.0, 7, (0.1, 2.0)


def ours(merge: bool, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    steps = [ToFloat(), RandomCrop(CROP), Resize(SIZE), RandomRotation(DEGREES), GaussianBlur(KERNEL, SIGMA)]
    aug = Compose(
        steps + [Normalize(MEAN, STD)],
        merge=merge,
        generator=torch.Generator(device=device).manual_seed(0),
    )
    return aug


def per_image() -> Callable[[torch.Tensor], torch.Tensor]:
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    rng = random.Random(0)

    def run(batch: torch.Tensor) -> torch.Tensor:
        out = []
        h, w = batch.shape[-2:]
        for img in batch:
            img = F.to_dtype(img, torch.float32, scale=True)
            top, left = rng.randint(0, h - CROP), rng.randint(0, w - CROP)
            img = img[:, top : top + CROP, left : left + CROP]
            img = F.resize(img, [SIZE, SIZE], interpolation=InterpolationMode.BILINEAR, antialias=False)
            img = F.rotate(img, rng.uniform(-DEGREES, DEGREES), interpolation=InterpolationMode.BILINEAR, fill=0)
            s = rng.uniform(*SIGMA)
            img = F.gaussian_blur(img, [KERNEL, KERNEL], [s, s])
            out.append(F.normalize(img, list(MEAN), list(STD)))
        return torch.stack(out)

    return run


def whole_batch_torchvision() -> Callable[[torch.Tensor], torch.Tensor]:
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.ToDtype(torch.float32, scale=True),
            v2.RandomCrop(CROP),
            v2.Resize(SIZE, interpolation=InterpolationMode.BILINEAR, antialias=False),
            v2.RandomRotation(DEGREES, interpolation=InterpolationMode.BILINEAR, fill=0),
            v2.GaussianBlur(KERNEL, SIGMA),
            v2.Normalize(list(MEAN), list(STD)),
        ]
    )


def time_ms(
    fn: Callable[[torch.Tensor], torch.Tensor], batch: torch.Tensor, iters: int, warmup: int, repeat: int
) -> tuple[float, float]:
    """Median over ``repeat`` rounds of (ms per call, host ms per call spent issuing the work)."""
    cuda = batch.device.type == "cuda"
    for _ in range(warmup):
        fn(batch)
    if cuda:
        torch.cuda.synchronize(batch.device)
    rounds, host = [], []
    for _ in range(repeat):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(batch)
            host.append((time.perf_counter() - t0) * 1000 / iters)
            end.record()
            end.synchronize()
            rounds.append(start.elapsed_time(end) / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(batch)
            rounds.append((time.perf_counter() - t0) * 1000 / iters)
            host.append(rounds[-1])
    return statistics.median(rounds), statistics.median(host)


def machine(device: torch.device) -> dict:
    info = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
    }
    try:
        import torchvision

        info["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


ROWS = {
    "a": "ours, merged warp (Compose)",
    "b": "ours, one op per step (merge=False)",
    "c": "per-image torchvision v2 loop (published style)",
    "d": "torchvision v2 Compose on the whole batch (NOT per-sample)",
}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--image-size", type=int, default=256)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tag", default=None, help="file tag, e.g. h200-20261129 (default: <device type>-<date>)")
    ap.add_argument("--out", type=Path, default=results_dir(__file__))
    args = ap.parse_args(argv)
    if args.image_size < CROP:
        ap.error(f"--image-size must be at least the crop size {CROP}")

    device = torch.device(args.device)
    torch.manual_seed(0)
    fns = {"a": ours(True, device), "b": ours(False, device), "c": per_image(), "d": whole_batch_torchvision()}
    results = []
    for bs in args.batch_sizes:
        g = torch.Generator().manual_seed(bs)
        shape = (bs, 3, args.image_size, args.image_size)
        batch = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g).to(device)
        row = {"batch_size": bs}
        for key, fn in fns.items():
            row[key], row[f"{key}_host"] = time_ms(fn, batch, args.iters, args.warmup, args.repeat)
        row["speedup_a_vs_c"] = row["c"] / row["a"]
        row["speedup_b_vs_c"] = row["c"] / row["b"]
        row["speedup_a_vs_b"] = row["b"] / row["a"]
        results.append(row)

    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    cli = list(argv if argv is not None else sys.argv[1:])
    for i, a in enumerate(cli[:-1]):
        if a == "--out" and not Path(cli[i + 1]).resolve().is_relative_to(ROOT):
            cli[i + 1] = "<dir>"
    command = " ".join([invocation(__file__), *(a if a == "<dir>" else shlex.quote(a) for a in cli)])
    doc = {
        "benchmark": "augment_speed",
        "date": now.isoformat(),
        "command": command,
        "code": code_version(),
        "machine": machine(device),
        "device": str(device),
        "pipeline": (
            f"ToFloat, RandomCrop {CROP}, Resize {SIZE}, RandomRotation {DEGREES:g}, GaussianBlur {KERNEL}, Normalize"
        ),
        "image_size": args.image_size,
        "iters": args.iters,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "rows": ROWS,
        "results_ms_per_batch": results,
        "target": "ours (a) >= 8x faster than (c) at batch 32",
    }
    lines = [
        f"# augment_speed ({doc['date']})",
        "",
        f"- machine: {', '.join(f'{k} {v}' for k, v in doc['machine'].items())}",
        f"- command: `{command}`, code {code_version()}",
        f"- pipeline: {doc['pipeline']}; uint8 {args.image_size}x{args.image_size} batches on {device}",
        f"- ms per batch, median of {args.repeat} rounds of {args.iters} batches ({args.warmup} warm-up)",
        "",
        "| batch | (a) merged | (b) unmerged | (c) per-image tv | (d) tv whole batch* | a vs c | b vs c | a vs b "
        "| host ms (a) / (b) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['batch_size']} | {r['a']:.3f} | {r['b']:.3f} | {r['c']:.3f} | {r['d']:.3f} | "
            f"{r['speedup_a_vs_c']:.1f}x | {r['speedup_b_vs_c']:.1f}x | {r['speedup_a_vs_b']:.2f}x | "
            f"{r['a_host']:.3f} / {r['b_host']:.3f} |"
        )
    lines += [
        "",
        "\\* (d) draws one set of random parameters for the whole batch: not per-sample, reference only.",
        "Host ms: time the Python thread spends issuing one batch; when it is close to the batch time, the pipeline",
        "is bound by the host (kernel launches), not by the GPU.",
        "",
    ]
    for k, v in ROWS.items():
        lines.append(f"- ({k}) {v}")
    md = "\n".join(lines) + "\n"
    print(md)

    tag = args.tag or f"{device.type}-{now:%Y%m%d}"
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"augment_speed-{tag}"
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    stem.with_suffix(".md").write_text(md)
    print(f"wrote {stem}.json and {stem}.md")
    return doc


if __name__ == "__main__":
    main()
