"""Every report figure explains itself: titles fit, axes are named, numbers are plain, and a
panel or point without data says so. Each figure is drawn once from ``figure_inputs``."""

import inspect
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D

from tests.reporting import figure_inputs as inputs
from zoomattn.reporting.common.plotting import NO_DATA, notes
from zoomattn.reporting.leaderboard import diagnostics
from zoomattn.reporting.leaderboard import table as leaderboard
from zoomattn.reporting.lkg import figures as lkg_figures
from zoomattn.reporting.mudaf import figures as mudaf_figures
from zoomattn.reporting.mudaf import retrieval_figures
from zoomattn.reporting.opamp import figures
from zoomattn.reporting.rectification import figures as rectification_figures

FIGURE_MODULES = (diagnostics, figures, leaderboard, lkg_figures, mudaf_figures)
FIGURE_MODULES += (rectification_figures, retrieval_figures)


def draw(builder, folder):
    """The saved figure, on a canvas again (closing it took its own): it is as the PNG was
    drawn, ticks and layout included."""
    folder.mkdir(parents=True, exist_ok=True)
    fig = builder(folder)
    FigureCanvasAgg(fig)
    return fig


class Gallery:
    """Each input's figure, drawn once for all the tests that look at it."""

    def __init__(self, tmp_path_factory):
        self.factory, self.figs, self.folders = tmp_path_factory, {}, {}

    def __call__(self, name: str):
        if name not in self.figs:
            self.folders[name] = self.factory.mktemp(name)
            self.figs[name] = draw(inputs.FIGURES[name], self.folders[name])
        return self.figs[name]

    def png(self, name: str) -> Path:
        self(name)
        (png,) = self.folders[name].glob("*.png")
        return png


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    return Gallery(tmp_path_factory)


@pytest.fixture(params=sorted(inputs.FIGURES))
def fig(request, drawn):
    return drawn(request.param)


def panels(fig):
    """The figure's visible axes, colour bars aside."""
    return [ax for ax in fig.axes if ax.get_visible() and not hasattr(ax, "_colorbar")]


def inside(box, fig) -> bool:
    return (
        box.x0 >= -1
        and box.y0 >= -1
        and box.x1 <= fig.bbox.width + 1
        and box.y1 <= fig.bbox.height + 1
    )


def no_data_texts(ax) -> list[str]:
    return [a.get_text() for a in notes(ax) if hasattr(a, "get_text")]


def test_every_title_fits_inside_the_figure(fig):
    renderer = fig.canvas.get_renderer()
    titles = [t for t in (fig._suptitle, *(ax.title for ax in fig.axes)) if t and t.get_text()]
    assert titles
    for title in titles:
        assert inside(title.get_window_extent(renderer), fig), title.get_text()


def test_every_legend_fits_inside_the_figure(fig):
    renderer = fig.canvas.get_renderer()
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if legend is not None:
            assert inside(legend.get_window_extent(renderer), fig), legend.get_texts()[0]


def test_every_panel_with_data_names_both_axes(fig):
    for ax in panels(fig):
        if ax.has_data():
            assert ax.get_xlabel() and ax.get_ylabel(), ax.get_title()


def test_no_axis_shows_an_offset_or_a_multiplier_and_ticks_read_as_plain_numbers(fig):
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            assert axis.get_offset_text().get_text() == "", ax.get_title()
            for tick in axis.get_ticklabels():
                text = tick.get_text().replace("−", "-")
                if text.lstrip("-").replace(".", "", 1).isdigit():
                    assert len(text) <= 8, (ax.get_title(), text)  # not 0.00000000000000001


def test_every_panel_without_data_says_so(fig):
    for ax in panels(fig):
        if not ax.has_data():
            assert any(t.startswith("no data: ") for t in no_data_texts(ax)), ax.get_title()


def test_flat_scores_get_the_limits_of_equal_values_not_a_magnified_view(drawn):
    varying, flat = panels(drawn("rectification.figures.xi_curves"))
    assert flat.get_title().startswith("flat_like")
    assert flat.get_ylim() == pytest.approx((-0.05, 0.05))
    assert varying.get_ylim()[1] - varying.get_ylim()[0] > 1


EMPTY = {
    "no model with retrieval heads": (
        lambda out: mudaf_figures.across_methods(
            inputs.across_methods_frame([]), out / "a.png", inputs.CAPTION
        ),
        "no model has retrieval-head scores",
    ),
    "no model with an attention map": (
        lambda out: figures.golden_share(
            {"base": inputs.attention_map([0.5, 0.5], [0.5, 0.5])}, [], out / "g.png", "Fig. 6"
        ),
        "no model of this figure has an attention file",
    ),
    "no masking result": (
        lambda out: inputs.masking(out, results={}),
        "no masking result among the inputs",
    ),
    "no per-layer margins": (
        lambda out: inputs.margin(out, per_layer=()),
        "the margin file has no per-layer medians",
    ),
    "no K row in Table 3": (
        lambda out: figures.ksweep(
            pd.DataFrame({"Avg": [1.0]}, index=["QLoRA"]), [], out / "k.png", "c"
        ),
        "no OpAmp (K=…) row in Table 3",
    ),
}


def empty_notes(fig) -> set[str]:
    return {
        " ".join(text.split())  # unwrapped
        for ax in panels(fig)
        if not ax.has_data()
        for text in no_data_texts(ax)
    }


@pytest.mark.parametrize("case", sorted(EMPTY))
def test_a_panel_with_nothing_to_draw_says_why_in_the_panel(case, tmp_path):
    builder, reason = EMPTY[case]
    assert empty_notes(draw(builder, tmp_path)) == {f"no data: {reason}"}


def test_a_benchmark_without_leaderboard_cells_gets_a_panel_saying_so(drawn):
    fig = drawn("leaderboard.table.plot")
    assert empty_notes(fig) == {"no data: no leaderboard cell of multi_noisy"}


def zero_notes(ax) -> list[str]:
    return [t for t in no_data_texts(ax) if " is 0: the bars have no length" in t]


@pytest.mark.parametrize(
    "name, zero_panel",
    [("leaderboard.diagnostics.plot_retrieval_heads", 0), ("mudaf.figures.target_heads", 1)],
)
def test_a_panel_of_zero_length_bars_says_every_value_is_zero(drawn, name, zero_panel):
    assert [bool(zero_notes(ax)) for ax in panels(drawn(name))] == [
        i == zero_panel for i in range(len(panels(drawn(name))))
    ]


def test_bars_with_a_nonzero_value_carry_no_zero_note(drawn):
    assert not zero_notes(panels(drawn("mudaf.figures.across_methods"))[0])


def gap_markers(ax):
    return [line for line in ax.lines if line.get_gid() == NO_DATA]


@pytest.mark.parametrize(
    "name, where",
    [
        ("opamp.figures.golden_share", [inputs.GAPS_AT, inputs.GAPS_AT]),  # base and QLoRA
        ("opamp.figures.noise_curves", [[0.5]]),
        ("lkg.figures.robustness", [[2]]),
        (
            "leaderboard.diagnostics.plot_golden_share",
            [[2], [2]],
        ),  # the first panel: base and its model
    ],
)
def test_a_missing_point_is_a_hollow_marker_at_its_x_named_last_in_the_legend(drawn, name, where):
    ax = panels(drawn(name))[0]
    marks = gap_markers(ax)
    assert [list(m.get_xdata()) for m in marks] == where
    assert all(m.get_markerfacecolor() == "none" for m in marks)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1].startswith("no data") and not any(t.startswith("no") for t in legend[:-1])


def test_a_missing_bar_is_a_hollow_marker_in_its_slot(drawn):
    (mark,) = gap_markers(panels(drawn("mudaf.figures.target_heads"))[0])
    assert list(mark.get_xdata()) == pytest.approx([1 + 0.27])  # head 1-1, Vanilla-SFT's bar


def test_a_missing_horizontal_bar_is_marked_on_its_row(drawn):
    marks = gap_markers(panels(drawn("mudaf.figures.across_methods"))[0])
    rows = sorted(y for m in marks for y in m.get_ydata())
    assert rows == pytest.approx([0 - 0.2, 0 + 0.2])  # the last model, both its bars


def test_marking_a_gap_leaves_the_lines_colours_as_they_were(drawn):
    ax = panels(drawn("opamp.figures.golden_share"))[0]
    lines = [line for line in ax.lines if line.get_gid() != NO_DATA][:2]
    marks = gap_markers(ax)
    for artists, colour_of in ((lines, Line2D.get_color), (marks, Line2D.get_markeredgecolor)):
        assert [to_hex(colour_of(a)) for a in artists] == [to_hex("C0"), to_hex("C1")]


def test_the_same_inputs_give_the_same_png_bytes(drawn, tmp_path):
    name = "opamp.figures.golden_share"  # wrapped titles, gap markers, two legends
    draw(inputs.FIGURES[name], tmp_path)
    png = drawn.png(name)
    assert png.read_bytes() == (tmp_path / png.name).read_bytes()


def test_every_figure_function_has_an_input_here():
    """A figure function (one that takes a ``path``) without an input would skip these checks."""
    drawing = {
        f"{module.__name__.removeprefix('zoomattn.reporting.')}.{name}"
        for module in FIGURE_MODULES
        for name, f in vars(module).items()
        if inspect.isfunction(f)
        and f.__module__ == module.__name__
        and not name.startswith("_")
        and "path" in inspect.signature(f).parameters
    }
    assert drawing == set(inputs.FIGURES)
