"""The house's rules, checked: the layering contracts in pyproject.toml ([tool.importlinter])
hold, no module takes part in an import cycle (function-level imports included, so none can hide
one), and nothing outside pipeline/paths.py builds paths under the data root by hand."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

from pipeline.config import REPO_ROOT

PACKAGES = ("pipeline", "flows", "ops")


def test_import_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(exe), "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-2000:]


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    modules = sorted(m for m in graph.modules if m.split(".")[0] in PACKAGES)
    edges = {m: sorted(n for n in graph.find_modules_directly_imported_by(m) if n.split(".")[0] in PACKAGES)
             for m in modules}
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges.get(nxt, []))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle():
    class Graph:  # the smallest stand-in for grimp's graph: a -> b -> a, c alone
        modules = {"pipeline.a", "pipeline.b", "pipeline.c"}

        @staticmethod
        def find_modules_directly_imported_by(m):
            return {"pipeline.a": {"pipeline.b"}, "pipeline.b": {"pipeline.a"}, "pipeline.c": set()}[m]

    assert _cycles(Graph) == [["pipeline.a", "pipeline.b"]]


# Literal names of data-root entries; only pipeline/paths.py may join them onto a root.
DATA_ROOT_ENTRIES = {"catalog.parquet", "media", "subtitles", "transcripts", "diarization", "drafts", "work",
                     "corpus", "annotation", "labels", "exports", "adjudications", "gates", "gold", "reports",
                     "releases", "voices", "label-studio", "stack", "prefect-results", "batches"}


def _hand_joins(path: Path) -> list[str]:
    """`<expr> / "media"`-style joins of a data-root entry name onto a base (the first segment
    of a join: `venv / "bin" / "label-studio"` is not one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) \
                and node.right.value in DATA_ROOT_ENTRIES \
                and not (isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Div)):
            found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}: / {node.right.value!r}")
    return found


def test_only_paths_module_joins_data_root_entries():
    files = [p for pkg in PACKAGES for p in sorted((REPO_ROOT / pkg).rglob("*.py")) if p.name != "paths.py"]
    found = [hit for p in files for hit in _hand_joins(p)]
    assert not found, "paths under the data root built by hand (use pipeline.paths.DataRoot):\n" + "\n".join(found)
