"""Backend adapters: the common interface, the context they run in, and the registry.

Each adapter is one file, one class, with these methods in this order:

- ``unavailable_reason(ctx) -> str | None``: missing package, no CUDA, no NVLink ... A
  reason means the backend is recorded ``unavailable`` for the point, not ``error``.
- ``needs_fresh_process(ctx, point) -> str | None``: optional (default None); why this point
  cannot be set up in this process after what earlier points left in it (a buffer that
  cannot be rebuilt in place). The worker group then restarts and runs the point in fresh
  processes. A backend that can rebuild (DeepEP's buffers for a larger batch) does so in
  ``setup`` instead.
- ``setup(ctx, point)``: collective; allocates workspaces for this shape. A worker group calls
  it for every point of every job in the same processes: state an adapter keeps between
  points (a workspace cached per geometry) must be poisoned before reuse, so that a point
  never passes the gate on an earlier point's bytes.
- ``dispatch(batch) -> Received``: moves each token's payload to every rank owning one of
  its experts.
- ``combine(expert_out) -> out``: sends the expert outputs (one bf16 row per received row,
  weights already applied) back and sums them per source token: ``bf16 [T, H]`` in the
  order of the batch's tokens.
- ``teardown()``.
- ``code_path() -> dict``: optional (default ``{}``); after ``setup``, which upstream code path the
  adapter took, as ``versions`` entries of the stored result (the FlashInfer adapters: the API
  generation and the vLLM release whose calls they made, ``vllm_calls``).
- ``footing() -> dict``: optional (default ``{}``); after ``setup``, the footing fields of the
  stored result the adapter decides (``db.records``: ``calls``, ``dp_sizes``, ``via``); the harness
  records how the point was timed (``timing``) itself.

Adapters never time, check or print: ``bench/measure/`` does that. Optional packages are
imported inside ``unavailable_reason``/``setup``.

Registration is one path for everyone: the ``autoselect.backends`` entry-point group
(``pyproject.toml``; third-party packages add their own). The built-in adapters are declared
once, in the backend registry (``autoselect.rules.ADAPTERS``: each backend's row in
``autoselect/rules/backends.py``); pyproject.toml's entry points list the same
(``tests/test_backend_registry.py``). Only when autoselect's own package metadata is absent (a
source checkout on ``PYTHONPATH``, not pip-installed) does :func:`available` fall back to
:data:`BUILTIN`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from autoselect.errors import UnknownBackend
from autoselect.rules import ADAPTERS
from db.records import ADAPTER, EQUAL, VLLM

ENTRY_POINT_GROUP = "autoselect.backends"

#: The built-in adapters (name -> ``module:Class``), as the registry declares them and
#: pyproject.toml registers them; used only when autoselect is not installed (no package metadata).
BUILTIN: dict[str, str] = dict(ADAPTERS)


#: Activation dtypes ``--via vllm`` measures (:class:`bench.backends.vllm_path.VllmPath`): vLLM quantizes
#: the bf16 input itself, and these dtypes' synthetic payloads survive that bit for bit (bf16 passes
#: unquantized; ``bench.synthetic``'s fp8_block128 rows are quantization-stable), so the gate checks
#: every received byte and the exact bf16 combine.
VLLM_PATH_DTYPES = ("bf16", "fp8_block128")


@dataclass
class BenchContext:
    """Where an adapter runs: rank, world, device and process groups.

    ``group`` carries the data (gloo on CPU, NCCL on CUDA); ``cpu_group`` is a gloo group
    for host-side exchanges (handles, counts). ``nvlinks_all_up`` comes from the host
    fingerprint (None when unknown). ``vllm_version``: the release whose code path an adapter
    mirrors where releases differ (None: the newest the rules know). ``gpu_arch``: the GPU arch
    family (``sm90``, ``sm100``; None on CPU), which sets vLLM's CUDA-graph capture size.
    ``dp_sizes``: ``equal`` or ``unequal``, the call path of vLLM's default for equal or unequal
    token counts per DP rank (``db.records.DP_SIZES``); other adapters ignore it.
    """

    rank: int
    world_size: int
    device: str  # "cpu" or "cuda"
    torch_device: object
    group: object = None
    cpu_group: object = None
    local_rank: int = 0
    nvlinks_all_up: bool | None = None
    vllm_version: str | None = None
    gpu_arch: str | None = None
    dp_sizes: str = EQUAL


@dataclass
class Received:
    """What dispatch delivered to one rank: one row per received token (or per expert slot).

    ``x``/``x_sf`` the token's payload bytes, ``topk_ids``/``topk_weights`` its full routing
    (global expert ids), ``token_index`` its global id (``int [R]``). ``valid`` (``bool [R]``)
    marks rows that carry a token; None means every row does. The harness computes one
    expert-output row per received row, in the same order, for :meth:`Backend.combine`:
    the row's sum over this rank's experts of ``w_k · expert_k(x)``.

    Per-expert layouts (DeepEP low-latency) set ``expert`` (``int [R]``, the global expert
    of each slot): each row is one (token, local expert) pair, its output is the unweighted
    ``expert(x)`` and combine applies the weights; ``topk_ids``/``topk_weights`` may be None.
    """

    x: object
    x_sf: object | None
    topk_ids: object | None
    topk_weights: object | None
    token_index: object
    valid: object | None = None
    expert: object | None = None


class Backend:
    """Base class of the adapters; see the module docstring for the contract."""

    #: The registry key: the exact ``--all2all-backend`` value, or ``reference_*``.
    name = ""
    #: Whether one dispatch + combine may be captured in a CUDA graph and replayed.
    supports_cuda_graph = False

    def unavailable_reason(self, ctx: BenchContext) -> str | None:
        """Why this backend cannot run here, or None when it can."""
        return None

    def needs_fresh_process(self, ctx: BenchContext, point) -> str | None:
        """Why ``point`` cannot be set up in this process (the group then restarts), or None."""
        return None

    def setup(self, ctx: BenchContext, point) -> None:
        """Allocate what the shape needs (collective)."""
        raise NotImplementedError

    def dispatch(self, batch) -> Received:
        """Move each token's payload to every rank owning one of its experts."""
        raise NotImplementedError

    def combine(self, expert_out):
        """Return the per-token sum of the expert outputs, ``bf16 [T, H]`` in batch order."""
        raise NotImplementedError

    def teardown(self) -> None:
        """Release what setup allocated."""

    def code_path(self) -> dict[str, str]:
        """Which upstream code path the last ``setup`` took (``versions`` entries of the result), or ``{}``."""
        return {}

    def footing(self) -> dict[str, str]:
        """The footing fields the last ``setup`` decided (``calls``, ``dp_sizes``, ``via``), or ``{}``."""
        return {}


def _autoselect_installed() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("autoselect")
    except PackageNotFoundError:
        return False
    return True


def available() -> dict[str, str]:
    """``name -> "module:Class"`` for every registered adapter (entry points, sorted)."""
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if not _autoselect_installed():
        found = {**BUILTIN, **found}
    return dict(sorted(found.items()))


def check_names(names) -> list[str]:
    """Return ``names`` unchanged, or raise :class:`autoselect.errors.UnknownBackend` naming the first unknown one."""
    known = available()
    for name in names:
        if name not in known:
            raise UnknownBackend(
                f"unknown backend {name!r}; known: {', '.join(known)} "
                f"(third-party adapters register in the {ENTRY_POINT_GROUP!r} entry-point group)"
            )
    return list(names)


def load(name: str, via: str = ADAPTER) -> Backend:
    """Import and instantiate the adapter registered as ``name``; with ``via="vllm"``, vLLM's own
    prepare / finalize objects for that backend (:class:`bench.backends.vllm_path.VllmPath`)."""
    if via == VLLM:
        from bench.backends.vllm_path import VllmPath

        check_names([name])
        return VllmPath(name)
    target = available().get(name)
    if target is None:
        check_names([name])
    module_name, _, attr = target.partition(":")
    cls = getattr(import_module(module_name), attr)
    adapter = cls()
    if not adapter.name:
        adapter.name = name
    return adapter
