"""kjit from PyTorch: a fused SiLU gate and a matmul with a fused epilogue, checked
against torch eager, then the same ops inside a torch.compile'd function.

    pip install .            # from the repository root (or PYTHONPATH=<prefix>/lib/kjit/python)
    python examples/python/silu_gate.py
"""
import sys

try:
    import torch
except ImportError:
    sys.exit("no PyTorch: this example runs kjit on torch tensors (pip install torch)")

import kjit

if not torch.cuda.is_available():
    sys.exit("no GPU: torch.cuda.is_available() is False")

x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
g = torch.randn_like(x)
y = kjit.elementwise("y = x * sigmoid(x) * g")(x=x, g=g)
want = torch.nn.functional.silu(x.float()) * g.float()
print("elementwise max |error|", (y.float() - want).abs().max().item())

a = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1024, 3072, device="cuda", dtype=torch.bfloat16)
bias = torch.randn(3072, device="cuda", dtype=torch.bfloat16)
c = kjit.matmul(a, b, epilogue="gelu(acc + bias)", bias=bias)
want = torch.nn.functional.gelu(a.float() @ b.float() + bias.float())
print("matmul max relative error",
      ((c.float() - want).abs() / (1 + want.abs())).max().item())


@torch.compile(fullgraph=True)  # fullgraph: a graph break would be an error
def block(x, g):
    return torch.ops.kjit.elementwise("y = x * sigmoid(x) * g", "", [x, g]) + 1


print("torch.compile max |error|", (block(x, g).float() - (y.float() + 1)).abs().max().item())
