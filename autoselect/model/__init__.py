"""Model profiles: what one MoE checkpoint puts on the all2all (pure Python, no torch).

:func:`load_profile` reads a checkpoint's ``config.json`` (and ``hf_quant_config.json`` when
the checkpoint has one) from a local directory or the Hugging Face Hub — config files only,
never weights, never remote code — and returns a :class:`MoeProfile`: hidden size, routed
experts, top-k, MoE layer count, weight quantization and the activation dtype that crosses the
all2all on each GPU architecture. One module per step, in the order :func:`load_profile` runs them:

* :mod:`~autoselect.model.profile` — :class:`MoeProfile`, :func:`load_profile` (the route below,
  read top to bottom) and the GPU architecture spellings (:func:`normalize_arch`);
* :mod:`~autoselect.model.source` — which names resolve (:class:`ModelSource`) and to which
  files: local directories, ``serve``'s model roots, Hub ids; one config file read as a bounded
  UTF-8 JSON object;
* :mod:`~autoselect.model.config` — the config fields: their names (and nested text configs),
  :func:`check_config` (every field the readers use, typed and bounded, before anything reads
  it), which decoder layers have routed experts;
* :mod:`~autoselect.model.quantization` — the weight format, read as vLLM reads it (ModelOpt, FP8,
  compressed-tensors ...); anything unknown is refused, never guessed;
* :mod:`~autoselect.model.formats` — the tables: weight format -> activation dtype per
  architecture (:data:`QUANT_FORMATS`), ModelOpt algorithms, compressed-tensors schemes;
* :mod:`~autoselect.model.errors` — one class per mistake.
"""

from autoselect.model.errors import DenseModel, ModelConfigNotFound
from autoselect.model.formats import MODELOPT_ALGOS
from autoselect.model.profile import GPU_ARCHS, MoeProfile, load_profile, normalize_arch
from autoselect.model.source import ModelSource, config_dir, config_files, hub_cache_dir

__all__ = [
    "GPU_ARCHS", "MODELOPT_ALGOS", "DenseModel", "ModelConfigNotFound", "ModelSource", "MoeProfile", "config_dir",
    "config_files", "hub_cache_dir", "load_profile", "normalize_arch",
]
