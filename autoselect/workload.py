"""What is measured and served: the MoE shape, the deployment, and the workload's token buckets.

* :class:`Shape` — the all2all's shape: hidden size, experts per token, routed experts and the
  activation (dispatch) dtype. One keyword-only type for every command (tune's study key, fleet's
  explicit shapes, drift's points, bench's ``--hidden/--top-k/--experts/--dtype`` and tune's
  ``shape:HIDDENxEXPERTSxTOPK:DTYPE``).
* :class:`Deployment` — ``dp`` engines of ``tp`` ranks; the all2all spans ``dp * tp`` ranks.
* :class:`WorkloadSpec` — the token counts per rank a decision is made on, each with its share of
  forward steps (``--workload decode|prefill|mixed`` through :data:`WORKLOAD_TABLE`, or ``--tokens``).

Pure Python (on the fast path of ``recommend``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple

from autoselect.errors import InvalidShape, MissingShape, UserError
from autoselect.model import MoeProfile
from autoselect.model.profile import shape_label
from autoselect.options import MAX_EXPERTS, MAX_HIDDEN, MAX_TOKENS_PER_RANK, MAX_WORLD_SIZE, parse_weighted_tokens
from autoselect.payload import ACTIVATION_DTYPES


class BadDeployment(UserError):
    "The --dp / --tp / --world-size combination is inconsistent or out of range."


class NoAll2All(UserError):
    "The deployment (dp = 1) uses no all2all, so no backend choice exists."


class UnknownWorkload(UserError):
    "The --workload name is not one of decode, prefill, mixed."


class BadWorkloadOption(UserError):
    "--workload and --tokens given together, or --concurrency / --max-num-batched-tokens out of range."


class UnknownRole(UserError):
    "The serving role is not prefill, decode or both."


# --------------------------------------------------------------------------------------
# Shape
# --------------------------------------------------------------------------------------

#: compiled on first use (re's cache): only a ``shape:`` model needs it
_SHAPE_SPEC = r"shape:([0-9]+)x([0-9]+)x([0-9]+):([a-z0-9_]+)"


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The all2all's shape: ``hidden`` size, ``top_k`` experts per token, ``experts`` routed
    experts, activation (dispatch) ``dtype``. Keyword-only, checked when built.

    :raises InvalidShape: a size below 1, top_k above experts, or a dtype not in ACTIVATION_DTYPES.
    """

    hidden: int
    top_k: int
    experts: int
    dtype: str

    def __post_init__(self) -> None:
        for name, top in (("hidden", MAX_HIDDEN), ("top_k", MAX_EXPERTS), ("experts", MAX_EXPERTS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidShape(f"{name} must be a positive integer, got {value!r}")
            if value > top:  # a typo, never a model: it must fail before any store or study opens
                raise InvalidShape(f"{name} {value} is above {top}, larger than any MoE model; check the value")
        if self.top_k > self.experts:
            raise InvalidShape(f"top_k ({self.top_k}) cannot exceed the number of experts ({self.experts})")
        if self.dtype not in ACTIVATION_DTYPES:
            raise InvalidShape(f"unknown activation dtype {self.dtype!r}; use one of {', '.join(ACTIVATION_DTYPES)}")

    @classmethod
    def of(cls, profile: MoeProfile, gpu_arch: str) -> "Shape":
        """The shape ``profile`` dispatches on ``gpu_arch`` (its activation dtype there)."""
        return cls(hidden=profile.hidden_size, top_k=profile.top_k, experts=profile.num_experts,
                   dtype=profile.activation_dtype(gpu_arch))

    @classmethod
    def parse(cls, text: str, *, what: str = "--model") -> "Shape":
        """``shape:HIDDENxEXPERTSxTOPK:DTYPE`` (e.g. ``shape:2048x32x4:bf16``; ASCII digits).

        :raises InvalidShape: text that is not in that form, or a shape that cannot exist.
        """
        m = re.fullmatch(_SHAPE_SPEC, text.strip())
        if not m:
            raise InvalidShape(f"{what} {text!r} is not shape:HIDDENxEXPERTSxTOPK:DTYPE; e.g. shape:2048x32x4:bf16")
        hidden, experts, top_k, dtype = m.groups()
        return cls(hidden=int(hidden), top_k=int(top_k), experts=int(experts), dtype=dtype)

    @classmethod
    def from_options(cls, *, hidden: int | None, top_k: int | None, experts: int | None,
                     dtype: str | None) -> "Shape | None":
        """The shape of ``--hidden/--top-k/--experts/--dtype``; None when none of them is given.

        :raises MissingShape: some but not all of the four are given.
        """
        given = {"--hidden": hidden, "--top-k": top_k, "--experts": experts, "--dtype": dtype}
        if all(v is None for v in given.values()):
            return None
        missing = [name for name, v in given.items() if v is None]
        if missing:
            raise MissingShape(f"missing {', '.join(missing)}: an explicit shape needs all of --hidden, --top-k, "
                               "--experts and --dtype (or pass --model)")
        return cls(hidden=hidden, top_k=top_k, experts=experts, dtype=dtype)

    def profile(self) -> MoeProfile:
        """A :class:`~autoselect.model.MoeProfile` of this shape (same dtype on every arch)."""
        return MoeProfile.from_shape(hidden_size=self.hidden, num_experts=self.experts, top_k=self.top_k,
                                     activation_dtype=self.dtype)

    def key(self) -> str:
        """A stable text form (study names): ``h7168-k8-e256-fp8_block128``."""
        return f"h{self.hidden}-k{self.top_k}-e{self.experts}-{self.dtype}"

    def label(self) -> str:
        """A short human form: ``H7168 top8 E256 fp8_block128``."""
        return shape_label(self.hidden, self.top_k, self.experts, self.dtype)


# --------------------------------------------------------------------------------------
# Deployment
# --------------------------------------------------------------------------------------


class Deployment(NamedTuple):
    """How vLLM is launched: ``dp`` data-parallel engines of ``tp`` tensor-parallel ranks.

    The EP group (and the all2all) spans ``world_size = dp * tp`` ranks.
    """

    dp: int = 1
    tp: int = 1

    @property
    def world_size(self) -> int:
        """The EP size: ``dp * tp``."""
        return self.dp * self.tp

    def to_dict(self) -> dict[str, int]:
        """``{"dp", "tp", "world_size"}``."""
        return {"dp": self.dp, "tp": self.tp, "world_size": self.world_size}


def check_deployment_flags(dp: int | None, tp: int | None, world_size: int | None) -> None:
    """Refuse a ``--dp`` / ``--tp`` / ``--world-size`` below 1 or above
    :data:`autoselect.options.MAX_WORLD_SIZE` (each may be None), and a dp x tp above it."""
    for name, value in (("--dp", dp), ("--tp", tp), ("--world-size", world_size)):
        if value is not None and value < 1:
            raise BadDeployment(f"{name} {value} must be at least 1")
        if value is not None and value > MAX_WORLD_SIZE:
            raise BadDeployment(f"{name} {value} is above {MAX_WORLD_SIZE} ranks, more than any deployment; "
                                "check the value")
    if dp is not None and tp is not None and dp * tp > MAX_WORLD_SIZE:
        raise BadDeployment(f"--dp {dp} x --tp {tp} = {dp * tp} ranks is above {MAX_WORLD_SIZE}; check the values")


def resolve_deployment(
    dp: int | None, tp: int | None, world_size: int | None, local_gpus: int | None
) -> Deployment:
    """The deployment from the user's flags; defaults: all ``local_gpus`` as dp, tp 1.

    :param dp: ``--dp`` or None.
    :param tp: ``--tp`` or None (1).
    :param world_size: ``--world-size`` (EP size = dp * tp) or None.
    :param local_gpus: GPUs of the target host, used when neither dp nor world size is given.
    :raises BadDeployment: inconsistent or out-of-range flags; :class:`NoAll2All`: dp 1.
    """
    check_deployment_flags(dp, tp, world_size)
    tp = tp or 1
    if dp is None:
        dp = _default_dp(tp, world_size, local_gpus)
    if world_size is not None and world_size != dp * tp:
        raise BadDeployment(
            f"--world-size {world_size} != --dp {dp} x --tp {tp}; pass two of the three consistently"
        )
    if dp < 2:
        raise NoAll2All(
            f"dp={dp}: vLLM only uses an all2all backend with --data-parallel-size > 1 "
            "(tensor-parallel-only expert parallelism has no all2all); pass --dp 2 or more"
        )
    return Deployment(dp=dp, tp=tp)


def _default_dp(tp: int, world_size: int | None, local_gpus: int | None) -> int:
    if world_size is not None:
        if world_size % tp:
            raise BadDeployment(
                f"--world-size {world_size} is not a multiple of --tp {tp}; "
                "pass a world size that dp x tp can make"
            )
        return world_size // tp
    if local_gpus:
        if local_gpus % tp:
            raise BadDeployment(f"--tp {tp} does not divide the host's {local_gpus} GPUs; pass --dp explicitly")
        return local_gpus // tp
    raise BadDeployment(
        "the target host has no GPUs to default to; pass --dp (or --world-size) "
        "or --host-class of a GPU host in the database"
    )


# --------------------------------------------------------------------------------------
# Workload: token buckets per rank
# --------------------------------------------------------------------------------------

#: The load the decode buckets assume when the user does not say (``--concurrency``): running
#: requests over the whole deployment. A load assumption, not a vLLM default (vLLM 0.34's own
#: ``max_num_seqs`` is 1024 per engine on GPUs with >= 70 GiB). The prefill bucket's budget is
#: vLLM's, for the target's GPUs (:func:`autoselect.rules.token_budget`), passed in by the caller.
DEFAULT_CONCURRENCY = 256

#: How ``--workload`` becomes token buckets. Each row is ``(step, fraction, weight)``:
#: ``step`` "decode" = one token per running request of an engine, ``concurrency / dp``;
#: ``step`` "prefill" = a full chunked-prefill step, ``max_num_batched_tokens`` (vLLM's
#: budget is per engine, i.e. per DP rank). ``fraction`` scales that step (load below peak);
#: ``weight`` is the share of forward steps of that size. With tp > 1, sequence-parallel
#: MoE splits an engine's tokens over its tp ranks: tokens per rank = ceil(step * fraction / tp).
WORKLOAD_TABLE: dict[str, tuple[tuple[str, float, float], ...]] = {
    "decode": (("decode", 1.0, 0.5), ("decode", 0.5, 0.3), ("decode", 0.25, 0.2)),
    "prefill": (("prefill", 1.0, 0.7), ("prefill", 0.5, 0.2), ("prefill", 0.25, 0.1)),
    "mixed": (
        ("decode", 1.0, 0.4),
        ("decode", 0.5, 0.25),
        ("decode", 0.25, 0.15),
        ("prefill", 1.0, 0.2),
    ),
}


class WorkloadSpec(NamedTuple):
    """The token counts per rank to compare on, each with its share of forward steps."""

    kind: str  # "decode" | "prefill" | "mixed" | "explicit"
    buckets: tuple[tuple[int, float], ...]  # (tokens_per_rank, weight); weights sum to 1

    @property
    def tokens(self) -> list[int]:
        """The token counts per rank, ascending."""
        return [t for t, _ in self.buckets]

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "buckets": [{"tokens_per_rank", "weight"}]}``."""
        return {
            "kind": self.kind,
            "buckets": [{"tokens_per_rank": t, "weight": round(w, 6)} for t, w in self.buckets],
        }


def normalized_workload(kind: str, pairs: Iterable[tuple[int, float]]) -> WorkloadSpec:
    """``(tokens, weight)`` pairs as a :class:`WorkloadSpec`: repeats merged, weights summing to 1.

    The weights are relative and each finite, but their sum need not be (``1:1e308,64:1e308``):
    summed as given it overflows to ``inf``, every share becomes 0 and every backend "ties" at 0 µs.
    So each weight is divided by the largest first (shares in ``[0, 1]``, a sum of at most one
    per item); a bucket whose share rounds to 0 carries no weight and is dropped, as a zero
    weight is. Every bucket must lie in ``[1, MAX_TOKENS_PER_RANK]``: a workload beyond what
    ``bench`` can measure would compare extrapolations and suggest a bench command that fails.

    :raises BadWorkloadOption: no positive finite weight, or a bucket out of range.
    """
    pairs = list(pairs)
    for tokens, _ in pairs:
        if not 1 <= tokens <= MAX_TOKENS_PER_RANK:
            raise BadWorkloadOption(
                f"the workload has a bucket of {tokens} tokens per rank, outside 1..{MAX_TOKENS_PER_RANK}; "
                "lower --concurrency or --max-num-batched-tokens, or pass --tokens")
    weights = [w for _, w in pairs]
    if not weights or not all(math.isfinite(w) and w >= 0 for w in weights) or max(weights) <= 0:
        raise BadWorkloadOption(f"workload weights {weights} must be finite, non-negative and not all zero")
    top = max(weights)
    merged: dict[int, float] = {}
    for tokens, weight in pairs:
        merged[tokens] = merged.get(tokens, 0.0) + weight / top
    total = sum(merged.values())
    shares = ((t, round(merged[t] / total, 12)) for t in sorted(merged))
    return WorkloadSpec(kind, tuple((t, w) for t, w in shares if w > 0))


#: What one instance serves in prefill/decode disaggregation (``check --role``, ``launch --role``;
#: a line's --kv-transfer-config kv_role says it too), and the workload it is weighed on.
ROLE_WORKLOAD = {"prefill": "prefill", "decode": "decode", "both": "mixed"}
ROLES = tuple(ROLE_WORKLOAD)


def check_role(role: str | None) -> None:
    """Refuse a role that is not one of :data:`ROLES` (None: unknown, accepted)."""
    if role is not None and role not in ROLES:
        raise UnknownRole(f"unknown role {role!r}; use prefill, decode or both")


def check_workload_kind(kind: str) -> None:
    """Refuse a ``--workload`` name that is not in :data:`WORKLOAD_TABLE`."""
    if kind not in WORKLOAD_TABLE:
        raise UnknownWorkload(
            f"unknown workload {kind!r}; use one of {', '.join(WORKLOAD_TABLE)} or --tokens"
        )


def workload_from_kind(
    kind: str,
    deployment: Deployment,
    *,
    max_num_batched_tokens: int,
    concurrency: int | None = None,
) -> WorkloadSpec:
    """The buckets of ``--workload decode|prefill|mixed`` (see :data:`WORKLOAD_TABLE`).

    :param max_num_batched_tokens: the per-engine token budget per step the prefill bucket carries
        (the user's, else vLLM's default for the GPUs: :func:`autoselect.rules.token_budget`).
    :param concurrency: running requests over the whole deployment (default :data:`DEFAULT_CONCURRENCY`).
    """
    check_workload_kind(kind)
    concurrency = DEFAULT_CONCURRENCY if concurrency is None else concurrency
    mnbt = max_num_batched_tokens
    if concurrency < 1 or mnbt < 1:
        raise BadWorkloadOption("--concurrency and --max-num-batched-tokens must be at least 1")
    step = {"decode": concurrency / deployment.dp, "prefill": float(mnbt)}
    pairs = [
        (max(1, math.ceil(step[source] * fraction / deployment.tp)), weight)
        for source, fraction, weight in WORKLOAD_TABLE[kind]
    ]
    return normalized_workload(kind, pairs)


def workload_from_tokens(text: str, *, what: str = "--tokens") -> WorkloadSpec:
    """``--tokens`` per rank, e.g. ``"1,64,8192"`` (equal weights) or ``"1:0.5,64:0.3,8192:0.2"``.

    The weighted-token-list grammar (:func:`autoselect.options.parse_weighted_tokens`); the
    weights are normalized to sum 1 and repeated token counts merged.
    """
    return normalized_workload("explicit", parse_weighted_tokens(text, what=what))


def equal_workload(tokens: Iterable[int]) -> WorkloadSpec:
    """An explicit workload of ``tokens`` per rank, equally weighted (what ``--tokens 1,8,64`` gives)."""
    return normalized_workload("explicit", [(t, 1.0) for t in tokens])
