"""The hand-built trace used by the analysis tests; every expected number is derived in the test docstrings.

Times in µs. Thread 1 of pid 100; device 0 streams 7, 8, 9 and device 1 stream 7.

    step 1 [0,100)   dataloader [0,8); linear [9,45) > mm [10,40); nccl:all_reduce [78,85)
                     mm launches k1 [20,60) s7, k2 [40,90) s8, k4 [50,70) on device 1; nccl kernel [95,105) s9
    step 2 [100,200) add [110,130) launches memcpy [125,135), memset [140,145), k3 [150,230) (crosses into step 3)
    step 3 [200,250) no device work; dataloader [232,238); relu [240,248)
"""

from tracebuilder import TraceBuilder

US = 1000
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
ELEMENTWISE = "elementwise_kernel"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def build() -> TraceBuilder:
    b = TraceBuilder()
    b.device_properties({"id": 0, "name": "Test GPU", "totalGlobalMem": 4800, "numSms": 100, "computeMajor": 9},
                        {"id": 1, "name": "Test GPU", "totalGlobalMem": 4800, "numSms": 100, "computeMajor": 9})
    b.step(1, 0, 100, gpu_copy=True)
    b.step(2, 100, 100, gpu_copy=True)
    b.step(3, 200, 50)
    b.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 8)
    b.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 232, 6)
    linear = b.op("aten::linear", 9, 36, **{"Input Dims": [[8, 4], [2, 4], [2]]})
    mm = b.op("aten::mm", 10, 30, **{"Input Dims": [[8, 4], [4, 2]]})
    b.launch(GEMM, 12, 20, 40, mm, stream=7, blocks=0.5, occupancy=0.25, rt_dur=4)
    b.launch(ELEMENTWISE, 30, 40, 50, mm, stream=8, blocks=1.0, occupancy=0.5, rt_dur=4)
    b.launch(ELEMENTWISE, 35, 50, 20, mm, device=1, stream=7, blocks=0.2, occupancy=0.1, rt_dur=1)
    comm = b.op("nccl:all_reduce", 78, 7)
    b.launch(NCCL, 80, 95, 10, comm, stream=9, blocks=0.1, rt_dur=2)
    add = b.op("aten::add", 110, 20, **{"Input Dims": [[8, 2], [8, 2]]})
    b.launch(GEMM, 112, 150, 80, add, stream=7, blocks=2.0, occupancy=0.75, rt_dur=3, rt_cat="cuda_driver",
             rt_name="cuLaunchKernel")
    b.launch("Memcpy HtoD (Pageable -> Device)", 120, 125, 10, add, cat="gpu_memcpy", rt_name="cudaMemcpyAsync",
             rt_dur=5)
    b.launch("Memset (Device)", 126, 140, 5, add, cat="gpu_memset", rt_name="cudaMemsetAsync", rt_dur=1)
    b.op("aten::relu", 240, 8)
    # memory: +1000 and +500 in mm, -1000 in linear (outside mm), +4000 in add, -10 outside ops; CPU +64 in add
    b.memory(15, 1000, 1000, 2000, addr=1)
    b.memory(17, 500, 1500, 2000, addr=2)
    b.memory(42, -1000, 500, 2000, addr=1)
    b.memory(111, 4000, 4500, 6000, addr=3)
    b.memory(101, -10, 4490, 6000, addr=4)
    b.memory(112, 64, 64, 0, addr=5, device=-1, device_type=0)
    # python frames: train.py's training_step wraps each step's operators, model.py forward wraps linear; a torch
    # frame in between
    top = b.frame("train.py(10): training_step", 1, 97)
    b.frame("train.py(10): training_step", 101, 97)
    b.frame("train.py(10): training_step", 201, 48)
    fwd = b.frame("model.py(20): forward", 9, 37, parent=top)
    b.frame("torch/nn/functional.py(100): linear", 9, 37, parent=fwd)
    b.frame("other_thread.py(5): run", 0, 250, tid=2)
    return b
