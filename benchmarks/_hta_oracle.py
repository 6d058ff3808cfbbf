"""HTA's own numbers for one trace, as JSON on stdout (run with an interpreter that has HolisticTraceAnalysis).

    <hta python> benchmarks/_hta_oracle.py TRACE [--operator NAME]

Every value is HTA's, in its units (microseconds, GB/s); an analysis that fails is reported with its error. Used by
``hta_parity.py``; it imports nothing of ours.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import traceback
import warnings


def _try(out: dict, key: str, fn) -> None:
    try:
        out[key] = fn()
    except Exception as err:  # noqa: BLE001 - HTA raises on traces it cannot handle; the report says so
        out[key] = {"error": f"{type(err).__name__}: {err}", "where": traceback.format_exc().splitlines()[-3:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--operator", default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    import hta
    from hta.analyzers.cuda_kernel_analysis import CudaKernelAnalysis
    from hta.trace_analysis import TraceAnalysis

    CudaKernelAnalysis.visualize_aten_op_kernels_and_overhead = classmethod(lambda cls, rank, df: None)
    work = tempfile.mkdtemp()
    trace_dir = os.path.join(work, "trace")
    os.makedirs(trace_dir)
    shutil.copy(args.trace, os.path.join(trace_dir, "rank0.json.gz" if args.trace.endswith(".gz") else "rank0.json"))
    stdout = sys.stdout
    sys.stdout = sys.stderr  # HTA prints
    out: dict = {"hta_version": getattr(hta, "__version__", "0.5.0")}
    a = TraceAnalysis(trace_dir=trace_dir)
    rank = a.t.get_ranks()[0]
    sym = a.t.symbol_table.get_sym_table()

    def idle():
        df, _ = a.get_idle_time_breakdown(ranks=[rank], visualize=False)
        return [{"stream": int(r.stream), "category": r.idle_category, "us": float(r.idle_time)}
                for r in df.itertuples()]

    def launches():
        df = a.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
        cpu, gpu, delay = df.cpu_duration, df.gpu_duration, df.launch_delay
        return {"launches": int(len(df)), "cpu_us": float(cpu.sum()), "gpu_us": float(gpu.sum()),
                "delay_us": float(delay.sum()), "short": int(((cpu <= 50) & (gpu < cpu)).sum()),
                "runtime_outliers": int((cpu > 50).sum()), "delay_outliers": int((delay > 100).sum())}

    def aten():
        df = a.get_aten_op_kernels_and_delay(ranks=[rank])[rank]
        return [{"operator": r.aten_op_name, "kernels": r.kernel_sequence, "count": int(r.occurrence_count),
                 "launch_delay_us": float(r.avg_aten_op_launch_delay), "runtime_delay_us": float(r.avg_runtime_delay)}
                for r in df.itertuples()]

    def spans():
        df = a.get_gpu_user_annotation_breakdown(visualize=False, num_kernels=10**9)
        return {} if df is None else {r.name: float(r._2) for r in df.itertuples()}

    def overlap():
        df = a.get_gpu_kernels_with_user_annotations(rank, expand_names=False)
        if df is None:
            return {}
        df = df[df.user_annotation >= 0]
        return {sym[int(k)]: float(v) for k, v in df.groupby("user_annotation").dur.sum().items()}

    def queue():
        df = a.get_queue_length_summary(ranks=[rank])
        series = a.get_queue_length_time_series(ranks=[rank])
        blocked = a.get_time_spent_blocked_on_full_queue(series, max_queue_length=1024)
        rows = {}
        if df is not None:
            for (r, stream), v in df.iterrows():
                rows[str(int(stream))] = {"count": float(v[("queue_length", "count")]),
                                          "mean": float(v[("queue_length", "mean")]),
                                          "max": float(v[("queue_length", "max")]),
                                          "min": float(v[("queue_length", "min")])}
        return {"streams": rows, "blocked": [] if blocked is None else blocked.to_dict("records")}

    def bandwidth():
        df = a.get_memory_bw_summary(ranks=[rank])
        if df is None:
            return {}
        return {name: {"count": float(v[("memory_bw_gbps", "count")]), "mean": float(v[("memory_bw_gbps", "mean")]),
                       "max": float(v[("memory_bw_gbps", "max")])} for (r, name), v in df.iterrows()}

    def critical():
        result = a.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=0)
        if result is None:
            return {"error": "no ProfilerStep annotation"}
        graph, ok = result
        if not ok:
            return {"error": "critical path failed"}
        edf = graph.get_critical_path_breakdown()
        total = float(edf.duration.sum())
        return {"total_us": total, "bound_by_us": {k or "(edges)": float(v)
                                                   for k, v in edf.groupby("bound_by").duration.sum().items()}}

    def sequences():
        if not args.operator:
            return {"error": "no operator given"}
        df = a.get_frequent_cuda_kernel_sequences(operator_name=args.operator, output_dir=work, min_pattern_len=3,
                                                  rank=rank, top_k=5, visualize=False)
        return [{"pattern": r.pattern, "count": int(r.count), "gpu_us": float(r._3)} for r in df.itertuples()]

    for key, fn in (("idle", idle), ("launches", launches), ("aten", aten), ("spans", spans), ("overlap", overlap),
                    ("queue", queue), ("bandwidth", bandwidth), ("critical", critical), ("sequences", sequences)):
        _try(out, key, fn)
    shutil.rmtree(work, ignore_errors=True)
    sys.stdout = stdout
    print(json.dumps(out))


if __name__ == "__main__":
    main()
