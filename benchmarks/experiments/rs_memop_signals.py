"""Session 10: the transports benchmark with the p2p ready signal chosen by P2P_SIGNAL ("memop" or "barrier").

Needs ``git apply benchmarks/experiments/patches/p2p_memop_signals.patch`` (``p2p_transport.SIGNAL``). Run from the
project root: P2P_SIGNAL=memop BENCH_M=512,2048,4096,8192 BENCH_OUT=$OUT/memop torchrun --nproc_per_node=2
benchmarks/experiments/rs_memop_signals.py (torchrun would take --m for itself, hence the environment variables).
"""
import os, runpy, sys
sys.argv = ["bench_reduce_scatter_transports.py", "--m", os.environ["BENCH_M"], "--out", os.environ["BENCH_OUT"]]
sys.path.insert(0, "benchmarks")
from cute_kernels.distributed import p2p_transport
p2p_transport.SIGNAL = os.environ["P2P_SIGNAL"]
runpy.run_path("benchmarks/bench_reduce_scatter_transports.py", run_name="__main__")
