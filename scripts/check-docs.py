#!/usr/bin/python3
"""Checks the manual against the code it describes (the ctest test docs_reference).

- docs/reference/trainer.md, operator.md and lockstep.md list exactly the flags `--help`
  prints;
- docs/reference/metrics.md lists exactly the metrics the code registers;
- docs/reference/chart-values.md lists exactly the values of the chart's values.yaml;
- docs/reference/api.md lists exactly the fields of the CRD's schema;
- every relative link in README.md, CONTRIBUTING.md and docs/ names a file that exists, and an
  anchor names a heading of that file;
- README.md stays a front door: at most 200 lines.

Usage: check-docs.py SOURCE_DIR LOCKSTEP_TRAINER LOCKSTEP_OPERATOR LOCKSTEP
Prints one line per disagreement and exits 1 if there is any.
"""
import functools
import pathlib
import re
import subprocess
import sys

import yaml

src = pathlib.Path(sys.argv[1])
trainer, operator, lockstep = sys.argv[2], sys.argv[3], sys.argv[4]
problems = []


def first_column_names(page, pattern):
    """Backticked names matching `pattern` in the first column of the page's table rows."""
    names = set()
    for line in (src / page).read_text().splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        names.update(n for n in re.findall(r"`([^`]+)`", first) if re.fullmatch(pattern, n))
    return names


def help_flags(binary, *command):
    text = subprocess.run([binary, *command, "--help"], capture_output=True, text=True,
                          check=True).stdout
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


def check_page(page, pattern, actual):
    """The page's table lists exactly the names in `actual`."""
    documented = first_column_names(page, pattern)
    for name in sorted(actual - documented):
        problems.append(f"{page}: {name} exists but is not documented")
    for name in sorted(documented - actual):
        problems.append(f"{page}: {name} is documented but does not exist")


# Flags.
flag = r"--[a-z0-9-]+"
check_page("docs/reference/trainer.md", flag, help_flags(trainer))
check_page("docs/reference/operator.md", flag, help_flags(operator))
check_page("docs/reference/lockstep.md", flag,
           help_flags(lockstep, "run") | help_flags(lockstep, "local"))

# Metrics: the names the code registers (string literals lockstep_..., not in tests).
registered = set()
for d in ("operator", "trainer", "common"):
    for f in (src / d).rglob("*"):
        if f.suffix not in (".cc", ".h") or f.stem.endswith("_test") or "testing" in f.parts:
            continue
        registered.update(re.findall(r'"(lockstep_[a-z_]+[a-z])"', f.read_text()))
check_page("docs/reference/metrics.md", r"lockstep_[a-z_]+", registered)

# Chart values: the leaves of values.yaml (an empty map or list is a leaf; `resources` is one).
values = yaml.safe_load((src / "charts/lockstep/values.yaml").read_text())
leaves = set()


def walk(node, path):
    if isinstance(node, dict) and node and path != "resources":
        for k, v in node.items():
            walk(v, f"{path}.{k}" if path else k)
    else:
        leaves.add(path)


walk(values, "")
check_page("docs/reference/chart-values.md", r"[a-zA-Z][\w.]*", leaves)

# CRD fields: every property path of the schema, the replica types folded into <type>, and
# the pod template's own fields left to Kubernetes's reference below what the CRD lists.
crd = yaml.safe_load((src / "crds/lockstep.io_trainingjobs.yaml").read_text())
fields = set()


def fields_of(node, path):
    for k, child in (node.get("properties") or {}).items():
        p = f"{path}.{k}" if path else k
        if p in ("apiVersion", "kind", "metadata"):
            continue
        folded = re.sub(r"^spec\.replicaSpecs\.(Chief|Worker|PS|Evaluator)", "spec.replicaSpecs.<type>", p)
        if p not in ("spec", "status"):
            fields.add(folded)
        fields_of(child, folded)
    if isinstance(node.get("items"), dict):
        fields_of(node["items"], path + "[]")
    if isinstance(node.get("additionalProperties"), dict):
        fields_of(node["additionalProperties"], path + ".*")


for version in crd["spec"]["versions"]:
    fields_of(version["schema"]["openAPIV3Schema"], "")
check_page("docs/reference/api.md", r"(spec|status)[\w.<>\[\]*]*", fields)

# Links.
pages = [src / "README.md", src / "CONTRIBUTING.md", *sorted((src / "docs").rglob("*.md"))]


@functools.cache
def anchors(page):
    out = set()
    fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


for page in pages:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        rel = page.relative_to(src)
        if not dest.exists():
            problems.append(f"{rel}: link to {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{rel}: link to {target}: no such heading")

lines = len((src / "README.md").read_text().splitlines())
if lines > 200:
    problems.append(f"README.md: {lines} lines; the front door keeps to 200 (move the rest to docs/)")

for p in problems:
    print(p)
if problems:
    sys.exit(1)
print("docs_reference: the manual agrees with the code")
