import re

import pytest

from zoomattn.splits import PATTERN, Split


@pytest.mark.parametrize(
    "name,split",
    [
        ("vanilla", Split()),
        ("reverse", Split(placement="reverse")),
        ("r0", Split(noise_ratio=0.0)),
        ("r0.8", Split(noise_ratio=0.8)),
        ("r0.95", Split(noise_ratio=0.95)),
        ("n0", Split(passages=0)),
        ("n15", Split(passages=15)),
        ("irr0.25", Split(irrelevant=0.25)),
        ("irr1", Split(irrelevant=1.0)),
    ],
)
def test_a_name_parses_to_its_split_and_writes_back_the_same(name, split):
    assert Split.parse(name) == split
    assert str(split) == name
    assert re.fullmatch(PATTERN, name)


def test_the_names_are_the_ones_the_results_are_stored_under():
    assert str(Split(noise_ratio=0)) == "r0"  # an int from YAML writes as the float does
    assert str(Split(passages=10, irrelevant=0.5)) == "irr0.5"  # the count is not in the name
    assert [str(Split(noise_ratio=r)) for r in (0.0, 0.5, 0.8, 0.9)] == [
        "r0",
        "r0.5",
        "r0.8",
        "r0.9",
    ]


@pytest.mark.parametrize("name", ["r0.80", "r", "n3.5", "n03", "irr", "irr0.250", "x", "r1e-05"])
def test_only_the_exact_spelling_of_a_split_parses(name):
    with pytest.raises(ValueError, match="is not a split name"):
        Split.parse(name)


def test_a_split_is_one_layout_and_a_noise_or_passage_set_lays_documents_out_as_vanilla():
    with pytest.raises(ValueError, match="a placement, a noise ratio or a passage set"):
        Split(noise_ratio=0.5, passages=3)
    with pytest.raises(ValueError, match="a placement, a noise ratio or a passage set"):
        Split(placement="reverse", noise_ratio=0.5)
    with pytest.raises(ValueError, match="placement 'sideways'"):
        Split(placement="sideways")


def test_a_value_its_name_would_round_is_refused():
    with pytest.raises(ValueError, match=r"noise ratio 0.1234567 does not survive .*\(0.123457\)"):
        Split(noise_ratio=0.1234567)
    with pytest.raises(ValueError, match="irrelevant share"):
        Split(irrelevant=1e-7)


def test_data_fields_are_what_a_data_spec_holds_of_the_split():
    assert Split(placement="reverse").data_fields() == {"placement": "reverse"}
    assert Split(noise_ratio=0).data_fields() == {"placement": "vanilla", "noise_ratio": 0.0}
    assert Split(passages=4).data_fields() == {
        "placement": "vanilla",
        "passages": 4,
        "irrelevant": 0.0,
    }
    assert Split(passages=4, irrelevant=1).data_fields()["irrelevant"] == 1.0
    with pytest.raises(ValueError, match="how many passages is the study's setting"):
        Split.parse("irr0.5").data_fields()


def test_the_wildcard_pattern_takes_no_other_path():
    for other in ("train", "world", "vanilla/x", "r0.9.json"):
        assert not re.fullmatch(PATTERN, other)
