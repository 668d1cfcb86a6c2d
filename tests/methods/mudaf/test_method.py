import pytest
import torch

from zoomattn.methods import METHODS, ResolveContext, cells
from zoomattn.methods.mudaf.config import MudafConfig
from zoomattn.methods.mudaf.objective import ContrastiveObjective
from zoomattn.modeling.loading import load_base

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


@pytest.mark.parametrize(
    "values,key",
    [
        ({"heads": -1}, "heads"),
        ({"heads": 2.5}, "heads"),
        ({"selection": "greedy"}, "selection"),
        ({"temperature": 0}, "temperature"),
        ({"weak_below": "low"}, "weak_below"),
        ({"alpha": 1.5}, "alpha"),
        ({"tau": -0.1}, "tau"),
        ({"negatives": 0}, "negatives"),
        ({"tuning": "qlora"}, "tuning"),
        ({"heads": 2, "selected": [[0, 1, 2]]}, "selected"),
        ({"heads": 2, "selected": [[0, 1], [0, 1]]}, "selected"),
        ({"heads": 1, "selected": [[0, 1], [0, 2]]}, "selected"),
        ({"heads": 0, "selected": [[0, 1]]}, "selected"),
    ],
)
def test_config_errors_name_the_key(values, key):
    with pytest.raises(ValueError, match=f"^{key}:"):
        MudafConfig(**values)


def test_resolved_fills_in_the_selected_heads():
    values = MudafConfig(heads=2).resolved(LORA, selected_heads=[(1, 3), (0, 2)])
    assert values["selected"] == [[1, 3], [0, 2]] and values["tuning"] == "full"
    assert MudafConfig(**values).resolved(LORA) == values  # a saved config resolves to itself
    assert MudafConfig(heads=0).resolved(LORA)["selected"] == []
    with pytest.raises(ValueError, match="^selected: heads = 8 needs the chosen heads"):
        MudafConfig().resolved(LORA)
    with pytest.raises(ValueError, match="^selected: heads = 2 but no head"):
        MudafConfig(heads=2, selection="weak").resolved(LORA, selected_heads=[])


def test_each_method_resolves_from_the_part_of_the_context_it_takes():
    context = ResolveContext(xi_auto=1.5, selected_heads=[[2, 0]])
    assert METHODS["mudaf"].resolve({"heads": 1}, LORA, context)["selected"] == [[2, 0]]
    assert METHODS["rectify"].resolve({"xi": "auto"}, LORA, context)["xi"] == 1.5


def test_grid_sweeps_heads_and_selection():
    grid = cells({"mudaf": {"heads": [0, 8], "selection": ["weighted", "weak"]}})
    assert sorted(grid) == [
        "mudaf-heads0-selectionweak",
        "mudaf-heads0-selectionweighted",
        "mudaf-heads8-selectionweak",
        "mudaf-heads8-selectionweighted",
    ]
    assert grid["mudaf-heads8-selectionweak"] == ("mudaf", {"heads": 8, "selection": "weak"})


def test_objective_and_tuning_per_method():
    mudaf = METHODS["mudaf"]
    objective = mudaf.objective(MudafConfig(heads=2, alpha=0.6, selected=[[0, 1], [3, 2]]))
    assert isinstance(objective, ContrastiveObjective)
    assert objective.qa_weight == pytest.approx(0.4) and objective.selected == [[0, 1], [3, 2]]
    assert mudaf.objective(MudafConfig(heads=0)) is None  # Vanilla-SFT
    with pytest.raises(ValueError, match="^selected:"):
        mudaf.objective(MudafConfig(heads=2))
    assert mudaf.tuning(MudafConfig()) == "full"
    assert mudaf.tuning(MudafConfig(tuning="lora")) == "lora"
    for name, values in (("qlora", {}), ("opamp", {"K": 1}), ("rectify", {})):
        cfg = METHODS[name].make_config(values)
        assert METHODS[name].objective(cfg) is None
        assert METHODS[name].tuning(cfg) == "lora"


def test_attach_leaves_the_model_unchanged(base_dir):
    ids = torch.tensor([[1, 5, 9, 12, 7, 30, 4, 8]])
    model = load_base(base_dir).eval()
    with torch.no_grad():
        want = model(input_ids=ids).logits
    n_params = len(list(model.parameters()))
    METHODS["mudaf"].attach(model, MudafConfig(heads=0))
    with torch.no_grad():
        got = model(input_ids=ids).logits
    assert len(list(model.parameters())) == n_params
    assert torch.equal(got, want)
