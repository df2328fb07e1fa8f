"""The summary of bench/gpu.sh: reads what one run left in OUT (parts.tsv, machine.txt,
lockstep.jsonl from gpu_bench, torch.jsonl from bench/gpu_torch.py) and prints the tables the
docs/tasks/gpus.md records: the parts and whether each passed; our samples/s against
PyTorch eager and torch.compile (ratios from the same run); mlp-large's bf16 training rate
against the measured bf16 GEMM peak; the elementwise and optimizer kernels against the measured
copy; the share of each step outside the device's work.

Usage: python3 bench/gpu_summary.py OUT
"""
import json
import os
import re
import sys

out = sys.argv[1]


def records(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


ours, theirs = records("lockstep.jsonl"), records("torch.jsonl")
print("== bench/gpu.sh summary")
machine = os.path.join(out, "machine.txt")
if os.path.exists(machine):
    with open(machine) as f:
        lines = f.read().splitlines()
    wanted = re.compile(r"^(lib\S*\.so\S*: |GPU libraries|torch |commit)")
    for line in lines[:2] + [l for l in lines if wanted.match(l)]:
        print("  " + line)

print("\nparts")
parts = os.path.join(out, "parts.tsv")
if os.path.exists(parts):
    with open(parts) as f:
        for line in f:
            name, status, note = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            print(f"  {status:7s} {name}" + (f": {note}" if note else ""))

ceiling = next((r for r in theirs if r["kind"] == "ceiling"), {})
our_copy = next((r["copy_gbs"] for r in ours if r["kind"] == "ceiling"), None)
peak = ceiling.get("bf16_gemm_tflops")
print("\nceilings (measured in this run)")
if our_copy:
    print(f"  device-to-device copy: {our_copy:.0f} GB/s (gpu_bench)"
          + (f", {ceiling['copy_gbs']:.0f} GB/s (PyTorch)" if ceiling else ""))
if peak:
    print(f"  bf16 8192^3 product (PyTorch, random data): {peak:.0f} TFLOP/s")
for r in ours:
    if r["kind"] == "gemm":
        print(f"  our GEMM {r['dtype']:5s} 8192^3: {r['tflops']:.0f} TFLOP/s"
              + (f" ({100 * r['tflops'] / peak:.0f}% of the measured bf16 peak)" if peak else ""))

print("\nelementwise and optimizer kernels against the measured copy")
for r in ours:
    if r["kind"] == "elementwise":
        print(f"  {r['op']:32s} {r['gbs']:7.0f} GB/s  {100 * r['of_copy']:5.1f}% of copy")

# mlp-large: 784-8192-8192-8192-10; a training step costs 6 multiply-adds' worth of FLOPs per
# parameter and example (2 forward, 4 backward).
params = 784 * 8192 + 8192 + 2 * (8192 * 8192 + 8192) + 8192 * 10 + 10
for r in ours:
    if r["kind"] == "train" and r["model"] == "mlp-large" and r["precision"] == "mixed_bfloat16" \
            and "samples_per_s" in r:
        tflops = 6 * params * r["samples_per_s"] / 1e12
        print(f"\nmlp-large mixed_bfloat16: {tflops:.0f} TFLOP/s of model arithmetic"
              + (f", {100 * tflops / peak:.0f}% of the measured bf16 peak (target 50%)"
                 if peak else ""))


def torch_rate(model, precision, tf32, mode):
    for r in theirs:
        if r["kind"] == "train" and (r["model"], r["precision"], r["tf32"], r["mode"]) == \
                (model, precision, tf32, mode):
            return r.get("samples_per_s"), r.get("error") or r.get("skipped")
    return None, "not run"


print("\ntraining samples/s (synthetic data, Adam; ratio = ours / PyTorch, same run)")
print(f"  {'model':32s} {'precision':15s} {'tf32':4s} {'ours':>9s} {'eager':>9s} {'ratio':>6s} "
      f"{'compile':>9s} {'ratio':>6s} {'outside':>8s}")
for r in ours:
    if r["kind"] != "train":
        continue
    name = f"  {r['model']:32s} {r['precision']:15s} {'tf32' if r['tf32'] else '':4s}"
    if "error" in r:
        print(f"{name} FAILED: {r['error'][:80]}")
        continue
    cells = [f"{r['samples_per_s']:9.0f}"]
    for mode in ("eager", "compile"):
        rate, why = torch_rate(r["model"], r["precision"], r["tf32"], mode)
        if rate:
            cells += [f"{rate:9.0f}", f"{r['samples_per_s'] / rate:6.2f}"]
        else:
            cells += [f"{'-':>9s}", f"{'-':>6s}"]
    cells.append(f"{100 * r['outside_stream']:7.1f}%")
    print(name + " " + " ".join(cells))
print("  (PyTorch runs the built-in models only; 'outside' is the share of our step's wall time "
      "outside the device's span)")
