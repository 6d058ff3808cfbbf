"""Names shared by the profiler, the pipeline and the analysis: range names, trace keys and their tests.

Every string that one part writes into a trace and another reads back is spelled here once.
"""

from __future__ import annotations

import re

#: prefix of Lightning's profiler actions recorded as ``record_function`` ranges (Lightning's own spelling)
PL_PROFILE = "[pl][profile]"
#: one range per training batch: ``ProfilerStep#<global batch index>`` (torch.profiler's spelling)
STEP_PREFIX = "ProfilerStep#"
#: StreamPipeline's profiler actions (``trainer.profiler.profile(PIPELINE_ACTION + ...)``)
PIPELINE_ACTION = "[StreamPipeline]"
#: every StreamPipeline range in a trace starts with this
PIPELINE_RANGE = PL_PROFILE + PIPELINE_ACTION
#: the action that fetches (and on the loop's thread stages) the next batch
STAGE_NEXT_BATCH_ACTION = PIPELINE_ACTION + ".stage_next_batch"
#: the range around staging a batch on the staging thread
STAGE_ON_THREAD_RANGE = PIPELINE_RANGE + ".stage_on_thread"
#: the LightningModule/DataModule batch hook ranges, e.g. ``[pl][profile][LightningModule]Model.on_after_batch_transfer``
LIGHTNING_MODULE_RANGE = PL_PROFILE + "[LightningModule]"
#: the LightningModule's class name in one of its hook ranges (group 1)
LIGHTNING_MODULE_CLASS = re.compile(r"^" + re.escape(LIGHTNING_MODULE_RANGE) + r"(\w+)\.")
#: the ``metadata`` key of the trace under which StreamProfiler records the window (run, window, steps, host)
TRACE_METADATA_KEY = "streamprof"
#: StreamPipeline's report of a run, written by the profiler in the run's directory beside its windows
PIPELINE_NOTES_FILE = "streampipeline.txt"
#: the HTML report the profiler writes in the run's directory at the end of a stage
#: the marker that asks a running job for a window (``streamprof record``), in ``dirpath`` or the run's directory
REQUEST_FILE = "streamprof-record"
REPORT_FILE = "report.html"
#: the counter track of GPU utilization the profiler adds to saved traces (Perfetto shows it on the timeline)
UTILIZATION_COUNTER = "GPU utilization (%)"
#: the name of Kineto's own span event (category ``Trace``): where the profiler recorded
PROFILER_SPAN = "PyTorch Profiler (0)"
#: the name of ``profile_memory`` instant events
MEMORY_EVENT = "[memory]"
#: prefixes of the host-side collective operators
COMMUNICATION_PREFIXES = ("nccl:", "gloo:")

_DATALOADER = "enumerate(DataLoader)#"
_DATAPIPE = "enumerate(DataPipe)#"
_OPTIMIZER = "Optimizer."
#: ranges torch-tb-profiler never lists as operators besides steps, data loading and optimizers
_NOT_OPERATORS = frozenset({"DataParallel.forward", "DistributedDataParallel.forward"})
_STEP_NUMBER = re.compile(r"^ProfilerStep#(\d+)$")


def pl_range(action: str) -> str:
    """The range name Lightning's profiler gives ``action``."""
    return PL_PROFILE + action


def step_name(number: int) -> str:
    """``ProfilerStep#<number>``."""
    return f"{STEP_PREFIX}{number}"


def step_number(name: str) -> int | None:
    """``N`` of ``ProfilerStep#N``; None for any other name."""
    match = _STEP_NUMBER.match(name)
    return int(match.group(1)) if match else None


def is_step(name: str) -> bool:
    return name.startswith(STEP_PREFIX)


def is_dataloader(name: str) -> bool:
    """PyTorch's DataLoader ranges, as torch-tb-profiler reads them: ``enumerate(DataLoader)#...__next__``."""
    return (name.startswith(_DATALOADER) and name.endswith(".__next__")) or name.startswith(_DATAPIPE)


def loader_uses_workers(name: str) -> bool:
    """Whether a DataLoader range is the multi-process iterator's (``num_workers > 0``)."""
    return is_dataloader(name) and "MultiProcessing" in name


def is_lightning_fetch(name: str) -> bool:
    """Lightning's batch fetch range, recorded by StreamProfiler: the DataLoader signal of last resort."""
    return name.startswith(PL_PROFILE) and name.endswith("_dataloader_next")


def is_communication(name: str) -> bool:
    """A host-side collective operator (``nccl:all_reduce``, ``gloo:broadcast``...)."""
    return name.startswith(COMMUNICATION_PREFIXES)


def is_operator(name: str) -> bool:
    """Whether a CPU-operator range is an operator in torch-tb-profiler's operator view (not a step, a data
    loading range, an optimizer range or a data-parallel wrapper)."""
    return not (is_step(name) or is_dataloader(name) or name.startswith(_OPTIMIZER) or name in _NOT_OPERATORS)


#: Lightning's kinds of hooks and actions, as its profiler names them (``[LightningModule]Model.training_step``)
HOOK_KINDS = ("[LightningModule]", "[Callback]", "[Strategy]", "[LightningDataModule]", "[_TrainingEpochLoop]",
              "[_EvaluationLoop]", "[_PredictionLoop]", PIPELINE_ACTION)


def is_lightning_hook(name: str) -> bool:
    """A Lightning profiler action or hook as a trace records it: ``[pl][profile]...`` (PyTorchProfiler's and
    StreamProfiler's spelling) or ``[LightningModule]...``/``[Callback]...`` written without the prefix."""
    return name.startswith(PL_PROFILE) or name.startswith(HOOK_KINDS)


def hook_label(name: str, kind: bool = True) -> str:
    """A short label for a Lightning range: ``[pl][profile][Strategy]SingleDeviceStrategy.training_step`` ->
    ``training_step (Strategy)`` (``kind=False``: ``training_step``); a callback's keeps its class
    (``EarlyStopping.on_train_epoch_end (Callback)``); other names are returned as they are."""
    rest = name[len(PL_PROFILE):] if name.startswith(PL_PROFILE) else name
    for k in HOOK_KINDS:
        if rest.startswith(k):
            owner, _, hook = rest[len(k):].rpartition(".")
            if k == "[Callback]" and owner:
                hook = f"{owner.split('{', 1)[0]}.{hook}"
            return f"{hook} ({k[1:-1]})" if kind else hook
    return rest if name.startswith(PL_PROFILE) else name
