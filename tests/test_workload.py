"""The shape every command shares, and the two ways to write one."""

from __future__ import annotations


import pytest

from support.paths import FIXTURES

from autoselect.errors import InvalidShape, MissingShape
from autoselect.model import load_profile
from autoselect.workload import Shape, equal_workload

MODELS = FIXTURES / "models"


def test_a_shape_is_keyword_only():
    with pytest.raises(TypeError):
        Shape(7168, 8, 256, "fp8_block128")  # the order (hidden, top_k, experts) is a trap


def test_the_spec_spells_hidden_experts_top_k_and_the_profile_keeps_them_apart():
    shape = Shape.parse("shape:2048x32x4:bf16")
    assert shape == Shape(hidden=2048, top_k=4, experts=32, dtype="bf16")
    profile = shape.profile()
    assert (profile.hidden_size, profile.num_experts, profile.top_k) == (2048, 32, 4)
    assert profile.model == "H2048 top4 E32 bf16"  # what is printed: the one spelling of a shape


@pytest.mark.parametrize("text, message", [
    ("shape:12x3", "--model 'shape:12x3' is not shape:HIDDENxEXPERTSxTOPK:DTYPE; e.g. shape:2048x32x4:bf16"),
    ("shape:٢048x32x4:bf16", "is not shape:HIDDENxEXPERTSxTOPK:DTYPE"),
    ("shape:2048x4x32:bf16", "top_k (32) cannot exceed the number of experts (4)"),
    ("shape:0x32x4:bf16", "hidden must be a positive integer, got 0"),
    ("shape:2048x32x4:int3", "unknown activation dtype 'int3'"),
])
def test_a_bad_spec_is_an_invalid_shape(text, message):
    with pytest.raises(InvalidShape) as e:
        Shape.parse(text)
    assert message in str(e.value)


def test_the_four_options_make_a_shape_all_or_nothing():
    assert Shape.from_options(hidden=None, top_k=None, experts=None, dtype=None) is None
    assert Shape.from_options(hidden=7168, top_k=8, experts=256, dtype="nvfp4") == Shape(
        hidden=7168, top_k=8, experts=256, dtype="nvfp4")
    with pytest.raises(MissingShape, match=r"^missing --experts, --dtype: an explicit shape needs all of"):
        Shape.from_options(hidden=7168, top_k=8, experts=None, dtype=None)


def test_a_models_shape_is_its_activation_dtype_on_the_arch():
    v3 = load_profile(str(MODELS / "deepseek-v3"))
    assert Shape.of(v3, "sm90") == Shape(hidden=7168, top_k=8, experts=256, dtype=v3.activation_dtype("sm90"))
    assert Shape.of(v3, "sm90").key() == f"h7168-k8-e256-{v3.activation_dtype('sm90')}"
    assert Shape.of(v3, "sm90").label() == f"H7168 top8 E256 {v3.activation_dtype('sm90')}"


def test_an_equal_workload_weighs_every_token_count_alike():
    assert equal_workload([1, 8, 64, 8]).buckets == ((1, 0.25), (8, 0.5), (64, 0.25))
