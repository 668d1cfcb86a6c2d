"""The attention_kernels switch: fused only on CUDA under ``fused``, what ran remembered."""

import pytest
import torch

from zoomattn.attention import kernels

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


@pytest.fixture(autouse=True)
def _reference_setting():
    kernels.configure(kernels.REFERENCE)
    yield
    kernels.configure(kernels.REFERENCE)


def test_fused_is_chosen_only_on_cuda_under_the_fused_setting():
    assert kernels.choose("opamp", CUDA) == kernels.REFERENCE
    kernels.configure("fused")
    assert kernels.choose("opamp", CUDA) == kernels.FUSED
    assert kernels.choose("rectify", CPU) == kernels.REFERENCE


def test_paths_run_names_every_path_a_method_took_since_configure():
    kernels.configure("fused")
    kernels.choose("opamp", CUDA)
    kernels.choose("opamp", CPU)
    kernels.choose("lkg", CUDA)
    assert kernels.paths_run() == {"lkg": "fused", "opamp": "fused+reference"}
    kernels.configure("fused")
    assert kernels.paths_run() == {}


def test_a_call_the_method_declines_runs_the_reference_recorded_with_the_reason():
    kernels.configure("fused")
    assert kernels.choose("rectify", CUDA, "decoding") == kernels.REFERENCE
    assert kernels.choose("rectify", CUDA) == kernels.FUSED
    assert kernels.choose("rectify", CPU, "decoding") == kernels.REFERENCE  # the device decides
    assert kernels.paths_run() == {"rectify": "fused+reference+reference (decoding)"}
    kernels.configure("reference")
    kernels.choose("rectify", CUDA, "decoding")
    assert kernels.paths_run() == {"rectify": "reference"}


def test_using_restores_the_setting_and_what_ran_before():
    kernels.choose("opamp", CUDA)
    with kernels.using("fused"):
        assert kernels.setting() == "fused" and kernels.paths_run() == {}
        kernels.choose("rectify", CUDA)
    assert kernels.setting() == "reference"
    assert kernels.paths_run() == {"opamp": "reference"}


def test_an_unknown_setting_is_refused_with_the_key_named():
    with pytest.raises(ValueError, match="attention_kernels"):
        kernels.configure("triton")


def test_a_mapping_turns_on_the_fused_path_of_the_methods_it_names_only():
    kernels.configure({"rectify": "fused", "lkg": "fused"})
    assert kernels.choose("rectify", CUDA) == kernels.FUSED
    assert kernels.choose("lkg", CUDA) == kernels.FUSED
    assert kernels.choose("opamp", CUDA) == kernels.REFERENCE
    assert kernels.choose("rectify", CPU) == kernels.REFERENCE


def test_a_mapping_of_reference_paths_is_the_default():
    assert kernels.is_reference("reference") and kernels.is_reference({"opamp": "reference"})
    assert not kernels.is_reference({"lkg": "fused"}) and not kernels.is_reference("fused")


@pytest.mark.parametrize(
    ("setting", "key"),
    [({"mudaf": "fused"}, "attention_kernels.mudaf"), ({"lkg": "flex"}, "attention_kernels.lkg")],
)
def test_a_mapping_with_an_unknown_method_or_path_is_refused_naming_it(setting, key):
    with pytest.raises(ValueError, match=key):
        kernels.configure(setting)


def test_plain_sdpa_runs_fused_only_where_a_mapping_names_it_not_under_fused_alone():
    """``plain`` changes the padded rows' values (math.plain_mask), so ``fused`` alone, every
    method's fused path, leaves it on its reference."""
    assert kernels.per_method("fused")["plain"] == kernels.REFERENCE
    kernels.configure({"plain": "fused"})
    assert kernels.choose("plain", CUDA) == kernels.FUSED
    assert kernels.choose("opamp", CUDA) == kernels.REFERENCE
    assert not kernels.is_reference({"plain": "fused"})
