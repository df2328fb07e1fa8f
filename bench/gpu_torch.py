"""The PyTorch side of bench/gpu.sh: the models gpu_bench trains, as PyTorch users write them,
in eager mode and under torch.compile, with the same batch sizes, precisions, optimizer (Adam,
lr 1e-3) and synthetic data (a pool of four random batches on the GPU); plus the two ceilings
the GPU figures are read against: a device-to-device copy and an 8192x8192x8192 bf16 matrix
product on random data.

Each step is timed as gpu_bench times ours: synchronise, forward, loss, backward, optimizer
step, synchronise; 5 warm-up steps (and, under torch.compile, the compilation) untimed, then
the median of 25. Precisions: float32 (TF32 off), float32 with TF32, mixed_bfloat16 (autocast
to bf16, fp32 weights) and mixed_float16 (autocast to fp16 with a GradScaler).

torch.compile compiles each model and precision once (tens of seconds each): the cases run
most important first, and those left when --budget-s runs out are reported as skipped.

Usage: python3 bench/gpu_torch.py [--json=FILE] [--budget-s=SECONDS] [--device=cuda|cpu]
       [--steps=N] [--models=mlp,cnn,mlp-large] [--modes=eager,compile]
Prints a table; --json writes one JSON object a line (kind: ceiling or train).
"""
import json
import statistics
import sys
import time

import torch
from torch import nn

flags = dict((a[2:].split("=", 1) + [""])[:2] for a in sys.argv[1:] if a.startswith("--"))
device = flags.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
budget = float(flags.get("budget-s") or 240)
timed_steps = int(flags.get("steps") or 25)
models = (flags.get("models") or "mlp,cnn,mlp-large").split(",")
modes = (flags.get("modes") or "eager,compile").split(",")
out = open(flags["json"], "a") if flags.get("json") else None
started = time.monotonic()
BATCH = {"mlp": 256, "cnn": 256, "mlp-large": 2048}


def emit(record):
    if out:
        out.write(json.dumps(record) + "\n")
        out.flush()


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def make(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 8192), nn.ReLU(), nn.Linear(8192, 8192),
                         nn.ReLU(), nn.Linear(8192, 8192), nn.ReLU(), nn.Linear(8192, 10))


def median_ms(fn, reps):
    """Median milliseconds of fn() over reps runs after 3 warm-ups (CUDA events on a GPU)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def ceilings():
    if device != "cuda":
        return
    n = 1 << 28  # 1 GiB of fp32
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), 20)
    copy = 2 * 4 * n / (ms * 1e6)
    del src, dst
    g = 8192
    a = torch.randn(g, g, device=device, dtype=torch.bfloat16)
    b = torch.randn(g, g, device=device, dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b, 20)
    tflops = 2 * g ** 3 / (ms * 1e9)
    del a, b
    print(f"ceilings: device-to-device copy {copy:.0f} GB/s; bf16 {g}^3 product {tflops:.0f} "
          f"TFLOP/s (random data)")
    emit({"kind": "ceiling", "copy_gbs": copy, "bf16_gemm_tflops": tflops,
          "gpu": torch.cuda.get_device_name(), "torch": torch.__version__})


def train(name, precision, tf32, mode):
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    batch = BATCH[name]
    model = make(name).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    pool = [(torch.randn(batch, 1, 28, 28, device=device),
             torch.randint(0, 10, (batch,), device=device)) for _ in range(4)]
    autocast = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(precision)
    scaler = None
    if precision == "mixed_float16":
        scaler = (torch.amp.GradScaler(device) if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())
    forward = torch.compile(model) if mode == "compile" else model

    def step(i):
        x, y = pool[i % len(pool)]
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast(device_type=device, dtype=autocast):
                loss = loss_fn(forward(x), y)
        else:
            loss = loss_fn(forward(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    t0 = time.monotonic()
    for i in range(5):
        step(i)
    sync()
    warm_s = time.monotonic() - t0
    times = []
    for i in range(timed_steps):
        sync()
        t = time.perf_counter()
        step(i)
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    ms = statistics.median(times)
    return batch, ms, warm_s


def main():
    print(f"torch {torch.__version__} on {device}"
          + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))
    ceilings()
    precisions = [("float32", False), ("float32", True), ("mixed_bfloat16", True),
                  ("mixed_float16", True)]
    if "compile" in modes and not hasattr(torch, "compile"):
        print("torch.compile: not in this PyTorch; compiled cases skipped")
        modes.remove("compile")
    # Eager first (cheap), then the compiled cases in order of importance: bf16 before the rest.
    cases = [(m, p, t, "eager") for m in models for p, t in precisions]
    if "compile" in modes:
        order = [1, 2, 3, 0]
        cases += [(m, *precisions[i], "compile") for i in order for m in models]
    if "eager" not in modes:
        cases = [c for c in cases if c[3] != "eager"]
    print(f"{'model':10s} {'precision':15s} {'tf32':4s} {'mode':8s} {'batch':>5s} "
          f"{'samples/s':>10s} {'ms/step':>9s} {'warm-up s':>9s}")
    for name, precision, tf32, mode in cases:
        record = {"kind": "train", "model": name, "precision": precision, "tf32": tf32,
                  "mode": mode, "batch": BATCH[name]}
        if time.monotonic() - started > budget:
            print(f"{name:10s} {precision:15s} {'tf32' if tf32 else '':4s} {mode:8s} "
                  f"skipped (the {budget:.0f} s budget is spent)")
            emit({**record, "skipped": "budget"})
            continue
        try:
            batch, ms, warm_s = train(name, precision, tf32, mode)
        except Exception as e:  # one case's failure is reported; the rest still run
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            print(f"{name:10s} {precision:15s} {'tf32' if tf32 else '':4s} {mode:8s} "
                  f"FAILED {msg}")
            emit({**record, "error": msg})
            continue
        print(f"{name:10s} {precision:15s} {'tf32' if tf32 else '':4s} {mode:8s} {batch:5d} "
              f"{batch / (ms / 1e3):10.0f} {ms:9.3f} {warm_s:9.1f}", flush=True)
        emit({**record, "samples_per_s": batch / (ms / 1e3), "ms_per_step": ms})


main()
