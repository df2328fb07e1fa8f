#!/usr/bin/env python3
"""The trainer's house rules (the ctest test trainer_house):

  1. no source in trainer/kernels/ includes trainer/graph/, trainer/optim/, trainer/model/ or
     trainer/layers/ (kernels are the lowest floor: shared types live in kernels/types.h);
     tests, which compare kernels with the layers above, may;
  2. no trainer source file (.cc, .h, .cu) is over 800 lines;
  3. no function in trainer/strategy/, trainer/cli/ or trainer/comm/ is over 120 lines.

Functions are found by their definitions at namespace or class scope (a line that opens a
body, not a control statement, indented at most two spaces) and measured to the brace that
closes them at the same indentation. Usage: scripts/check-trainer-house.py [SOURCE_DIR]
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
trainer = os.path.join(root, "trainer")
MAX_FILE, MAX_FUNCTION = 800, 120
SOURCES = (".cc", ".h", ".cu")
NOT_A_FUNCTION = re.compile(
    r"^\s*(if|for|while|switch|else|do|case|return|namespace|class|struct|enum|union|try|"
    r"catch|using|typedef|template|static_assert|#|//|\}|\{|\[)|=\s*\[|=\s*\{\s*$")


def sources(top):
    for base, _, files in os.walk(top):
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.join(base, f)


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"^( *)\S", line)
        if not m or len(m.group(1)) > 2 or "(" not in line or NOT_A_FUNCTION.search(line):
            continue
        j = i
        while j < len(lines) and j < i + 8 and not lines[j].rstrip().endswith(("{", ";")):
            j += 1
        if j >= len(lines) or not lines[j].rstrip().endswith("{") or lines[j].rstrip().endswith(
                ("= {", "{{")):
            continue
        close = m.group(1) + "}"
        k = j + 1
        while k < len(lines) and not (lines[k] == close or lines[k].startswith(close + " ") or
                                      lines[k] == close + ";"):
            k += 1
        if k < len(lines):
            yield i + 1, k - i + 1, line.strip()


problems = []
for path in sources(os.path.join(trainer, "kernels")):
    if path.endswith("_test.cc"):
        continue
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r'#include "trainer/(graph|optim|model|layers)/', line)
        if m:
            problems.append(f"{os.path.relpath(path, root)}:{n}: kernels/ includes {m.group(1)}/")
for path in sources(trainer):
    count = sum(1 for _ in open(path, encoding="utf-8"))
    if count > MAX_FILE:
        problems.append(f"{os.path.relpath(path, root)}: {count} lines (at most {MAX_FILE})")
for folder in ("strategy", "cli", "comm"):
    for path in sources(os.path.join(trainer, folder)):
        if path.endswith("_test.cc"):
            continue
        for line, length, head in functions(path):
            if length > MAX_FUNCTION:
                problems.append(f"{os.path.relpath(path, root)}:{line}: a function of {length} "
                                f"lines (at most {MAX_FUNCTION}): {head[:60]}")
for p in problems:
    print("trainer_house:", p)
if not problems:
    print("trainer_house: kernels/ includes nothing above it; no file over "
          f"{MAX_FILE} lines; no strategy/cli/comm function over {MAX_FUNCTION} lines")
sys.exit(1 if problems else 0)
