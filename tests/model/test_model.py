"""Model profiles from real checkpoint configs: shapes, MoE layers, activation dtype per arch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.paths import FIXTURES

from autoselect.errors import InvalidShape
from autoselect.model import DenseModel, ModelConfigNotFound, MoeProfile, load_profile, normalize_arch
from autoselect.model.errors import ModelConfigInvalid, MoeFieldsMissing, UnknownGpuArch, UnsupportedQuantization
from autoselect.model.source import SHIPPED_CONFIGS

MODELS = FIXTURES / "models"

# fixture: (hidden, experts, top_k, moe_layers, weight_quant, sm90 activation, sm100 activation)
EXPECTED = {
    "deepseek-v3": (7168, 256, 8, 58, "fp8_block128", "fp8_block128", "fp8_block128"),
    "deepseek-r1-nvfp4": (7168, 256, 8, 58, "nvfp4", "bf16", "nvfp4"),
    "kimi-k2.5-nvfp4": (7168, 384, 8, 60, "nvfp4", "bf16", "nvfp4"),
    "kimi-k2": (7168, 384, 8, 60, "fp8_block128", "fp8_block128", "fp8_block128"),
    "qwen3-30b-a3b": (2048, 128, 8, 48, "bf16", "bf16", "bf16"),
    "qwen3-235b-a22b-fp8": (4096, 128, 8, 94, "fp8_block128", "fp8_block128", "fp8_block128"),
    "mixtral-8x7b": (4096, 8, 2, 32, "bf16", "bf16", "bf16"),
    "gpt-oss-120b": (2880, 128, 4, 36, "mxfp4", "bf16", "bf16"),
    "llama-4-maverick": (5120, 128, 1, 24, "bf16", "bf16", "bf16"),
    "glm-4.7": (5120, 160, 8, 89, "bf16", "bf16", "bf16"),
    "qwen3-30b-a3b-nvfp4-ct": (2048, 128, 8, 48, "nvfp4", "bf16", "nvfp4"),
    "qwen3-30b-a3b-nvfp4a16-ct": (2048, 128, 8, 48, "w4a16_nvfp4", "bf16", "bf16"),
    "qwen3.6-35b-a3b-nvfp4-w4a16": (2048, 256, 8, 40, "w4a16_nvfp4", "bf16", "bf16"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_of_every_fixture_on_both_archs(name):
    hidden, experts, top_k, moe_layers, weight_quant, sm90, sm100 = EXPECTED[name]
    profile = load_profile(str(MODELS / name))
    assert (profile.hidden_size, profile.num_experts, profile.top_k) == (hidden, experts, top_k)
    assert profile.moe_layers == moe_layers
    assert profile.weight_quant == weight_quant
    assert profile.activation_dtype("sm90") == sm90
    assert profile.activation_dtype("sm100") == sm100
    assert profile.activation_dtypes == {"sm90": sm90, "sm100": sm100}


def test_legacy_modelopt_nvfp4_reads_hf_quant_config_json():
    profile = load_profile(str(MODELS / "deepseek-r1-nvfp4"))
    assert profile.quant_source == "hf_quant_config.json"


def test_without_hf_quant_config_json_the_same_config_is_unquantized(tmp_path):
    shutil.copy(MODELS / "deepseek-r1-nvfp4" / "config.json", tmp_path / "config.json")
    profile = load_profile(str(tmp_path))
    assert profile.weight_quant == "bf16"
    assert profile.activation_dtypes == {"sm90": "bf16", "sm100": "bf16"}


def test_config_json_path_is_accepted_as_well_as_its_directory():
    profile = load_profile(str(MODELS / "mixtral-8x7b" / "config.json"))
    assert profile.num_experts == 8


def test_llama4_counts_only_interleaved_moe_layers():
    profile = load_profile(str(MODELS / "llama-4-maverick"))
    assert (profile.num_layers, profile.moe_layers, profile.model_type) == (48, 24, "llama4_text")


def test_dense_model_is_refused_with_a_reason():
    with pytest.raises(DenseModel, match=r"is a dense model: it has no routed experts"):
        load_profile(str(MODELS / "llama-3.1-8b"))


def test_config_without_moe_fields_is_refused():
    with pytest.raises(MoeFieldsMissing, match=r"has no MoE fields"):
        load_profile(str(MODELS / "no-moe-fields"))


def test_experts_without_top_k_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 4096, "num_local_experts": 8}')
    with pytest.raises(MoeFieldsMissing, match=r"has routed experts \(num_local_experts\) but no num_experts_per_tok"):
        load_profile(str(tmp_path))


def test_malformed_json_is_refused_with_its_position():
    with pytest.raises(ModelConfigInvalid, match=r"is not valid JSON \(line 5, column 1"):
        load_profile(str(MODELS / "malformed"))


def test_missing_directory_is_refused():
    with pytest.raises(ModelConfigNotFound, match=r"no such directory './nowhere/model'"):
        load_profile("./nowhere/model")


def test_directory_without_config_json_is_refused(tmp_path):
    with pytest.raises(ModelConfigNotFound, match=r"no config.json in "):
        load_profile(str(tmp_path))


def test_unsupported_quantization_is_refused_not_guessed(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"hidden_size": 4096, "num_local_experts": 8, "num_experts_per_tok": 2,'
        ' "quantization_config": {"quant_method": "hqq"}}'
    )
    with pytest.raises(UnsupportedQuantization, match=r"quant_method 'hqq' is not supported"):
        load_profile(str(tmp_path))


def _cache_model(hf_home: Path, repo_id: str, fixture: str, *, quant_missing_marker: bool) -> None:
    """Lay out a fixture the way huggingface_hub caches a download (refs + snapshots)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    for f in (MODELS / fixture).iterdir():
        shutil.copy(f, snapshot / f.name)
    if quant_missing_marker:
        (repo_dir / ".no_exist" / commit).mkdir(parents=True)
        (repo_dir / ".no_exist" / commit / "hf_quant_config.json").write_text("")


def test_hub_id_is_read_from_the_cache_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _cache_model(tmp_path / "hf", "nvidia/DeepSeek-R1-FP4", "deepseek-r1-nvfp4", quant_missing_marker=False)
    profile = load_profile("nvidia/DeepSeek-R1-FP4")
    assert profile.model == "nvidia/DeepSeek-R1-FP4"
    assert (profile.weight_quant, profile.quant_source) == ("nvfp4", "hf_quant_config.json")
    assert profile.notes == ()


def test_hub_id_with_cached_absence_of_hf_quant_config_has_no_note(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _cache_model(tmp_path / "hf", "Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b", quant_missing_marker=True)
    profile = load_profile("Qwen/Qwen3-30B-A3B-Base")
    assert (profile.hidden_size, profile.weight_quant, profile.notes) == (2048, "bf16", ())


def test_hub_id_without_cached_hf_quant_config_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _cache_model(tmp_path / "hf", "Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b", quant_missing_marker=False)
    profile = load_profile("Qwen/Qwen3-30B-A3B-Base")
    assert len(profile.notes) == 1 and "hf_quant_config.json is not in the cache" in profile.notes[0]


@pytest.mark.parametrize("repo_id, fixture", [("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
                                              ("deepseek-ai/DeepSeek-V3", "deepseek-v3")])
def test_a_shipped_hub_id_answers_offline_without_the_cache_from_the_fixtures_copy(repo_id, fixture, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))  # nothing cached, HF_HUB_OFFLINE set (conftest)
    shipped = SHIPPED_CONFIGS / repo_id
    assert sorted(f.name for f in shipped.iterdir()) == sorted(f.name for f in (MODELS / fixture).iterdir())
    for f in shipped.iterdir():
        assert f.read_bytes() == (MODELS / fixture / f.name).read_bytes(), f"{f} differs from the fixture"
    profile = load_profile(repo_id)
    assert profile.model == repo_id
    assert profile.to_dict() | {"model": None, "notes": None} == \
        load_profile(str(MODELS / fixture)).to_dict() | {"model": None, "notes": None}
    assert profile.notes == (f"config.json of {repo_id}: the copy shipped with autoselect (read offline)",)


def test_a_local_directory_named_like_a_shipped_hub_id_comes_first(tmp_path, monkeypatch):
    (tmp_path / "Qwen" / "Qwen3-30B-A3B").mkdir(parents=True)
    shutil.copy(MODELS / "mixtral-8x7b" / "config.json", tmp_path / "Qwen" / "Qwen3-30B-A3B" / "config.json")
    monkeypatch.chdir(tmp_path)
    assert load_profile("Qwen/Qwen3-30B-A3B").num_experts == load_profile(str(MODELS / "mixtral-8x7b")).num_experts


def test_unknown_hub_id_offline_is_refused():
    with pytest.raises(ModelConfigNotFound, match=r"no cached config.json for 'acme/not-a-model' and HF_HUB_OFFLINE is set"):
        load_profile("acme/not-a-model")


def _unresolvable(monkeypatch):
    """No network: the Hub's name does not resolve, and nothing may ask huggingface_hub to download."""
    import socket

    import huggingface_hub

    def no_name(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    real = huggingface_hub.hf_hub_download

    def cache_only(*args, **kwargs):
        assert kwargs.get("local_files_only") is True, "a download was attempted without a network"
        return real(*args, **kwargs)

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(socket, "getaddrinfo", no_name)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cache_only)


def test_without_a_network_an_uncached_hub_id_is_one_error_at_once(tmp_path, monkeypatch):
    # huggingface_hub alone retries five times (~25 s), printing a warning each time
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    _unresolvable(monkeypatch)
    with pytest.raises(ModelConfigNotFound) as e:
        load_profile("acme/not-a-model")
    assert str(e.value) == (
        "could not download config.json for 'acme/not-a-model' and none is cached: https://huggingface.co cannot "
        "be reached from here (Name or service not known; no network?); pass a local directory holding its "
        "config.json (and hf_quant_config.json, if it has one)")


def test_without_a_network_a_cached_hub_id_answers_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _cache_model(tmp_path / "hf", "Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b", quant_missing_marker=False)
    _unresolvable(monkeypatch)
    profile = load_profile("Qwen/Qwen3-30B-A3B-Base")
    assert profile.hidden_size == 2048
    assert profile.notes == ("hf_quant_config.json is not in the cache (the Hub cannot be reached): a legacy "
                             "ModelOpt NVFP4 checkpoint would be reported as unquantized",)


@pytest.mark.parametrize(
    "spelling, family",
    [("sm90", "sm90"), ("sm_90", "sm90"), ("9.0", "sm90"), ("90", "sm90"), ("SM90a", "sm90"),
     ("sm100", "sm100"), ("sm_100", "sm100"), ("10.0", "sm100"), ("sm103", "sm100"), ("10.3", "sm100"),
     ("blackwell", "sm100")],
)
def test_normalize_arch_accepts_common_spellings(spelling, family):
    assert normalize_arch(spelling) == family


@pytest.mark.parametrize("spelling", ["sm80", "sm120", "ampere", ""])
def test_normalize_arch_refuses_other_archs(spelling):
    with pytest.raises(UnknownGpuArch, match="use sm90"):
        normalize_arch(spelling)


def test_from_shape_uses_the_dtype_on_every_arch():
    profile = MoeProfile.from_shape(7168, 256, 8, "nvfp4")
    assert profile.model == "H7168 top8 E256 nvfp4"
    assert profile.activation_dtypes == {"sm90": "nvfp4", "sm100": "nvfp4"}
    assert profile.moe_layers == 1


@pytest.mark.parametrize(
    "args, message",
    [((0, 8, 2, "bf16"), "hidden_size must be a positive integer"),
     ((4096, 8, 9, "bf16"), "top_k \\(9\\) cannot exceed"),
     ((4096, 8, 2, "int8"), "unknown activation dtype 'int8'")],
)
def test_from_shape_refuses_bad_shapes(args, message):
    with pytest.raises(InvalidShape, match=message):
        MoeProfile.from_shape(*args)


def test_to_dict_is_json_ready():
    d = load_profile(str(MODELS / "gpt-oss-120b")).to_dict()
    assert d["activation_dtypes"] == {"sm90": "bf16", "sm100": "bf16"}
    assert d["weight_quant"] == "mxfp4" and d["notes"] == []


def test_modelopt_fp8_per_block_dispatches_block_fp8(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"hidden_size": 4096, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 2,'
        ' "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8_PB_WO"}}'
    )
    assert load_profile(str(tmp_path)).activation_dtypes == {"sm90": "fp8_block128", "sm100": "fp8_block128"}


def test_modelopt_nvfp4_without_activation_quant_is_w4a16(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"hidden_size": 4096, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 2,'
        ' "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups":'
        ' {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}, "input_activations": null}}}}'
    )
    profile = load_profile(str(tmp_path))
    assert (profile.weight_quant, profile.activation_dtype("sm100")) == ("w4a16_nvfp4", "bf16")


def test_experts_that_no_layer_uses_is_a_dense_model(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"text_config": {"hidden_size": 5120, "num_local_experts": 16, "num_experts_per_tok": 1,'
        ' "num_hidden_layers": 48, "interleave_moe_layer_step": 0}}'
    )
    with pytest.raises(DenseModel, match="but no layer uses them"):
        load_profile(str(tmp_path))


CROSSCHECK = FIXTURES / "vllm_crosscheck"


def _ct_config(tmp_path, weights, inputs=None):
    """A Qwen3-MoE config.json whose one compressed-tensors group has these weights / inputs."""
    import json

    group = {"targets": ["Linear"], "weights": weights, "input_activations": inputs}
    (tmp_path / "config.json").write_text(json.dumps(
        {"hidden_size": 2048, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 2,
         "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}}}))
    return str(tmp_path)


def test_compressed_tensors_fp4_in_groups_of_32_is_mxfp4_with_bf16_activations():
    # vLLM's _is_mxfp4: 4-bit float, strategy group, group_size 32 (NVFP4 is tensor_group 16)
    profile = load_profile(str(CROSSCHECK / "qwen3-30b-a3b-mxfp4-ct"))
    assert (profile.weight_quant, profile.activation_dtypes) == ("mxfp4", {"sm90": "bf16", "sm100": "bf16"})


@pytest.mark.parametrize(
    "weights, inputs, weight_quant",
    [({"num_bits": 4, "type": "float", "group_size": 32}, None, "mxfp4"),  # strategy inferred: group
     ({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
      {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": True}, "fp8_block128"),
     ({"num_bits": 8, "type": "float", "strategy": "channel"},
      {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}, "fp8"),
     ({"num_bits": 4, "type": "int", "group_size": 128}, None, "int4_weight_only")],
)
def test_compressed_tensors_groups_are_read_by_the_table_patterns(tmp_path, weights, inputs, weight_quant):
    assert load_profile(_ct_config(tmp_path, weights, inputs)).weight_quant == weight_quant


@pytest.mark.parametrize(
    "weights, inputs, message",
    [({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 16}, None,
      r"weights 4-bit float \(group, group_size 16\) with input activations none \(weight-only\) match no scheme"),
     ({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
      {"num_bits": 8, "type": "float", "dynamic": True}, r"with input activations 8-bit float \(tensor\) match no"),
     ({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [64, 64]},
      {"num_bits": 8, "type": "float", "dynamic": True}, r"8-bit float \(block, block \[64, 64\]\)")],
)
def test_compressed_tensors_groups_vllm_would_not_run_as_a_known_format_are_refused(tmp_path, weights, inputs, message):
    with pytest.raises(UnsupportedQuantization, match=message):
        load_profile(_ct_config(tmp_path, weights, inputs))


def _fp8_config(tmp_path, quant):
    import json

    (tmp_path / "config.json").write_text(json.dumps(
        {"hidden_size": 7168, "n_routed_experts": 256, "num_experts_per_tok": 8, "num_hidden_layers": 2,
         "quantization_config": {"quant_method": "fp8", **quant}}))
    return str(tmp_path)


def test_block_fp8_with_static_activations_is_refused_as_vllm_refuses_it(tmp_path):
    with pytest.raises(UnsupportedQuantization) as e:
        load_profile(_fp8_config(tmp_path, {"activation_scheme": "static", "weight_block_size": [128, 128]}))
    assert str(e.value) == (
        "config.json quantization_config: FP8 block [128, 128] weights with activation_scheme 'static': vLLM "
        "refuses to load it (its Fp8Config runs block-wise FP8 with dynamic activations only); use an explicit "
        "shape instead"
    )


def test_fp8_without_an_activation_scheme_is_refused_as_vllm_refuses_it(tmp_path):
    with pytest.raises(UnsupportedQuantization, match=r"FP8 with no activation_scheme: vLLM refuses to load it"):
        load_profile(_fp8_config(tmp_path, {"weight_block_size": [128, 128]}))


def test_per_tensor_fp8_with_static_activations_is_fp8(tmp_path):
    assert load_profile(_fp8_config(tmp_path, {"activation_scheme": "static"})).weight_quant == "fp8"


def test_modelopt_mixed_precision_experts_in_two_formats_are_refused(tmp_path):
    import json

    layers = {"model.layers.0.mlp.experts": {"quant_algo": "NVFP4"},
              "model.layers.1.mlp.experts": {"quant_algo": "NVFP4"},
              "model.layers.2.mlp.experts": {"quant_algo": "FP8"},
              "model.layers.0.mlp.shared_expert.up_proj": {"quant_algo": "FP8"}}
    (tmp_path / "config.json").write_text(json.dumps(
        {"hidden_size": 2048, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 3,
         "quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
                                 "quantized_layers": layers}}))
    with pytest.raises(UnsupportedQuantization) as e:
        load_profile(str(tmp_path))
    assert str(e.value) == (
        "config.json quantization_config: ModelOpt MIXED_PRECISION whose routed experts use different formats "
        "(FP8: 1 layer(s), NVFP4: 2 layer(s)): vLLM dispatches a different dtype in different layers and a "
        "profile has one; use an explicit shape for each dtype instead"
    )
