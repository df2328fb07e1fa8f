"""What makes the PyTorch side of the benchmarks a fair peer (used by torch_reference.py and
keras_torch_reference.py).

PyTorch's CPU allocator is glibc malloc: every activation and gradient buffer of a step is
malloc'd and freed again. glibc serves a request above M_MMAP_THRESHOLD (128 KiB to start) with
a fresh mmap, and gives free memory at the top of the heap back to the kernel above
M_TRIM_THRESHOLD; either way the next step touches fresh pages and page-faults on every one.
glibc raises both thresholds by itself once it frees an mmap'd block, so whether a run faults
depends on what the process happened to allocate and free before. Measured here (one thread,
300 `cnn` steps, a machine shared with other work): the old peer (torch.randn batches made
lazily) faulted 0.14-1.3 million times and ran 1,900-2,700 samples/s; loading Fashion-MNIST
first but keeping glibc's defaults still faulted 1.1-1.4 million times (2,100-2,500
samples/s); with `tune_malloc` the steps fault no more (the 250k faults left are the dataset
being loaded) and it runs 2,800-3,100. `tune_malloc` fixes both thresholds high, as a tuned
PyTorch deployment would (or one on jemalloc/tcmalloc); fixing only the mmap threshold makes
it worse (the trim threshold then stays at 128 KiB). lockstep-trainer keeps its buffers
between steps and needs neither.

Data is made or loaded before the clock starts, and each step draws a shuffled batch from it
(the trainer assembles each batch from its dataset too).
"""
import ctypes
import gzip
import os

import torch

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_malloc(threshold=512 << 20):
    """Blocks up to `threshold` come from the heap, which keeps up to twice that free."""
    libc = ctypes.CDLL("libc.so.6")
    ok = libc.mallopt(_M_MMAP_THRESHOLD, threshold) and libc.mallopt(_M_TRIM_THRESHOLD,
                                                                      2 * threshold)
    if not ok:
        raise RuntimeError("mallopt refused the thresholds")


def _read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                return f.read()
    raise FileNotFoundError(path + "[.gz]")


def load_fashion_mnist(data_dir=FASHION_MNIST_DIR, split="train"):
    """Fashion-MNIST as lockstep-trainer loads it: [N, 1, 28, 28] floats scaled to [0, 1] and
    standardised (mean 0.2860, deviation 0.3530), and int64 labels."""
    images = _read_idx(f"{data_dir}/{split}-images-idx3-ubyte")
    labels = _read_idx(f"{data_dir}/{split}-labels-idx1-ubyte")
    n = int.from_bytes(images[4:8], "big")
    x = torch.frombuffer(bytearray(images[16:16 + n * 784]), dtype=torch.uint8)
    x = ((x.float() / 255.0 - 0.2860) / 0.3530).reshape(n, 1, 28, 28)
    y = torch.frombuffer(bytearray(labels[8:8 + n]), dtype=torch.uint8).long()
    return x, y


def shuffled_batches(x, y, batch, seed=1):
    """Endless epochs of shuffled batches gathered from in-memory tensors (drop the remainder)."""
    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    while True:
        perm = torch.randperm(n, generator=g)
        for i in range(0, n - batch + 1, batch):
            idx = perm[i:i + batch]
            yield x.index_select(0, idx), y.index_select(0, idx)
