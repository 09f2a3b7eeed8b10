"""The FlashInfer adapters' calls bound to the signatures of whichever FlashInfer this process imports.

``python -m support.flashinfer_bind`` (tests/ on ``PYTHONPATH``, an unpacked FlashInfer tree
before it) sets both adapters up for a vLLM 0.34.0 target at world size 2 on one CPU rank, with
``create_communication`` and the communicators' ``dispatch`` / ``combine`` replaced by
:class:`support.flashinfer_kernels.Bound` recorders over the real functions: every argument the
adapter passes is bound to that FlashInfer's signature (a wrong keyword fails), and every config
object is the real dataclass. No kernel runs (FlashInfer 0.7.4's one-sided is a new JIT module
with no CPU stand-in here). It prints one JSON object: what was passed.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch

from support.flashinfer_kernels import Bound


class _FakeComm:
    """What the adapter reads off a communicator: the workspace layout (0.7.4 names), dispatch, combine."""

    def __init__(self, cls, params):
        self.params = params
        self.workspace = torch.zeros((2, 4096), dtype=torch.uint8)
        self._index = SimpleNamespace(DISPATCH_PAYLOAD_OFFSET_INDEX=0, DISPATCH_PAYLOAD_SIZE_INDEX=1)
        self.metainfo = torch.tensor([256, 1024])
        self.dispatches = Bound(cls.dispatch, self._dispatch, has_self=True)
        self.combines = Bound(cls.combine, lambda a: a["expert_output"][: params.max_tokens_per_rank], has_self=True)

    def _dispatch(self, a):
        rows = 2 * self.params.max_tokens_per_rank
        x = a["hidden_states"]
        sf = a["hidden_states_scale"]
        ids = torch.full((rows, self.params.top_k), self.params.num_experts, dtype=torch.int32)
        return SimpleNamespace(hidden_states=x.new_zeros(rows, x.shape[1]),
                               hidden_states_scale=None if sf is None else sf.new_zeros(rows, sf.shape[1]),
                               topk_ids=ids, topk_weights=torch.zeros(rows, self.params.top_k))

    def dispatch(self, *args, **kwargs):
        return self.dispatches(*args, **kwargs)

    def combine(self, *args, **kwargs):
        return self.combines(*args, **kwargs)

    def destroy(self):
        pass


def main() -> dict:
    import flashinfer
    import flashinfer.moe_ep as ep
    import pytest

    from bench import backends
    from bench.backends import BenchContext
    from bench.backends import _flashinfer as fi
    from bench.synthetic import BenchPoint

    out = {"flashinfer": flashinfer.__version__, "installed": fi.installed_api().__dict__}
    made = []

    def create(a):
        cls = {"nvlink_one_sided": ep.NVLinkOneSidedAlltoAll, "nvlink_two_sided": ep.NVLinkTwoSidedAlltoAll}[
            a["backend"].backend_name]
        comm = _FakeComm(cls, a["params"])
        made.append((a, comm))
        return comm

    ctx = BenchContext(rank=0, world_size=2, device="cpu", torch_device=torch.device("cpu"), cpu_group=None,
                       vllm_version="0.34.0")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ep, "create_communication", Bound(ep.create_communication, create))
        m.setattr(fi, "mnnvl_config", lambda ctx: SimpleNamespace(comm_backend=None))
        m.setattr(torch.distributed, "barrier", lambda group=None: None)
        for name in ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"):
            point = BenchPoint(16, 512, 8, 32, 2, "nvfp4")
            adapter = backends.load(name)
            adapter.setup(ctx, point)
            batch = point.batch(0, ctx.torch_device)
            received = adapter.dispatch(batch)
            adapter.combine(torch.zeros(received.x.shape[0], 512, dtype=torch.bfloat16))
            a, comm = made[-1]
            config = a["backend"]
            out[name] = {
                "config": type(config).__name__,
                "cft": getattr(config, "cft", "absent"), "lamport": getattr(config, "lamport", "absent"),
                "invalid_expert_id": a["params"].invalid_expert_id,
                "dispatch_keywords": sorted(k for k, v in comm.dispatches.calls[0].arguments.items()
                                            if k.endswith("tokens_per_rank") and v is not None),
                "poisoned": int((comm.workspace[0, 256:1280] == 0xFF).all()) if name.endswith("one_sided") else None,
                "code_path": adapter.code_path(),
            }
            adapter.teardown()
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
