"""Conventions every report figure follows, in one place.

- Agg backend, 120 dpi, and numbers written out: no offset (``+1e3``) or scientific multiplier
  (``1e-17``) above an axis. A flat axis (all values within ``FLAT`` of each other, say float noise
  around 0) gets readable limits around its value instead of a magnified view of the noise.
- Titles, the figure's and each panel's, are wrapped at save time to fit their width: the
  figure's for ``suptitle``, the panel's for a panel title; so callers pass the whole text.
- Missing data is said, never left blank: ``empty_panel`` writes "no data: <reason>" into a
  panel with nothing to draw, ``mark_gaps`` puts a hollow marker (legend: "no data") where a line
  or bar has no value, and ``note_if_all_zero`` says why a panel of zero-length bars looks empty.
  Every such artist carries the gid ``NO_DATA``, so tests and readers can find it.

``save`` applies all this and writes the PNG; same inputs give the same bytes. ``panel_row``,
``errorbar`` and ``save_with_legend`` draw the reports' rows of panels (one per benchmark) with
one legend below them. This module sets the Agg backend for every report figure.
"""

from __future__ import annotations

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import ScalarFormatter  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

DPI = 120
NO_DATA = "no-data"  # gid of every artist that marks missing data
FLAT = 1e-9  # an axis spanning less than this (relative to its value, at least 1) is flat
GAP_LABEL = "no data (hollow marker)"

plt.rcParams.update({"axes.formatter.useoffset": False, "axes.formatter.limits": (-1000, 1000)})


def empty_panel(ax, reason: str) -> None:
    """A panel with nothing to draw says so, and why, in the panel."""
    _note(ax, f"no data: {reason}")
    ax.set_xticks([])
    ax.set_yticks([])


def note_if_all_zero(ax, values, what: str) -> None:
    """Bars of length 0 draw nothing: if every value given is 0, say so instead of showing a
    blank (missing values aside: ``mark_gaps`` shows those)."""
    values = np.asarray(values, dtype=float).ravel()
    values = values[np.isfinite(values)]
    if values.size and np.all(values == 0):
        _note(ax, f"every {what} is 0: the bars have no length")


def _note(ax, text: str) -> None:
    """Grey text in the middle of the panel (``save`` wraps it to the panel's width)."""
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=9,
        color="dimgrey",
        gid=NO_DATA,
    )


def mark_gaps(ax, x, y, color, *, label: str = GAP_LABEL, horizontal: bool = False) -> None:
    """A hollow marker at the panel's edge (bottom; left if ``horizontal``) for every ``x`` whose
    ``y`` is missing (None/NaN), where a line would break or a bar be absent; one legend entry
    per panel. Successive calls stack their markers so that they do not hide each other."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    missing = ~np.isfinite(y)
    if not missing.any():
        return
    earlier = [line for line in ax.lines if line.get_gid() == NO_DATA]
    edge = np.full(missing.sum(), 0.04 + 0.04 * len(earlier))
    points = (edge, x[missing]) if horizontal else (x[missing], edge)
    trans = (
        blended_transform_factory(ax.transAxes, ax.transData)
        if horizontal
        else blended_transform_factory(ax.transData, ax.transAxes)
    )
    ax.plot(
        *points,
        ls="none",
        marker="o",
        ms=7,
        mfc="none",
        color=color,  # explicit: the panel's colour cycle must not advance for a marker
        mew=1.5,
        transform=trans,
        clip_on=False,
        gid=NO_DATA,
        label="_nolegend_" if earlier else label,
    )


def legend_entries(*axes) -> tuple[list, list]:
    """The panels' legend handles and labels, each label once, "no data" entries last."""
    entries: dict = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    order = sorted(entries, key=lambda label: _is_no_data(entries[label]))
    return [entries[label] for label in order], order


def _is_no_data(handle) -> bool:
    return hasattr(handle, "get_gid") and handle.get_gid() == NO_DATA  # containers have none


def gap_legend(ax, **kwargs) -> None:
    """A legend of only the panel's "no data" entry, for a panel whose lines another names."""
    handles, labels = legend_entries(ax)
    shown = [(h, lab) for h, lab in zip(handles, labels, strict=True) if _is_no_data(h)]
    if shown:
        ax.legend(*zip(*shown, strict=True), **kwargs)


def notes(ax) -> list:
    """The panel's "no data" notes (texts) and markers (lines)."""
    return [a for a in (*ax.texts, *ax.lines) if a.get_gid() == NO_DATA]


def save(fig, path, *, rect=None):
    """Apply the conventions above, lay the figure out (tight layout within ``rect`` unless it has
    a layout engine of its own), write it at ``DPI`` and close it. Returns the figure, which can
    still be drawn and inspected."""
    for ax in fig.axes:
        if ax.get_visible() and not ax.has_data() and not notes(ax):
            empty_panel(ax, "nothing was given to draw here")  # a figure's own reason is better
        _plain_numbers(ax)
        _readable_limits(ax)
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("tight", rect=rect or (0, 0, 1, 1))
    texts = _wrapped_texts(fig)
    _wrap_all(fig, texts)
    for _ in range(2):  # the layout changes the widths, the wrapping the layout: until stable
        fig.get_layout_engine().execute(fig)
        if not _wrap_all(fig, texts):
            break
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return fig


def panel_row(n: int, width: float = 4.6, height: float = 3.9):
    """A figure of ``n`` panels side by side (at least one) and the list of its axes."""
    fig, axes = plt.subplots(1, max(n, 1), figsize=(width * max(n, 1) + 0.4, height), squeeze=False)
    return fig, list(axes[0])


def errorbar(ax, xs, frame, columns, **kw) -> None:
    """Points with error bars from the frame's (score, low, high) ``columns``."""
    score, lo, hi = (frame[c].to_numpy(dtype=float) for c in columns)
    err = np.nan_to_num(np.vstack([score - lo, hi - score]).clip(min=0))
    ax.errorbar(xs, score, yerr=err, capsize=3, **kw)


def save_with_legend(fig, axes, path, title: str, legend_cols: int = 3):
    """``save`` with one legend for the whole figure, below the panels, each label once."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    rows = math.ceil(len(labels) / legend_cols) if labels else 0
    bottom = min(0.03 + 0.05 * rows, 0.4)
    if labels:
        fig.legend(handles, labels, loc="lower center", ncol=legend_cols, fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=9)
    return save(fig, path, rect=(0, bottom, 1, 1))


def _plain_numbers(ax) -> None:
    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        if isinstance(formatter, ScalarFormatter):
            formatter.set_useOffset(False)
            formatter.set_scientific(False)


def _readable_limits(ax) -> None:
    """Limits of a flat linear axis as matplotlib sets them for exactly equal values."""
    for axis, set_limits in ((ax.xaxis, ax.set_xlim), (ax.yaxis, ax.set_ylim)):
        lo, hi = axis.get_view_interval()
        centre = (lo + hi) / 2
        if axis.get_scale() != "linear" or abs(hi - lo) >= FLAT * max(1.0, abs(centre)):
            continue
        centre = 0.0 if abs(centre) < FLAT else centre
        half = 0.05 * abs(centre) or 0.05  # as matplotlib widens an axis of equal values
        set_limits(centre - half, centre + half)


def _wrapped_texts(fig) -> dict:
    """Every text to fit: its unwrapped text and a function giving its width now, in pixels."""
    texts = {}
    suptitle = fig._suptitle  # the artist; get_suptitle() gives only its text
    if suptitle is not None and suptitle.get_text():
        texts[suptitle] = (suptitle.get_text(), lambda: 0.98 * fig.bbox.width)
    for ax in fig.axes:
        width = _axes_width(fig, ax)
        if ax.title.get_text():
            texts[ax.title] = (ax.title.get_text(), width)
        for text in ax.texts:
            if text.get_gid() == NO_DATA:
                texts[text] = (text.get_text(), lambda w=width: 0.9 * w())
    return texts


def _wrap_all(fig, texts: dict) -> bool:
    """Wrap every text to its width now; whether any text changed."""
    renderer = fig.canvas.get_renderer()
    before = [text.get_text() for text in texts]
    for text, (original, width) in texts.items():
        _wrap(text, original, width(), renderer)
    return [text.get_text() for text in texts] != before


def _axes_width(fig, ax):
    return lambda: ax.get_position().width * fig.bbox.width


def _wrap(text, original: str, width: float, renderer) -> None:
    """Re-wrap ``original`` (each of its lines on its own) at the most characters a line can
    hold and still be at most ``width`` pixels wide."""
    text.set_text(original)
    if text.get_window_extent(renderer).width <= width:
        return
    chars = max(len(line) for line in original.split("\n"))
    while chars > 8:
        chars -= max(1, chars // 20)
        text.set_text("\n".join(textwrap.fill(line, chars) for line in original.split("\n")))
        if text.get_window_extent(renderer).width <= width:
            return
