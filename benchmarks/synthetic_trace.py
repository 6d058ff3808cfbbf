"""A Kineto trace whose event mix is like a real training run's, at any size, for timing the analysis itself.

Each step (a ``ProfilerStep#N`` range on the training thread, with its GPU-side copy) holds Lightning's action
ranges, a DataLoader fetch, and a forward/backward/optimizer of nested CPU operators (``aten::linear`` >
``aten::addmm``...). Every leaf operator launches kernels through ``cudaLaunchKernel`` (correlation and flow
events as Kineto writes them), some copies and memsets, and allocates and frees memory (``[memory]`` instant
events); a few ``python_function`` frames wrap the model. The mix is about 30% flow events (two per launch, as
Kineto writes them), 22% memory events, 17% CPU operators, 15% runtime calls, 15% kernels, copies and memsets and
2% ranges and frames -- unlike the replicated ``with_stack`` fixture, which is mostly Python frames.

    python benchmarks/synthetic_trace.py OUT.pt.trace.json[.gz] [--events N] [--seed S]
"""

from __future__ import annotations

import argparse
import gzip
import random
from pathlib import Path

import orjson

_LEAVES = ("aten::addmm", "aten::mm", "aten::cudnn_convolution", "aten::add_", "aten::mul", "aten::relu",
           "aten::native_layer_norm", "aten::_softmax", "aten::copy_", "aten::fill_", "aten::sum")
_KERNELS = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "nvjet_tst_64x16_64x16_2x1_v_bz_NNT",
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
            "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>")
_PARENTS = ("aten::linear", "aten::conv2d", "aten::layer_norm", "aten::softmax", "autograd::engine::evaluate_function")
_HOOKS = ("[pl][profile][Strategy]SingleDeviceStrategy.training_step", "[pl][profile][Strategy]SingleDeviceStrategy.backward",
          "[pl][profile][LightningModule]Model.optimizer_step")


class _Writer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.events: list[dict] = []
        self.ext = 0
        self.corr = 0
        self.flow = 0
        self.addr = 1 << 20
        self.allocated = 0

    def x(self, cat: str, name: str, ts: float, dur: float, pid: int | str = 1, tid: int | str = 1, **args) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
                            "dur": round(dur, 3), "args": args})

    def op(self, name: str, ts: float, dur: float) -> int:
        self.ext += 1
        self.x("cpu_op", name, ts, dur, **{"External id": self.ext, "Sequence number": self.ext, "Fwd thread id": 0,
                                          "Record function id": 0, "Ev Idx": self.ext})
        return self.ext

    def launch(self, ext: int, ts: float, gpu_ts: float) -> float:
        """A runtime call at ``ts`` and its device work at ``gpu_ts``; returns when the device work ends."""
        self.corr += 1
        kind = self.rng.random()
        if kind < 0.85:
            rt, cat, name = "cudaLaunchKernel", "kernel", self.rng.choice(_KERNELS)
            extra = {"grid": [128, 1, 1], "block": [256, 1, 1], "blocks per SM": round(self.rng.uniform(0.1, 4), 3),
                     "est. achieved occupancy %": self.rng.randint(10, 100), "registers per thread": 64}
        elif kind < 0.95:
            rt, cat, name = "cudaMemcpyAsync", "gpu_memcpy", "Memcpy DtoD (Device -> Device)"
            extra = {"bytes": 1 << 16, "memory bandwidth (GB/s)": 900.0}
        else:
            rt, cat, name = "cudaMemsetAsync", "gpu_memset", "Memset (Device)"
            extra = {"bytes": 1 << 12, "memory bandwidth (GB/s)": 500.0}
        rt_dur = self.rng.uniform(2, 6)
        self.x("cuda_runtime", rt, ts, rt_dur, **{"External id": ext, "correlation": self.corr, "cbid": 211})
        dur = self.rng.uniform(2, 40)
        self.x(cat, name, gpu_ts, dur, pid=0, tid=7, **{"External id": ext, "correlation": self.corr, "device": 0,
                                                         "context": 1, "stream": 7, **extra})
        self.flow += 1
        for ph, when, pid, tid in (("s", ts, 1, 1), ("f", gpu_ts, 0, 7)):
            self.events.append({"ph": ph, "id": self.flow, "pid": pid, "tid": tid, "ts": round(when, 3), "cat": "ac2g",
                                "name": "ac2g", **({"bp": "e"} if ph == "f" else {})})
        return gpu_ts + dur

    def memory(self, ts: float, nbytes: int) -> None:
        self.allocated += nbytes
        self.addr += 4096
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
                            "ts": round(ts, 3), "args": {"Total Reserved": 1 << 30, "Total Allocated": self.allocated,
                                                         "Bytes": nbytes, "Addr": self.addr, "Device Type": 1,
                                                         "Device Id": 0}})

    def leaf(self, name: str, ts: float, gpu_ts: float) -> tuple[float, float]:
        """One operator with its launches and memory; returns (host end, device end)."""
        launches = self.rng.choice((1, 1, 2))
        dur = 6.0 * launches + self.rng.uniform(4, 12)
        ext = self.op(name, ts, dur)
        nbytes = 1 << self.rng.randint(10, 20)
        self.memory(ts + 0.5, nbytes)
        t = ts + 1.5
        for _ in range(launches):
            gpu_ts = max(gpu_ts, t + 5) + 0.5
            gpu_ts = self.launch(ext, t, gpu_ts)
            t += 6.0
        self.memory(ts + dur - 0.5, -nbytes)
        return ts + dur, gpu_ts

    def step(self, number: int, ts: float, gpu_ts: float) -> tuple[float, float]:
        start = ts
        self.ext += 1
        ext = self.ext
        fetch = self.rng.uniform(30, 80)
        self.x("user_annotation", "[pl][profile][_TrainingEpochLoop].train_dataloader_next", ts, fetch)
        self.x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", ts + 1, fetch - 2)
        ts += fetch + 2
        for hook in _HOOKS:
            hook_start = ts
            self.x("python_function", "train.py(42): training_step" if "training" in hook else "torch/optim/sgd.py(80): step",
                   ts + 0.5, 0)  # placeholder, sized below
            frame = self.events[-1]
            for _ in range(self.rng.randint(8, 14)):
                parent_start = ts
                parent = self.rng.choice(_PARENTS)
                children = self.rng.randint(1, 3)
                ts += 1.0
                for _ in range(children):
                    ts, gpu_ts = self.leaf(self.rng.choice(_LEAVES), ts, gpu_ts)
                    ts += 1.0
                self.op(parent, parent_start, ts - parent_start)
                ts += self.rng.uniform(2, 8)
            frame["dur"] = round(ts - hook_start - 1.0, 3)
            self.x("user_annotation", hook, hook_start, ts - hook_start)
            ts += 2.0
        self.x("user_annotation", f"ProfilerStep#{number}", start, ts - start, **{"External id": ext})
        self.x("gpu_user_annotation", f"ProfilerStep#{number}", start + 3, gpu_ts - start - 3, pid=0, tid=7,
               **{"External id": ext, "device": 0, "stream": 7})
        return ts + 1.0, gpu_ts


def synthetic_trace(n_events: int, seed: int = 0) -> dict:
    """A trace document of at least ``n_events`` events."""
    w = _Writer(seed)
    ts, gpu_ts, number = 1000.0, 1000.0, 0
    w.x("Trace", "PyTorch Profiler (0)", ts - 10, 0, pid="Spans", tid="PyTorch Profiler")
    while len(w.events) < n_events:
        ts, gpu_ts = w.step(number, ts, gpu_ts)
        number += 1
    w.events[0]["dur"] = round(max(ts, gpu_ts) - w.events[0]["ts"] + 10, 3)
    meta = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (python)"}}]
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "Synthetic GPU", "totalGlobalMem": 150 << 30, "computeMajor": 9,
                                  "computeMinor": 0, "numSms": 132}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
            "traceEvents": meta + w.events, "traceName": "synthetic.pt.trace.json"}


def write_trace(doc: dict, path: Path) -> None:
    """Write ``doc`` (gzipped when the name ends in ``.gz``), one event per line as Kineto does."""
    events = doc.pop("traceEvents")
    head = orjson.dumps(doc)[:-1] + b',\n"traceEvents": [\n'
    body = b",\n".join(orjson.dumps(ev) for ev in events)
    data = head + body + b"\n]}\n"
    doc["traceEvents"] = events
    path.write_bytes(gzip.compress(data, compresslevel=1) if path.name.endswith(".gz") else data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    doc = synthetic_trace(args.events, args.seed)
    write_trace(doc, args.out)
    print(f"wrote {len(doc['traceEvents'])} events to {args.out}")


if __name__ == "__main__":
    main()
