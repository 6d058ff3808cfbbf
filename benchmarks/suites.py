"""The benchmark suites, by the question each answers: the script that runs it, where it runs and how long it takes,
what it writes and how to read it (no torch: ``python -m benchmarks --list`` and the results index read this)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


@dataclass(frozen=True)
class Suite:
    name: str
    script: str  # in benchmarks/
    question: str  # a key of QUESTIONS
    example: str  # the arguments of a typical run
    where: str  # CPU, one H200, two H200s, and how long
    reading: str  # how to read its result
    prefixes: tuple[str, ...] = ()  # the result files' name prefixes besides the script's own


QUESTIONS = {
    "pipeline": "How fast does StreamPipeline make training?",
    "cost": "What does the profiler cost a training run?",
    "analysis": "How fast, and in how much memory, is a trace analysed?",
    "fidelity": "Are the numbers right, against torch-tb-profiler and Holistic Trace Analysis?",
    "distributed": "Does the distributed aggregation scale, and does it hold when ranks are slow or die?",
}

SUITES = [
    Suite("pipeline-speed", "pipeline_runs.py", "pipeline",
          "--workloads article:8,resnet50:32 --configs serial,on,auto --steps 1000 --rounds 5",
          "one H200: 15-20 s per run (a workload, a configuration, a round) of 300-1000 steps, the zoo's "
          "libraries longer; 5 rounds of 3 configurations: 4-5 minutes a workload; two H200s with --devices 2",
          "steps/s per configuration and its median per-round ratio to serial (`x serial`): above 1 the pipeline "
          "wins; compare rows within a file only, the host drifts by up to 10% between runs; `pipeline_pool-*`: "
          "auto's rounds of several files pooled by `python -m benchmarks pool`",
          prefixes=("pipeline_pool",)),
    Suite("pipeline-throughput", "pipeline_throughput.py", "pipeline",
          "--workloads frozen:8,augment:32 --steps 300",
          "one H200: about 8 minutes for seven workloads (the older suite: pipeline-speed times whole runs)",
          "steps/s of serial, the pipeline and hand-written loops beside the loader's and the GPU's ceilings",
          prefixes=("augment64_profile",)),
    Suite("auto-fake-host", "auto_fake_host.py", "pipeline", "--seeds 100 --steps 10000",
          "CPU: about 10 seconds",
          "of seeded runs on a drifting fake host, how many choose the truly faster way and revert, and what the "
          "trials cost of a run (the CPU tests' host and rule)"),
    Suite("mark-power", "mark_power.py", "pipeline",
          "benchmarks/results/pipeline-speed/pipeline_runs-h100-i34-*.json --tag h100-i34", "CPU: a few seconds",
          "from measured rounds, the spread of two runs doing the same work, and the chance that a set of k rounds "
          "meets auto's mark and keeps its floor for a given true ratio: how many rounds a set needs"),
    Suite("pipeline-host-overhead", "pipeline_host_overhead.py", "pipeline", "--rounds 5",
          "CPU: about 2 minutes",
          "host milliseconds per step that staging adds (inline and on the staging thread) on 30 tiny layers"),
    Suite("pipeline-ddp-diagnose", "pipeline_ddp_diagnose.py", "pipeline",
          "--devices 2 --workloads resnet50:16 --steps 400 --rounds 1 --profile serial,copy,on",
          "two H200s: about 5 minutes",
          "the staged copy under DDP taken apart: each piece's steps/s against serial"),
    Suite("augment-speed", "augment_speed.py", "pipeline", "--device cuda",
          "one H200: about 1 minute",
          "milliseconds per batch of the GPU augmentation: this package's batch transforms against per-image "
          "torchvision"),
    Suite("host-time", "host_time.py", "pipeline", "--workload augment --batch 16 --steps 300",
          "one H200: about 1 minute",
          "where a step's host time goes: Lightning's SimpleProfiler per action, the hand loop's parts"),
    Suite("profiler-overhead", "profiler_overhead.py", "cost",
          "--workloads vit:64:bf16,seg:32 --steps 2000 --rounds 7 --extra-rounds 3",
          "CPU: --steps 300 --workers 0 in about 10 minutes; one H200: about 3 calls of 9 minutes (--resume "
          "continues a series)",
          "each profiled run over its round's run without a profiler: the median ratio and its spread; the "
          "profiler's own stated cost beside it"),
    Suite("overhead-noise", "overhead_noise.py", "cost",
          "benchmarks/results/profiler-overhead/profiler_overhead-h200-overhead-b.jsonl --tag h200",
          "CPU: seconds (it reads result series)",
          "how many paired rounds it takes to tell a given cost from the host's noise"),
    Suite("hook-cost", "hook_cost.py", "cost", "--steps 2000 --rounds 7",
          "CPU: about 3 minutes",
          "microseconds per step that the profiler's hooks add with no window, against none and Lightning's scope"),
    Suite("window-cost", "window_cost.py", "cost", "--windows 12",
          "one H200: about 3 minutes",
          "milliseconds of one profiling window, part by part (Kineto's prepare, start, stop, export)"),
    Suite("window-steps", "window_steps.py", "cost", "--steps 620 --every 60 --rounds 3",
          "CPU: about 5 minutes",
          "each step's time by its place around the windows and the threads' CPU time: where a window's cost "
          "falls"),
    Suite("first-window-calls", "first_window_calls.py", "cost", "--active 1,2,3,5 --rounds 3",
          "CPU: about 3 minutes",
          "what Kineto's calls in the training thread cost in the first window, by recorded steps and options"),
    Suite("long-run-memory", "long_run_memory.py", "cost", "--steps 20000 --every 50 --baseline",
          "CPU: about 20 minutes (the test suite runs 150 steps)",
          "the process's memory from window to window (flat: no leak), export lag and the summary's length"),
    Suite("memory-history-cost", "memory_history_cost.py", "cost", "--rounds 9 --block 40",
          "one H200: about 2 minutes",
          "per-step cost of the CUDA allocator's records (live stacks, full history, with C++ frames), paired blocks"),
    Suite("step-watch", "step_watch.py", "cost", "--runs 200 --steps 20000",
          "CPU: about a minute at the defaults",
          "the watch's nanoseconds per step on the hot path; the windows it would record on noisy runs with no "
          "slowdown (want none), and the steps until it fires on a slowdown"),
    Suite("analysis-speed", "analysis_speed.py", "analysis", "--skip-peers --repeat 5",
          "CPU: about 5 minutes on a 2,000,000-event trace",
          "seconds and peak memory of reading and analysing one large trace, against json.load and peers"),
    Suite("hta-analyses-speed", "hta_analyses_speed.py", "analysis", "TRACE [TRACE...] --repeat 3",
          "CPU: about 1 minute",
          "seconds of each HTA-style analysis beside reading the trace"),
    Suite("hostile-traces", "hostile_traces.py", "analysis", "--tag cpu",
          "CPU: about 1 minute",
          "seconds and peak memory of `streamprof analyze` on two hostile traces: bounded, no blow-up"),
    Suite("compare-tb-profiler", "compare_tb_profiler.py", "fidelity", "--tbp-python .venv-tbp/bin/python",
          "CPU: about 2 minutes (torch-tb-profiler 0.4.3 in its own virtual environment)",
          "each metric of ours against torch-tb-profiler's on the same traces, within the stated tolerance"),
    Suite("hta-parity", "hta_parity.py", "fidelity", "--hta-python HTA_PYTHON TRACE [TRACE...]",
          "CPU: about 2 minutes (HolisticTraceAnalysis in its own virtual environment)",
          "every number both compute, ours against HTA's, and the differences explained"),
    Suite("hta-load", "hta_load.py", "fidelity", "WINDOW_DIR",
          "CPU: seconds (run with HTA's interpreter)",
          "whether HTA loads a StreamProfiler window directory with every rank"),
    Suite("fuzz-traces", "fuzz_traces.py", "fidelity", "--examples 10000",
          "CPU: about 30 minutes",
          "the inputs analysed and rejected; no broken promise, and the slowest input"),
    Suite("capture-traces", "capture_traces.py", "fidelity",
          "--scenarios lightning_pytorchprofiler_augment,streamprof_augment --batch-size 32 --image-size 256",
          "one H200: about 2 minutes (CPU: smaller sizes)",
          "real Kineto traces written for the fixtures and the comparisons (no table)"),
    Suite("distributed-gather", "distributed_gather.py", "distributed",
          "--ranks 16384 --per-host 8 --windows 3 --timeout 4",
          "CPU: about 10 minutes at 16,384 simulated ranks",
          "rank 0's gather and scoring time per window, bytes per rank, what a dead rank or host costs"),
    Suite("distributed-scoring", "distributed_scoring.py", "distributed", "--ranks 1024 --repeat 5",
          "CPU: about 1 minute",
          "per-rank payload size and rank 0's decode, concatenation and scoring time"),
    Suite("distributed-stragglers", "distributed_stragglers.py", "distributed", "--accelerator cpu",
          "CPU: about 2 minutes (gloo); two H200s: about 3 minutes (NCCL, the default)",
          "the injected slow rank flagged, live and post hoc, and balanced runs flagging nobody"),
    Suite("distributed-fsdp", "distributed_fsdp.py", "distributed", "--accelerator cpu",
          "CPU: about 3 minutes (gloo); one or two H200s: about 2 minutes",
          "FSDP's all-gathers and reduce-scatters found per rank, their hidden and exposed time, a straggler "
          "flagged"),
    Suite("gpu-tests", "", "pipeline", "", "one or two H200s: the runner's --tests",
          "the GPU tests' summary at each state of the code (written by the GPU runner, no script)"),
]

BY_NAME = {s.name: s for s in SUITES}


def suite_of(script_or_file: str) -> Suite | None:
    """The suite whose script is ``script_or_file`` (a path or a name), or whose results a file name starts with."""
    name = Path(script_or_file).name
    for s in SUITES:
        if s.script and name == s.script:
            return s
    for s in sorted(SUITES, key=lambda s: -max(map(len, result_prefixes(s)))):
        if any(name.startswith(p + "-") or name.startswith(p + ".") for p in result_prefixes(s)):
            return s
    return None


def result_prefixes(s: Suite) -> tuple[str, ...]:
    """The name prefixes of a suite's result files: its script's name and the extra ones."""
    own = s.script.removesuffix(".py") if s.script else s.name.replace("-", "_")
    return (own, *s.prefixes)


def results_dir(script_file: str) -> Path:
    """``benchmarks/results/<suite>/`` of the script ``script_file``: where it writes by default."""
    s = suite_of(script_file)
    return RESULTS / s.name if s else RESULTS
