"""The PyTorch side of bench/trainer_vs_torch.sh: the same mlp or cnn as lockstep-trainer
(same layers, SGD with momentum 0.9, lr 0.01, batch 64), trained on Fashion-MNIST as the
trainer is. Prints steady samples/s after 20 warm-up steps.

A fair peer: the training set is loaded and standardised before anything is timed, and glibc
malloc's mmap and trim thresholds are fixed high first (torch_peer.tune_malloc), so PyTorch's
per-step activation buffers come from the heap instead of fresh page-faulting mmaps. Before,
this script trained on torch.randn batches made lazily and left malloc at its defaults: its
`cnn` page-faulted about a million times in 300 steps and ran 1,900-2,700 samples/s where it
now runs 2,800-3,100 on the same (shared) machine; loading the data first is not enough by
itself (see torch_peer.py). "--default-malloc" keeps glibc's defaults, to see the difference.
The cnn runs in channels_last (NHWC), the layout lockstep-trainer computes in and PyTorch's
fastest for CPU convolutions; "--nchw" keeps PyTorch's default layout.

Modes: "tensors" draws shuffled batches from the training set in memory with index_select
(no data pipeline; lockstep-trainer assembles its batches the same way); "loader" draws them
through torch.utils.data.DataLoader, the usual training loop.

Usage: /usr/bin/python3 torch_reference.py MODEL THREADS STEPS [tensors|loader]
       [--default-malloc] [--nchw] [--data-dir=DIR]
"""
import sys
import time

import torch
from torch import nn

import torch_peer

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = dict((a[2:].split("=", 1) + [""])[:2] for a in sys.argv[1:] if a.startswith("--"))
if "default-malloc" not in flags:
    torch_peer.tune_malloc()

model_name, threads, steps = args[0], int(args[1]), int(args[2])
mode = args[3] if len(args) > 3 else "tensors"
torch.set_num_threads(threads)
torch.manual_seed(1)
xs, ys = torch_peer.load_fashion_mnist(flags.get("data-dir") or torch_peer.FASHION_MNIST_DIR)
if model_name == "mlp":
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                          nn.ReLU(), nn.Linear(256, 10))
else:
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128),
                          nn.ReLU(), nn.Linear(128, 10))
if model_name != "mlp" and "nchw" not in flags:
    # NHWC, as lockstep-trainer computes: PyTorch's fastest CPU layout for convolutions (about
    # 1.4x its default NCHW on this cnn, one thread).
    model = model.to(memory_format=torch.channels_last)
    xs = xs.contiguous(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
batch = 64
if mode == "loader":
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys),
                                         batch_size=batch, shuffle=True, drop_last=True)

    def batches():
        while True:
            yield from loader
else:
    def batches():
        return torch_peer.shuffled_batches(xs, ys, batch)
warmup = 20
start = None
source = batches()
for step in range(steps):
    if step == warmup:
        start = time.perf_counter()
    x, y = next(source)
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
elapsed = time.perf_counter() - start
print(f"{(steps - warmup) * batch / elapsed:.0f}")
