"""Quick first look: correctness at 8192^3 plus timing of our kernel vs torch._int_mm (+ torch epilogue)."""
import time, torch
from triton.testing import do_bench
from cute_kernels import int8_scaled_mm
from cute_kernels.reference import int8_scaled_mm_ref

for (m, n, k) in [(8192, 8192, 8192), (16, 4096, 4096), (4096, 4096, 4096)]:
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
    b = w.t()
    sa = torch.rand(m, device="cuda") * 0.01; sb = torch.rand(n, device="cuda") * 0.01
    bias = torch.randn(n, device="cuda").bfloat16()
    t0 = time.time(); out = int8_scaled_mm(a, b, sa, sb, bias); torch.cuda.synchronize(); t1 = time.time()
    if m * n * k <= 4096**3:
        ref = int8_scaled_mm_ref(a, b, sa, sb, bias)
        err = ((out.double() - ref).abs() / (ref.abs() + 1)).max().item()
    else:
        ref = int8_scaled_mm_ref(a[:256], b, sa[:256], sb, bias)
        err = ((out[:256].double() - ref).abs() / (ref.abs() + 1)).max().item()
    ms = do_bench(lambda: int8_scaled_mm(a, b, sa, sb, bias), warmup=50, rep=200, return_mode="median")
    line = f"{m}x{n}x{k}: first call {t1-t0:.2f}s  ours {ms*1e3:.1f} us {2*m*n*k/ms/1e9:.0f} TOPS  maxrel {err:.2e}"
    if m > 16:
        ms2 = do_bench(lambda: (torch._int_mm(a, b).float() * sa[:, None] * sb[None] + bias).bfloat16(), warmup=20, rep=100, return_mode="median")
        line += f" | torch._int_mm+epi {ms2*1e3:.1f} us {2*m*n*k/ms2/1e9:.0f} TOPS"
    print(line, flush=True)
# host overhead: tiny problem, no sync inside the loop
a = torch.randint(-128, 128, (600, 256), dtype=torch.int8, device="cuda"); w = torch.randint(-128, 128, (256, 256), dtype=torch.int8, device="cuda")
sa = torch.rand(600, device="cuda"); sb = torch.rand(256, device="cuda")
out = torch.empty(600, 256, dtype=torch.bfloat16, device="cuda")
for _ in range(100): int8_scaled_mm(a, w.t(), sa, sb, out=out)
torch.cuda.synchronize(); N = 2000; t = time.perf_counter()
for _ in range(N): int8_scaled_mm(a, w.t(), sa, sb, out=out)
t2 = time.perf_counter(); torch.cuda.synchronize()
print(f"host cost per warm call (out= given): {(t2-t)/N*1e6:.1f} us")
x = torch.empty(16, 256, device="cuda"); y = torch.empty_like(x)
t = time.perf_counter()
for _ in range(N): y.copy_(x)
t2 = time.perf_counter(); torch.cuda.synchronize()
print(f"torch copy_ per call: {(t2-t)/N*1e6:.1f} us")
from cute_kernels.ops import int8_scaled_mm as _op
fn = [v[0] for key, v in _op._validated.items() if key[4] and v[2] is None][-1]
bt = w.t()
t = time.perf_counter()
for _ in range(N): fn(a, bt, out, sa, sb, None, None, None)
t2 = time.perf_counter(); torch.cuda.synchronize()
print(f"bare TVM-FFI call of the compiled kernel: {(t2-t)/N*1e6:.1f} us")
t = time.perf_counter()
for _ in range(N): int8_scaled_mm(a, bt, sa, sb)
t2 = time.perf_counter(); torch.cuda.synchronize()
print(f"host cost per warm call (allocating out): {(t2-t)/N*1e6:.1f} us")
a16 = torch.randint(-128, 128, (16, 4096), dtype=torch.int8, device="cuda"); w16 = torch.randint(-128, 128, (4096, 4096), dtype=torch.int8, device="cuda").t()
sa16 = torch.rand(16, device="cuda"); sb16 = torch.rand(4096, device="cuda"); o16 = torch.empty(16, 4096, dtype=torch.bfloat16, device="cuda")
for _ in range(50): int8_scaled_mm(a16, w16, sa16, sb16, out=o16)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(N): int8_scaled_mm(a16, w16, sa16, sb16, out=o16)
t2 = time.perf_counter(); torch.cuda.synchronize(); t3 = time.perf_counter()
print(f"split-K path (M=16, N=K=4096): host cost per warm call {(t2-t)/N*1e6:.1f} us; wall per call incl. GPU {(t3-t)/N*1e6:.1f} us")
