"""The examples as a newcomer runs them: a quiet run that ends with the HTML report and the next commands, and the
two seed workloads from their LightningCLI configs."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def _run(args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, proc.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU run's output")
def test_first_run_is_quiet_and_says_what_to_do_next(tmp_path):
    out, err = _run([os.path.join(EXAMPLES, "frozen_backbone.py"), "--steps", "24", "--every", "8",
                     "--image-size", "32", "--root", str(tmp_path / "runs")], cwd=tmp_path)
    both = out + err
    for noise in ("gpuGetDeviceCount", "Tip:", "GPU available", "Seed set", "Warning", "warn(", "USDT"):
        assert noise not in both, noise
    assert both.count("batches staged ahead") == 1  # the pipeline's report, once
    lines = err.strip().splitlines()  # Lightning writes the profiler's summary through its logger (stderr)
    report = next(line.split(": ", 1)[1] for line in lines if line.startswith("HTML report"))
    assert os.path.isfile(os.path.join(tmp_path, report))
    assert lines[-3] == "Next:" and lines[-1].split()[1:3] == ["--logdir", str(tmp_path / "runs" / "lightning_logs")]
    assert "streamprof analyze" in lines[-2]
    assert "No budget in this run (max_overhead=None)" in err  # the example's cost is not read against the 1% budget


@pytest.mark.parametrize("example", ["frozen_backbone.py", "gpu_augmentation.py"])
def test_help_says_what_the_example_does_in_whole_sentences(tmp_path, example):
    out, _ = _run([os.path.join(EXAMPLES, example), "--help"], cwd=tmp_path)
    description = " ".join(out.split("\n\n")[1].split())
    assert description.startswith("Train the") or description.startswith("The GPU-augmentation workload")
    assert description.endswith(".")


@pytest.mark.parametrize("config, extra", [
    ("frozen_backbone.yaml", ["--data.init_args.train_size=80", "--data.init_args.image_size=32"]),
    ("gpu_augmentation.yaml", ["--data.init_args.steps=10"]),
])
def test_lightning_cli_configs(tmp_path, config, extra):
    out, err = _run([os.path.join(EXAMPLES, "train.py"), "fit", "--config", os.path.join(EXAMPLES, "configs", config),
                     f"--trainer.default_root_dir={tmp_path}", "--trainer.profiler.skip_first=2",
                     "--trainer.profiler.every=5", *extra], cwd=tmp_path)
    assert "window 0: steps 4-6" in err and "HTML report" in err, out[-2000:] + err[-2000:]
