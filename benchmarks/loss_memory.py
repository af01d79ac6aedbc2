"""Peak memory (process RSS high-water mark) of one loss forward+backward: full fp32 logits + F.cross_entropy
against model/loss.py's chunked_cross_entropy. One mode per fresh process. CPU, fp32.

    python benchmarks/loss_memory.py full 64; python benchmarks/loss_memory.py chunked 64
"""

import resource
import sys
import time

import torch
import torch.nn.functional as F

from blocklab.model.loss import chunked_cross_entropy

mode, B, T, V, d = sys.argv[1], int(sys.argv[2]), 256, 32000, 256
torch.manual_seed(0)
h = torch.randn(B, T, d, requires_grad=True)
w = (torch.randn(V, d) * 0.02).requires_grad_()
y = torch.randint(0, V, (B, T))
# warm the allocator/kernels on a tiny problem so the baseline includes library overheads
F.cross_entropy(torch.randn(4, 8, requires_grad=True), torch.zeros(4, dtype=torch.long)).backward()
chunked_cross_entropy(
    torch.randn(4, 8, requires_grad=True), torch.randn(10, 8, requires_grad=True), torch.zeros(4, dtype=torch.long)
).backward()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if mode == "full":
    loss = F.cross_entropy((h @ w.t()).float().view(-1, V), y.view(-1))
else:
    loss = chunked_cross_entropy(h, w, y)
loss.backward()
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(
    f"{mode}: loss {loss.item():.6f} |dh| {h.grad.norm():.6f} |dw| {w.grad.norm():.6f}  peak RSS growth {(peak - base) / 1024:.0f} MiB  time {dt:.2f}s"
)
