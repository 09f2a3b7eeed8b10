"""What launch takes from an answer it did not compute (vllm_flags/trusted.py): the flags autoselect emits, the knob table's variables."""

from __future__ import annotations

import pytest

from autoselect.vllm_flags.trusted import (TrustedAnswer, UntrustedAnswer, trusted_answer, trusted_env,
                                           trusted_tuned_flags)

LINE = {"tensor_parallel_size": 1, "data_parallel_size": 8}
TWO = "flashinfer_nvlink_two_sided"
ONE = "flashinfer_nvlink_one_sided"


def answer(backend=TWO, *extra, env=None):
    args = ["--data-parallel-size", "8", "--enable-expert-parallel", "--all2all-backend", backend, *extra]
    return {"backend": backend, "confidence": "high", "vllm_args": args, "knobs": {"env": env or {}}}


def test_what_autoselect_emits_is_taken():
    got = trusted_answer(answer(ONE, "--max-num-batched-tokens", "14336", env={"TLLM_MOE_A2A_COMBINE_BLOCK_SIZE": "512"}),
                         version="0.34.0", deployment=LINE)
    assert got == TrustedAnswer((("--max-num-batched-tokens", "14336"),), {"TLLM_MOE_A2A_COMBINE_BLOCK_SIZE": "512"})
    eq = trusted_answer({**answer(), "vllm_args": ["--data-parallel-size=8", f"--all2all-backend={TWO}",
                                                   "--max-num-batched-tokens=4096"]}, version="0.34.0",
                        deployment=LINE)
    assert eq.flags == (("--max-num-batched-tokens", "4096"),)


@pytest.mark.parametrize("extra, why", [
    ([f"--all2all-backend={ONE}"], "--all2all-backend appears twice"),  # argparse keeps the last: vLLM runs it
    (["--all2all-backend", "deepep_low_latency"], "--all2all-backend appears twice"),
    (["--all2all_backend", ONE], "'--all2all_backend' is not a flag autoselect emits"),
    (["--all2all", ONE], "'--all2all' is not a flag autoselect emits"),  # vLLM reads a prefix as the flag
    (["--trust-remote-code"], "'--trust-remote-code' is not a flag autoselect emits"),
    (["--host", "0.0.0.0"], "'--host' is not a flag autoselect emits"),
    (["--api-key", "sk-stolen"], "'--api-key' is not a flag autoselect emits"),
    (["--config", "/tmp/evil.yaml"], "'--config' is not a flag autoselect emits"),
    (["--kv-transfer-config={}"], "is not a flag autoselect emits"),
    (["extra-positional"], "'extra-positional' is not a flag autoselect emits"),
    (["--max-num-batched-tokens", "-1"], "'-1' is not a value"),
    (["--max-num-batched-tokens", "1e9"], "'1e9' is not a whole number"),
    (["--max-num-batched-tokens", "99999999999999999999"], "is not a whole number from 1 to"),
    (["--max-num-batched-tokens"], "--max-num-batched-tokens has no value"),
    (["--enable-expert-parallel=false"], "takes no value"),
    (["--data-parallel-size", "16"], "--data-parallel-size appears twice"),
])
def test_anything_else_in_the_flags_is_refused_naming_it(extra, why):
    with pytest.raises(UntrustedAnswer, match="vllm_args: ") as e:
        trusted_answer(answer(TWO, *extra), version="0.34.0", deployment=LINE)
    assert why in str(e.value)


def test_the_backend_flag_must_be_the_answers_backend_and_the_deployment_the_lines():
    doc = {**answer(), "vllm_args": ["--all2all-backend", ONE]}
    with pytest.raises(UntrustedAnswer, match=f"--all2all-backend '{ONE}' is not the answer's backend {TWO}"):
        trusted_answer(doc, version="0.34.0", deployment=LINE)
    with pytest.raises(UntrustedAnswer, match=r"--data-parallel-size 4 is not the line's own \(8\)"):
        trusted_answer({**answer(), "vllm_args": ["--data-parallel-size", "4"]}, version="0.34.0", deployment=LINE)
    with pytest.raises(UntrustedAnswer, match="backend 'LD_PRELOAD' is not a backend autoselect knows"):
        trusted_answer({**answer(), "backend": "LD_PRELOAD"}, version="0.34.0", deployment=LINE)
    with pytest.raises(UntrustedAnswer, match="vllm_args is not a list of strings"):
        trusted_answer({**answer(), "vllm_args": ["--data-parallel-size", 8]}, version="0.34.0", deployment=LINE)


@pytest.mark.parametrize("env, why", [
    ({"LD_PRELOAD": "/tmp/x.so"}, "'LD_PRELOAD' is not a variable of autoselect's knob table"),
    ({"PYTHONPATH": "/tmp"}, "'PYTHONPATH' is not a variable"),
    ({"NCCL_PROTO": "LL"}, "does not apply to flashinfer_nvlink_two_sided"),  # allgather_reducescatter's knob
    ({"TLLM_MOE_A2A_DISPATCH_BLOCK_SIZE": "333"}, "does not apply to flashinfer_nvlink_two_sided"),
    ({"--max-num-batched-tokens": "2048"}, "is not a variable"),  # a flag knob is no variable
])
def test_a_variable_outside_the_knob_table_is_refused_naming_it(env, why):
    with pytest.raises(UntrustedAnswer, match="knobs.env: ") as e:
        trusted_env(env, TWO)
    assert why in str(e.value)


def test_a_knob_variable_takes_only_the_tables_values():
    assert trusted_env({"NCCL_PROTO": "Simple"}, "allgather_reducescatter") == {"NCCL_PROTO": "Simple"}
    for value in ("Simple; rm -rf /", "", True, 7, None):
        with pytest.raises(UntrustedAnswer, match="is not one of its values"):
            trusted_env({"NCCL_PROTO": value}, "allgather_reducescatter")
    with pytest.raises(UntrustedAnswer, match="knobs.env is not an object"):
        trusted_env(["NCCL_PROTO=LL"], "allgather_reducescatter")


def test_tuned_flags_are_knob_table_flags_with_their_values():
    assert trusted_tuned_flags(["--max-num-batched-tokens", "2048"], ONE) == ("--max-num-batched-tokens", "2048")
    for flags in (["--trust-remote-code", "x"], ["--max-num-batched-tokens", "3"], ["--max-num-batched-tokens"],
                  ["--max-num-batched-tokens", "2048"][:1] * 3):
        with pytest.raises(UntrustedAnswer, match="knobs.flags"):
            trusted_tuned_flags(flags, ONE)
    with pytest.raises(UntrustedAnswer, match="is not a flag knob of flashinfer_nvlink_two_sided"):
        trusted_tuned_flags(["--max-num-batched-tokens", "2048"], TWO)
