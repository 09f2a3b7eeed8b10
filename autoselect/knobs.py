"""The backend knobs ``autoselect tune`` may search: a table of real settings, each with its source.

A knob is a setting that exists in vLLM, FlashInfer or NCCL and changes how fast an all2all
backend runs. Every row names the backend(s) it applies to, how it is set (an environment
variable for the workers, a ``vllm serve`` flag, or an argument the benchmark adapter passes to
the kernel library), the values searched, the value that is used when it is left unset (the
"untuned" baseline), where it is documented or read, and when it is legal.

Legality is data too: ``CONDITIONS`` (whole-knob), ``VALUE_RULES`` (per value) and
``PAIR_RULES`` (between two knobs). The tuner only ever asks for settings that
:func:`check_setting` accepts, so an illegal combination is never a trial.

This module is imported by ``recommend``'s path (to print knobs): stdlib only.

What was researched and deliberately left out (no speed effect, not reachable from vLLM, or
not honest to search on this machine) is in ``NOT_SEARCHED``, with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Callable

from autoselect.errors import UserError

#: How a knob reaches the backend.
KINDS = ("env", "flag", "adapter-arg")

#: The value a search uses for "leave it unset" (the backend's own default).
UNSET = "default"


class UnknownKnob(UserError):
    "A knob name that is not in the knob table."


class IllegalKnobSetting(UserError):
    "A knob setting that is illegal for this backend, host or workload."


@dataclass(frozen=True)
class KnobContext:
    """What a knob's legality depends on: the host, the EP group and the workload."""

    device: str = "cuda"  # "cuda" or "cpu"
    gpu_arch: str | None = None  # "sm90" / "sm100"; None on CPU
    world_size: int = 8
    nodes: int = 1
    all_nvlinks_up: bool = False
    max_num_batched_tokens: int = 256  # the token budget the deployment needs: the workload's largest batch per rank
    enable_dbo: bool = False  # vllm serve --enable-dbo
    cpus: int = 0  # CPU cores of the host (CPU runs)
    #: Whether the benchmark applies ``vllm serve`` flag knobs. bench's adapters size their
    #: workspaces to the measured batch (FlashInfer one-sided: max_num_tokens = tokens per
    #: rank), so a --max-num-batched-tokens value would not change what is measured: False.
    bench_applies_flags: bool = False

    @classmethod
    def from_host(cls, host: Any, *, world_size: int, max_num_batched_tokens: int,
                  enable_dbo: bool = False) -> "KnobContext":
        """Build a context from an ``autoselect.hardware.HostFingerprint`` (or None: a CPU host)."""
        if host is None:
            return cls(device="cpu", world_size=world_size, max_num_batched_tokens=max_num_batched_tokens,
                       enable_dbo=enable_dbo, cpus=os.cpu_count() or 1)
        return cls(
            device=getattr(host, "device", "cpu") or "cpu",
            gpu_arch=getattr(host, "gpu_arch", None),
            world_size=world_size,
            all_nvlinks_up=bool(getattr(host, "all_nvlinks_up", False)),
            max_num_batched_tokens=max_num_batched_tokens,
            enable_dbo=enable_dbo,
            cpus=os.cpu_count() or 1,
        )


@dataclass(frozen=True)
class Knob:
    """One searchable setting of one or more backends."""

    name: str  # env var name, flag spelling, or adapter argument name
    kind: str  # one of KINDS
    backends: tuple[str, ...]
    values: tuple[str, ...]  # searched values, besides UNSET
    default: str  # what the backend uses when the knob is unset (documentation)
    legal_when: tuple[str, ...]  # names in CONDITIONS, all must hold
    source: str  # file/line or doc URL where the setting is read/documented
    effect: str  # one line: what it changes
    value_rules: dict[str, tuple[str, ...]] = field(default_factory=dict)  # value -> VALUE_RULES names
    all_values_rule: str | None = None  # a VALUE_RULES name applied to every value

    def choices(self) -> tuple[str, ...]:
        """Every value a study stores for this knob: UNSET first, then the searched values."""
        return (UNSET, *self.values)


def _is_hopper_or_newer(ctx: KnobContext) -> bool:
    return ctx.gpu_arch in ("sm90", "sm100")


#: Whole-knob legality: name -> (predicate, why it is illegal when the predicate is false).
CONDITIONS: dict[str, tuple[Callable[[KnobContext], bool], str]] = {
    "cpu": (lambda c: c.device == "cpu", "only meaningful for CPU (gloo) workers"),
    "cuda": (lambda c: c.device == "cuda",
             "only read by CUDA code (NCCL / GPU kernels); a CPU run uses gloo and ignores it"),
    "nvlink": (lambda c: c.all_nvlinks_up, "needs every NVLink of each GPU up"),
    "hopper_or_newer": (_is_hopper_or_newer, "needs an SM90 or SM100 GPU"),
    "multi_node": (lambda c: c.nodes > 1, "only used with one GPU per node (multi-node EP)"),
    "enable_dbo": (lambda c: c.enable_dbo, "only read when vllm serve runs with --enable-dbo"),
    "bench_applies_flags": (lambda c: c.bench_applies_flags,
                            "the benchmark adapters size their workspace to the measured batch, so this "
                            "serve flag cannot be measured by autoselect's harness yet"),
}

#: Per-value legality: name -> (predicate(value, ctx), why it is illegal).
VALUE_RULES: dict[str, tuple[Callable[[str, KnobContext], bool], str]] = {
    "hopper_nvlink": (lambda v, c: _is_hopper_or_newer(c) and c.all_nvlinks_up,
                      "NCCL enables it only on SM90/SM100 with NVLink; forcing it elsewhere can corrupt data"),
    "multi_node": (lambda v, c: c.nodes > 1, "NCCL uses it only with one GPU per node"),
    "within_cpus": (lambda v, c: int(v) <= c.cpus, "more threads than this host has CPU cores"),
    "covers_workload": (lambda v, c: int(v) >= c.max_num_batched_tokens,
                        "smaller than the workload's largest batch per rank"),
}

#: Between two knobs: (knob a, knob b, relation, why). Checked only when both are set.
PAIR_RULES: tuple[tuple[str, str, str, str], ...] = (
    ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "<=",
     "NCCL_MIN_NCHANNELS above NCCL_MAX_NCHANNELS is contradictory"),
)

_RELATIONS: dict[str, Callable[[int, int], bool]] = {"<=": lambda a, b: a <= b}

_NCCL_ENV_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
_FI_KERNELS = ("flashinfer-ai/flashinfer@8e87d1eb:csrc/nv_internal/tensorrt_llm/kernels/"
               "communicationKernels/moeAlltoAllKernels.cu (moe_a2a_dispatch_launch / combine launch "
               "read tensorrt_llm::common::getEnvMoeA2A{Dispatch,Combine}BlockSize(), "
               "csrc/nv_internal/cpp/common/envUtils.cpp: default 256, multiples of 32 in [32, 1024])")

#: The knob table. Order matters only for display and for the order the tuner visits knobs.
KNOBS: tuple[Knob, ...] = (
    # --- allgather_reducescatter on GPUs: vLLM's AgRsAll2AllManager calls all_gatherv /
    # reduce_scatterv on the DP/EP group, which run on NCCL (PyNccl). NCCL's env vars are read
    # once at communicator init and apply to every NCCL collective of the process.
    Knob("NCCL_PROTO", "env", ("allgather_reducescatter",), ("LL", "LL128", "Simple"), "auto",
         ("cuda",), f"{_NCCL_ENV_DOC}#nccl-proto",
         "forces NCCL's protocol for the all-gather (dispatch) and reduce-scatter (combine)",
         value_rules={"LL128": ("hopper_nvlink",)}),
    Knob("NCCL_ALGO", "env", ("allgather_reducescatter",), ("Ring", "NVLS", "PAT"), "auto",
         ("cuda",), f"{_NCCL_ENV_DOC}#nccl-algo",
         "forces NCCL's algorithm; all-gather / reduce-scatter support Ring, NVLS (NVLink SHARP) and PAT",
         value_rules={"NVLS": ("hopper_nvlink",), "PAT": ("multi_node",)}),
    Knob("NCCL_MIN_NCHANNELS", "env", ("allgather_reducescatter",), ("4", "8", "16", "32"), "auto",
         ("cuda",), f"{_NCCL_ENV_DOC}#nccl-min-nchannels",
         "lower bound on NCCL channels (CTAs) per collective"),
    Knob("NCCL_MAX_NCHANNELS", "env", ("allgather_reducescatter",), ("4", "8", "16", "32"), "auto",
         ("cuda",), f"{_NCCL_ENV_DOC}#nccl-max-nchannels",
         "upper bound on NCCL channels (CTAs) per collective"),
    # --- FlashInfer NVLink one-sided (TensorRT-LLM's MoE all-to-all kernels inside FlashInfer).
    Knob("TLLM_MOE_A2A_DISPATCH_BLOCK_SIZE", "env", ("flashinfer_nvlink_one_sided",),
         ("64", "128", "512", "1024"), "256", ("cuda", "nvlink"), _FI_KERNELS,
         "threads per CTA of the one-sided dispatch kernel (one warp or one CTA per token)"),
    Knob("TLLM_MOE_A2A_COMBINE_BLOCK_SIZE", "env", ("flashinfer_nvlink_one_sided",),
         ("64", "128", "512", "1024"), "256", ("cuda", "nvlink"), _FI_KERNELS,
         "threads per CTA of the one-sided combine kernel"),
    # --- --max-num-batched-tokens sizes the one-sided workspace (max_num_tokens per rank) and
    # DeepEP low-latency buffers; the combine-prepare grid spans ep_size * max_num_tokens slots.
    Knob("--max-num-batched-tokens", "flag", ("flashinfer_nvlink_one_sided", "deepep_low_latency"),
         ("256", "1024", "2048", "4096", "8192", "16384"),
         "8192 (>=70 GiB GPUs), 16384 (>=160 GiB); 256 with deepep_low_latency",
         ("cuda", "bench_applies_flags"),
         "vllm-project/vllm 0.33.0 vllm/model_executor/layers/fused_moe/all2all_utils.py "
         "(FlashInferNVLinkOneSidedPrepareAndFinalize(max_num_tokens=scheduler_config."
         "max_num_batched_tokens)); vllm/engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args",
         "token capacity of the one-sided workspace / DeepEP LL buffers (smaller = less to scan and zero)",
         all_values_rule="covers_workload"),
    # --- CPU (gloo) runs. No vLLM, FlashInfer or gloo setting changes a gloo all2all here (see
    # NOT_SEARCHED), but the benchmark's CPU workers run torch ops around the collectives
    # (packing rows, summing expert outputs) on torch's intra-op pool, which the harness pins
    # to one thread unless OMP_NUM_THREADS is set for the workers.
    Knob("OMP_NUM_THREADS", "env", ("allgather_reducescatter", "reference_all_to_all"), ("2", "4", "8"),
         "1 (bench/launch.py pins CPU workers to one thread)", ("cpu",),
         "bench/launch.py serve_job + worker_env (torch.set_num_threads(1) unless the job env sets "
         "OMP_NUM_THREADS); https://pytorch.org/docs/stable/generated/torch.set_num_threads.html",
         "intra-op threads of each CPU worker's tensor ops around the gloo collectives",
         all_values_rule="within_cpus"),
    # --- DeepEP high-throughput: vLLM hard-codes num_sms = 20 and only lets DBO lower it.
    Knob("VLLM_DBO_COMM_SMS", "env", ("deepep_high_throughput",), ("8", "12", "16"), "20",
         ("cuda", "enable_dbo"),
         "vllm-project/vllm vllm/envs.py VLLM_DBO_COMM_SMS (default 20); "
         "vllm/distributed/device_communicators/all2all.py@00143004 DeepEPHTAll2AllManager.set_num_sms "
         "(can only lower the hard-coded 20)",
         "SMs DeepEP's high-throughput kernels may use while DBO overlaps compute"),
)

#: Researched and not searched, with the reason (shown by ``autoselect tune --list-knobs``).
NOT_SEARCHED: tuple[tuple[str, str], ...] = (
    ("DeepEP Buffer num_sms (deepep_high_throughput)",
     "vLLM 0.33 hard-codes num_sms = 20 (DeepEPAll2AllManagerBase.__init__); only VLLM_DBO_COMM_SMS "
     "can lower it, under --enable-dbo"),
    ("VLLM_DEEPEP_BUFFER_SIZE_MB",
     "sizes DeepEP's NVL/RDMA buffers (capacity); the kernels' chunking comes from DeepEP's config, "
     "not from the buffer size, so it is not a speed knob"),
    ("VLLM_FLASHINFER_MOE_A2A_LOW_PRECISION_COMBINE",
     "sends the combine payload in FP8: it changes the numbers, so the bf16 correctness gate "
     "(rightly) fails it; a precision choice, not a tuning knob"),
    ("flashinfer_nvlink_two_sided (MnnvlMoe all-to-all-v)",
     "no launch setting is read from the environment or exposed by vLLM"),
    ("GLOO_DEVICE_TRANSPORT (CPU, gloo)",
     "torch 2.13 CPU is built with the TCP transport only; UV raises 'unsupported gloo device'"),
    ("GLOO_SOCKET_IFNAME (CPU, gloo)",
     "chooses the network interface; a single-host CPU run only has loopback"),
)


def knob(name: str) -> Knob:
    """The table row for ``name``; :class:`UnknownKnob` if there is none."""
    for k in KNOBS:
        if k.name == name:
            return k
    raise UnknownKnob(f"unknown knob {name!r}; known knobs: {', '.join(k.name for k in KNOBS)}")


def knob_illegal_reasons(k: Knob, ctx: KnobContext) -> list[str]:
    """Why knob ``k`` cannot be used at all in ``ctx`` (empty when it can)."""
    return [why for cond in k.legal_when
            for pred, why in [CONDITIONS[cond]] if not pred(ctx)]


def value_illegal_reasons(k: Knob, value: str, ctx: KnobContext) -> list[str]:
    """Why ``value`` of knob ``k`` is illegal in ``ctx`` (empty when legal; UNSET is always legal)."""
    if value == UNSET:
        return []
    if value not in k.values:
        return [f"{value!r} is not a searched value of {k.name} ({', '.join(k.values)})"]
    rules = list(k.value_rules.get(value, ()))
    if k.all_values_rule:
        rules.append(k.all_values_rule)
    return [f"{k.name}={value}: {why}" for r in rules
            for pred, why in [VALUE_RULES[r]] if not pred(value, ctx)]


@dataclass(frozen=True)
class KnobChoice:
    """A knob that is legal for a backend in a context, with its legal and illegal values."""

    knob: Knob
    legal: tuple[str, ...]  # UNSET first
    illegal: tuple[tuple[str, str], ...]  # (value, reason)


def knob_space(backend: str, ctx: KnobContext) -> tuple[list[KnobChoice], list[tuple[Knob, str]]]:
    """The knobs the tuner may set for ``backend`` in ``ctx``.

    Returns ``(choices, excluded)``: the usable knobs with their legal values, and the knobs of
    this backend that are illegal here, each with the first reason.
    """
    choices: list[KnobChoice] = []
    excluded: list[tuple[Knob, str]] = []
    for k in KNOBS:
        if backend not in k.backends:
            continue
        reasons = knob_illegal_reasons(k, ctx)
        if reasons:
            excluded.append((k, reasons[0]))
            continue
        legal, illegal = [UNSET], []
        for v in k.values:
            why = value_illegal_reasons(k, v, ctx)
            if why:
                illegal.append((v, why[0]))
            else:
                legal.append(v)
        if len(legal) > 1:
            choices.append(KnobChoice(k, tuple(legal), tuple(illegal)))
        else:
            excluded.append((k, illegal[0][1] if illegal else "no legal value"))
    return choices, excluded


def check_setting(backend: str, setting: dict[str, str], ctx: KnobContext) -> list[str]:
    """Every reason ``setting`` (knob name -> value) is illegal for ``backend`` in ``ctx``.

    An empty list means it is legal. Unset knobs (absent or UNSET) are always legal.
    """
    reasons: list[str] = []
    active = {n: v for n, v in setting.items() if v != UNSET}
    for name, value in active.items():
        try:
            k = knob(name)
        except UnknownKnob as e:
            reasons.append(str(e))
            continue
        if backend not in k.backends:
            reasons.append(f"{name} does not apply to {backend} (only {', '.join(k.backends)})")
            continue
        reasons += [f"{name}: {why}" for why in knob_illegal_reasons(k, ctx)]
        reasons += value_illegal_reasons(k, value, ctx)
    for a, b, rel, why in PAIR_RULES:
        if a in active and b in active and not _RELATIONS[rel](int(active[a]), int(active[b])):
            reasons.append(f"{a}={active[a]} with {b}={active[b]}: {why}")
    return reasons


def require_legal(backend: str, setting: dict[str, str], ctx: KnobContext) -> None:
    """Raise :class:`IllegalKnobSetting` with every reason when ``setting`` is illegal."""
    reasons = check_setting(backend, setting, ctx)
    if reasons:
        raise IllegalKnobSetting(f"illegal knobs for {backend}: {'; '.join(reasons)}; "
                                 "drop them or pick values from `autoselect tune --list-knobs`")


def legal_settings(backend: str, ctx: KnobContext) -> list[dict[str, str]]:
    """Every legal combination of the backend's knobs (for small spaces and for tests)."""
    choices, _ = knob_space(backend, ctx)
    out = []
    for combo in product(*(c.legal for c in choices)):
        setting = {c.knob.name: v for c, v in zip(choices, combo)}
        if not check_setting(backend, setting, ctx):
            out.append(setting)
    return out


def split_setting(setting: dict[str, str]) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """Turn a setting into ``(env vars, vllm serve flags, adapter args)``; unset knobs are dropped."""
    env: dict[str, str] = {}
    flags: list[str] = []
    adapter: dict[str, str] = {}
    for name, value in setting.items():
        if value == UNSET:
            continue
        kind = knob(name).kind
        if kind == "env":
            env[name] = value
        elif kind == "flag":
            flags += [name, value]
        else:
            adapter[name] = value
    return env, flags, adapter


def describe(setting: dict[str, str]) -> str:
    """A short human form of a setting: ``NCCL_PROTO=LL NCCL_MAX_NCHANNELS=16`` or ``untuned``."""
    parts = [f"{n}={v}" for n, v in setting.items() if v != UNSET]
    return " ".join(parts) if parts else "untuned"
