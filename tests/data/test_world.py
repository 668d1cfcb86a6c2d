import pytest

from zoomattn.data.world import ATTRIBUTES, World, noise_doc_count


@pytest.mark.parametrize("ratio,expected", [(0.0, 0), (0.5, 1), (0.8, 4), (0.9, 9)])
def test_noise_doc_count_follows_the_papers_formula(ratio, expected):
    assert noise_doc_count(ratio) == expected


def test_noise_doc_count_with_two_golden_documents():
    assert noise_doc_count(0.8, n_golden=2) == 8


@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5])
def test_noise_ratio_outside_unit_interval_is_rejected(ratio):
    with pytest.raises(ValueError, match="noise ratio"):
        noise_doc_count(ratio)


def test_same_seed_gives_the_same_world_and_another_seed_does_not():
    a, b, c = World.generate(3, 50, 5), World.generate(3, 50, 5), World.generate(4, 50, 5)
    assert a == b
    assert a.entities != c.entities


def test_famous_entities_have_every_attribute_and_are_not_ordinary(world):
    assert len(world.famous) == 5
    for facts in world.famous.values():
        assert set(facts) == set(ATTRIBUTES)
    assert not set(world.famous) & set(world.ordinary)


def test_world_round_trips_through_json(world, tmp_path):
    world.save(tmp_path / "w.json")
    assert World.load(tmp_path / "w.json") == world


def test_the_real_data_builders_count_noise_documents_with_the_worlds_formula():
    from zoomattn.data.sources.common import noise_count

    assert noise_count is noise_doc_count  # one formula: the builders' sets match the world's
