"""The PyTorch side of bench/trainer_vs_torch.sh: the same mlp or cnn as lockstep-trainer
(same layers, SGD with momentum 0.9, lr 0.01, batch 64). Prints steady samples/s after 20
warm-up steps.

Modes: "tensors" cycles through 50 batches already in memory (PyTorch's best case: no data
pipeline at all); "loader" draws shuffled batches of 60,000 in-memory examples through
torch.utils.data.DataLoader, the usual training loop, which like lockstep-trainer pays for
shuffling and assembling each batch.

Usage: /usr/bin/python3 torch_reference.py MODEL THREADS STEPS [tensors|loader]
"""
import sys
import time

import torch
from torch import nn

model_name, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "tensors"
torch.set_num_threads(threads)
torch.manual_seed(1)
if model_name == "mlp":
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                          nn.ReLU(), nn.Linear(256, 10))
else:
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128),
                          nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
batch = 64
if mode == "loader":
    data = torch.utils.data.TensorDataset(torch.randn(60000, 1, 28, 28),
                                          torch.randint(0, 10, (60000,)))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True, drop_last=True)

    def batches():
        while True:
            yield from loader
else:
    xs = torch.randn(50, batch, 1, 28, 28)
    ys = torch.randint(0, 10, (50, batch))

    def batches():
        while True:
            yield from zip(xs, ys)
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
