"""The layers: which of the project's packages may import which, and where imports may hide.

The flow is model -> rules -> bench -> db -> selector -> flags; the table below is that flow as
data. Every module of ``autoselect``, ``bench`` and ``db`` is parsed (``ast``, nothing imported) and
every import of a project module, at module level or inside a function, is judged (a package's
``_LAZY`` table of re-exports loaded on first use, and a ``lazy_module("...")`` of :mod:`autoselect.lazy`,
count as module-level imports):

* :data:`MAY_IMPORT`: a component imports only the components its row names (``db`` nothing above
  autoselect's vocabulary; ``bench`` never the selector, tune, fleet, report or cli; nothing but
  ``autoselect/__main__.py`` the cli);
* function-level imports of the project's own modules are for heavy modules only (one whose
  module-level imports reach torch, sqlite_utils, optuna, ray, matplotlib ...: :data:`HEAVY`), and
  for the cli's commands, which import their library inside the callback so ``--help`` stays
  fast. Everything else is imported at module level, so a module's first lines show what it
  depends on. :data:`LAZY_ALLOWED` would list a function-level import of a light module that has a
  reason to stay (an import cycle, say); it is empty, and an entry no import needs fails the test;
* :data:`WORKER_SIDE`: the vLLM worker runs under vLLM's own Python, so it imports the standard
  library, vllm and its own side of ``autoselect/bridge/`` only (:func:`worker_violations`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from support.paths import REPO

ROOT = REPO
PACKAGES = ("autoselect", "bench", "db")

#: Module prefix -> component (the longest matching prefix wins).
COMPONENTS: dict[str, str] = {
    # vocabulary: the words every layer shares; stdlib only
    "autoselect": "vocabulary",  # the package itself (__version__)
    "autoselect.errors": "vocabulary",
    "autoselect.options": "vocabulary",
    "autoselect.stopping": "vocabulary",
    "autoselect.payload": "vocabulary",
    "autoselect.hardware": "vocabulary",
    "autoselect.bearer": "vocabulary",
    "autoselect.dataclass_methods": "vocabulary",
    # domain: the model, the rules and what is derived from them (no store, no measuring)
    "autoselect.model": "domain",
    "autoselect.rules": "domain",
    "autoselect.knobs": "domain",
    "autoselect.workload": "domain",
    "autoselect.noise": "domain",
    "autoselect.candidates": "domain",
    "autoselect.vllm_flags": "domain",
    "autoselect.bridge": "domain",
    "autoselect.check": "domain",
    # published reference measurements: read by the selector, bench, report and fleet drift
    "autoselect.reference": "reference",
    "db": "db",
    "bench": "bench",
    "autoselect.selector": "selector",
    "autoselect.confirm": "confirm",
    "autoselect.tune": "tune",
    "autoselect.fleet": "fleet",  # with its drift, service and deploy subpackages
    "autoselect.report": "report",
    "autoselect.launch": "launch",  # the user's server line with the pick, then exec
    "autoselect.cli": "cli",
    "autoselect.__main__": "main",
}

_BELOW_CLI = {"vocabulary", "domain", "reference", "db", "bench", "selector", "confirm", "tune", "fleet", "report",
              "launch"}

#: Component -> the components it may import (itself included where it has several modules).
MAY_IMPORT: dict[str, set[str]] = {
    "vocabulary": {"vocabulary"},
    "domain": {"vocabulary", "domain"},
    "reference": {"vocabulary", "domain", "reference"},
    "db": {"vocabulary", "db"},
    "bench": {"vocabulary", "domain", "reference", "db", "bench"},
    "selector": {"vocabulary", "domain", "reference", "db", "selector"},
    "confirm": {"vocabulary", "domain", "db", "confirm"},
    "tune": {"vocabulary", "domain", "db", "bench", "tune"},
    "fleet": {"vocabulary", "domain", "reference", "db", "bench", "selector", "fleet"},
    "report": {"vocabulary", "domain", "reference", "db", "selector", "fleet", "report"},
    "launch": {"vocabulary", "domain", "reference", "db", "selector", "launch"},
    "cli": _BELOW_CLI | {"cli"},
    "main": {"cli"},
}

#: Third-party packages worth importing late (slow to import, optional, or GPU-only).
HEAVY = frozenset({
    "torch", "flashinfer", "vllm", "optuna", "ray", "matplotlib", "plotext", "pyarrow", "sqlite_utils",
    "numpy", "deep_ep", "uvicorn", "fastapi", "starlette", "pynvml", "rich", "huggingface_hub",
    "aiconfigurator", "pandas",
})

#: Function-level imports of light project modules that other owners' files still carry:
#: ``file -> {module, ...}``. Shrinks only: move an import to module level and delete its entry.
#: (file -> the light modules it may import inside a function; see the module docstring)
LAZY_ALLOWED: dict[str, set[str]] = {}

#: The modules that run inside vLLM's interpreter, started as a script by a Python where autoselect
#: may not be installed: they import the standard library, vllm (inside functions, so the client's
#: tests can import them) and one another (as ``.protocol`` or, run as a script, ``protocol``) —
#: nothing else of autoselect, not even the client modules of their own folder.
WORKER_SIDE = frozenset({"autoselect.bridge.worker", "autoselect.bridge.worker_quant", "autoselect.bridge.protocol"})


# --------------------------------------------------------------------------------------
# The checker (pure: it reads a {module: source} tree, so a test can plant a module)
# --------------------------------------------------------------------------------------


def load_tree(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """``{module name: (path relative to root, source)}`` of every module of :data:`PACKAGES`."""
    tree = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            tree[".".join(parts)] = (rel.as_posix(), path.read_text())
    return tree


def component(module: str) -> str | None:
    """The component of a project module (longest prefix of :data:`COMPONENTS`), None for others."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = COMPONENTS.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


class _Imports(ast.NodeVisitor):
    """Every import of a module: ``(line, imported name, inside a function?)``."""

    def __init__(self, module: str, is_package: bool, known: set[str]):
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.depth = 0
        self.found: list[tuple[int, str, bool]] = []

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((node.lineno, alias.name, self.depth > 0))

    def visit_Assign(self, node: ast.Assign) -> None:
        """A package's table of lazy re-exports (:mod:`autoselect.lazy`): each key is a module-level import."""
        if (not self.depth and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
            for key in node.value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    self.found.append((key.lineno, f"{self.package}.{key.value}", False))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        """``lazy_module("pkg.mod")`` (:func:`autoselect.lazy.lazy_module`) at module level: a module-level import."""
        if (not self.depth and isinstance(node.func, ast.Name) and node.func.id == "lazy_module" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            self.found.append((node.lineno, node.args[0].value, False))
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:  # relative: resolved against this module's package
            anchor = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            self.found.append((node.lineno, sub if sub in self.known else base, self.depth > 0))


def imports_of(tree: dict[str, tuple[str, str]]) -> dict[str, list[tuple[int, str, bool]]]:
    """``{module: [(line, imported module, function-level?)]}`` for every module of ``tree``."""
    known = set(tree)
    out = {}
    for module, (path, source) in tree.items():
        visitor = _Imports(module, path.endswith("__init__.py"), known)
        visitor.visit(ast.parse(source, filename=path))
        out[module] = visitor.found
    return out


def heavy_modules(tree: dict[str, tuple[str, str]], imports=None) -> set[str]:
    """The project modules whose module-level imports reach a :data:`HEAVY` package (transitively)."""
    imports = imports if imports is not None else imports_of(tree)
    direct = {m: {name for _, name, lazy in found if not lazy} for m, found in imports.items()}
    heavy = {m for m, names in direct.items() if any(n.split(".")[0] in HEAVY for n in names)}
    changed = True
    while changed:
        changed = False
        for m, names in direct.items():
            if m not in heavy and any(_owner(n, tree) in heavy for n in names):
                heavy.add(m)
                changed = True
    return heavy


def _owner(name: str, tree) -> str | None:
    """The project module an imported name lives in (``autoselect.rules.legal`` -> ``autoselect.rules``)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in tree:
            return ".".join(parts[:n])
    return None


def violations(tree: dict[str, tuple[str, str]], lazy_allowed: dict[str, set[str]] | None = None) -> list[str]:
    """Every wrong-way import and every function-level import of a light project module, one line each."""
    lazy_allowed = LAZY_ALLOWED if lazy_allowed is None else lazy_allowed
    imports = imports_of(tree)
    heavy = heavy_modules(tree, imports)
    out = []
    for module, found in sorted(imports.items()):
        path = tree[module][0]
        mine = component(module)
        for line, name, lazy in found:
            target = _owner(name, tree)
            theirs = component(target) if target else None
            if target is None or theirs is None or mine is None:
                continue  # a third-party or stdlib module
            if theirs not in MAY_IMPORT[mine]:
                out.append(f"{path}:{line}: {mine} must not import {theirs} ({target})")
            elif lazy and target not in heavy and mine != "cli" and target not in lazy_allowed.get(path, ()):
                out.append(f"{path}:{line}: {target} is light: import it at module level")
    return out


def stale_allowances(tree, lazy_allowed: dict[str, set[str]] | None = None) -> list[str]:
    """Entries of :data:`LAZY_ALLOWED` that no function-level import needs any more."""
    lazy_allowed = LAZY_ALLOWED if lazy_allowed is None else lazy_allowed
    imports = imports_of(tree)
    by_path = {tree[m][0]: m for m in tree}
    out = []
    for path, modules in sorted(lazy_allowed.items()):
        used = {_owner(name, tree) for _, name, lazy in imports.get(by_path.get(path, ""), []) if lazy}
        out += [f"{path}: {m}" for m in sorted(modules - used)]
    return out


def worker_violations(tree: dict[str, tuple[str, str]], worker_side: frozenset[str] = WORKER_SIDE) -> list[str]:
    """Every import of a :data:`WORKER_SIDE` module that vLLM's interpreter could not satisfy, one line each."""
    imports = imports_of(tree)
    out = []
    for module in sorted(worker_side & set(tree)):
        folder = module.rpartition(".")[0]
        for line, name, lazy in imports[module]:
            top = name.split(".")[0]
            if top == "vllm":
                if not lazy:
                    out.append(f"{tree[module][0]}:{line}: vllm imported at module level (import it where it is used)")
            elif top in sys.stdlib_module_names or _owner(name, tree) in worker_side:
                continue
            elif f"{folder}.{top}" in worker_side and "." not in name:
                continue  # a sibling, imported by its bare name when the worker runs as a script
            else:
                out.append(f"{tree[module][0]}:{line}: {name} is not importable inside vLLM's interpreter")
    return out


# --------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree():
    return load_tree()


def test_every_project_module_belongs_to_a_component(tree):
    assert [m for m in tree if component(m) is None] == []


def test_no_module_imports_the_wrong_way_or_hides_a_light_import_in_a_function(tree):
    assert violations(tree) == []


def test_the_allow_list_of_function_level_imports_only_shrinks(tree):
    assert stale_allowances(tree) == []


def test_a_planted_wrong_way_import_is_caught(tree):
    planted = dict(tree)
    planted["db.planted"] = ("db/planted.py", "from autoselect.selector import recommend\n")
    planted["bench.planted"] = ("bench/planted.py", "import autoselect.cli\n\ndef f():\n    from autoselect import tune\n")
    found = [v for v in violations(planted) if "planted" in v]
    assert found == [
        "bench/planted.py:1: bench must not import cli (autoselect.cli)",
        "bench/planted.py:4: bench must not import tune (autoselect.tune)",
        "db/planted.py:1: db must not import selector (autoselect.selector)",
    ]


def test_a_planted_function_level_import_of_a_light_module_is_caught_and_a_heavy_one_is_not(tree):
    planted = dict(tree)
    planted["db.planted"] = ("db/planted.py", (
        "def light():\n    from db.rows import dumps\n\n"
        "def heavy():\n    from db.store import Store\n    import torch\n"))
    found = [v for v in violations(planted) if "planted" in v]
    assert found == ["db/planted.py:2: db.rows is light: import it at module level"]
    assert "db.store" in heavy_modules(tree)  # sqlite_utils at its top


def test_the_worker_imports_only_the_standard_library_vllm_and_its_own_side_of_the_folder(tree):
    assert WORKER_SIDE <= set(tree)
    assert worker_violations(tree) == []


def test_a_planted_import_in_the_worker_is_caught(tree):
    planted = dict(tree)
    planted["autoselect.bridge.worker_planted"] = ("autoselect/bridge/worker_planted.py", (
        "import json\nimport vllm\nfrom autoselect.model import MODELOPT_ALGOS\nfrom . import client\n"
        "from .protocol import Request\nimport protocol\nimport numpy\n\ndef f():\n    import vllm.config\n"))
    found = worker_violations(planted, WORKER_SIDE | {"autoselect.bridge.worker_planted"})
    assert found == [
        "autoselect/bridge/worker_planted.py:2: vllm imported at module level (import it where it is used)",
        "autoselect/bridge/worker_planted.py:3: autoselect.model is not importable inside vLLM's interpreter",
        "autoselect/bridge/worker_planted.py:4: autoselect.bridge.client is not importable inside vLLM's interpreter",
        "autoselect/bridge/worker_planted.py:7: numpy is not importable inside vLLM's interpreter",
    ]


def test_the_vocabulary_and_the_decision_import_nothing_heavy(tree):
    heavy = heavy_modules(tree)
    fast = ["autoselect.errors", "autoselect.options", "autoselect.stopping", "autoselect.payload",
            "autoselect.hardware", "autoselect.model", "autoselect.rules", "autoselect.workload", "autoselect.noise",
            "autoselect.candidates", "autoselect.selector", "autoselect.check", "autoselect.bridge", "db.queries",
            "db.tuned", "autoselect.launch"]
    assert [m for m in fast if m in heavy] == []


def test_the_checker_reads_a_table_of_lazy_re_exports_as_module_level_imports(tree):
    bridge = {name for _, name, lazy in imports_of(tree)["autoselect.bridge"] if not lazy}
    assert {"autoselect.bridge.client", "autoselect.bridge.hooks", "autoselect.bridge.verdicts"} <= bridge
    planted = dict(tree)
    planted["db.planted"] = ("db/planted.py", 'from autoselect.lazy import lazy_exports\n\n'
                             '_LAZY = {"queries": ("results_for",)}\n')
    planted["db.lazy_up"] = ("db/lazy_up/__init__.py", '_LAZY = {"selector": ("recommend",)}\n')
    planted["db.lazy_up.selector"] = ("db/lazy_up/selector.py", "from autoselect.selector import recommend\n")
    assert imports_of(planted)["db.planted"] == [(1, "autoselect.lazy", False), (3, "db.queries", False)]
    assert imports_of(planted)["db.lazy_up"] == [(1, "db.lazy_up.selector", False)]
    assert "db/lazy_up/selector.py:1: db must not import selector (autoselect.selector)" in violations(planted)


def test_the_checker_reads_a_lazy_module_as_a_module_level_import(tree):
    choose = {name for _, name, lazy in imports_of(tree)["autoselect.launch.choose"] if not lazy}
    assert {"autoselect.launch.local", "autoselect.launch.service"} <= choose
    planted = dict(tree)
    planted["db.planted"] = ("db/planted.py", 'from autoselect.lazy import lazy_module\n\n'
                             '_selector = lazy_module("autoselect.selector")\n')
    assert imports_of(planted)["db.planted"] == [(1, "autoselect.lazy", False), (3, "autoselect.selector", False)]
    assert "db/planted.py:3: db must not import selector (autoselect.selector)" in violations(planted)


#: Module names several packages use, each for the same role in its own package: its mistakes,
#: its entry as a library call, its typed progress events, its worker process and the protocol
#: spoken with it, its statistics, its per-node view of a fleet. Any other name means one thing.
SHARED_ROLE_NAMES = frozenset({"__init__", "__main__", "errors", "run", "events", "worker", "protocol", "stats",
                               "nodes"})


def test_a_module_name_means_one_thing_across_the_packages(tree):
    folders: dict[str, set[str]] = {}
    for path, _ in tree.values():
        name = Path(path).stem
        folders.setdefault(name, set()).add(str(Path(path).parent))
    shared = {name: sorted(where) for name, where in folders.items() if len(where) > 1}
    assert {name: where for name, where in shared.items() if name not in SHARED_ROLE_NAMES} == {}
    # the names that once meant two things (the JSONL format and shape transfer, the database
    # schema and the answer's, ...) mean one
    for name in ("workload", "transfer", "schema", "fields", "health", "flags", "target", "store"):
        assert len(folders.get(name, ())) <= 1, (name, folders.get(name))


def test_the_checker_sees_function_level_and_relative_imports():
    tree = {"bench": ("bench/__init__.py", ""), "bench.a": ("bench/a.py", "from . import b\n"),
            "bench.b": ("bench/b.py", "def f():\n    from .a import x\n")}
    assert imports_of(tree) == {"bench": [], "bench.a": [(1, "bench.b", False)], "bench.b": [(2, "bench.a", True)]}


if __name__ == "__main__":  # python tests/test_layering.py: list what the checker finds
    print("\n".join(violations(load_tree()) + stale_allowances(load_tree())) or "clean", file=sys.stderr)
