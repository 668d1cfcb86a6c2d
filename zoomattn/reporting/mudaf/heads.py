"""The MuDAF report's analyses of the head files: pure functions from the JSON of
``evaluation.retrieval_heads`` (``head_scores`` and ``masking_experiment`` per model, plus
``"model"``) and of the head selection (``selected``: ``[layer, head]`` pairs) to tables.

Retrieval scores are means over the scored questions (no CI); masking scores are ×100.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from zoomattn.reporting.common.studies import study_rank

STRONG_F1 = 0.3  # a head counts as a retrieval head from this F1 on (the attended threshold)
TOP_SHARE = 0.05  # the paper's retrieval heads: the top ~5% by F1
EPS = 1e-9  # a change counts as a gain above float noise


@dataclass(frozen=True)
class Cell:
    model: str
    run: str
    heads: int
    selection: str  # "weighted" (the paper's), "top" or "weak"
    seed: int | None

    def label(self, many_seeds: bool = False) -> str:
        if self.heads == 0:
            name = "Vanilla-SFT (n=0)"
        else:
            name = f"{'MuDAF-weak' if self.selection == 'weak' else 'MuDAF'} n={self.heads}"
            name += "" if self.selection in ("weighted", "weak") else f" [{self.selection}]"
        return name + (f", seed {self.seed}" if many_seeds else "")


def mudaf_cells(spec: dict) -> list[Cell]:
    out = []
    for model, c in spec.get("cells", {}).items():
        v = c.get("values") or {}
        sel = v.get("selection", "weighted")
        out.append(Cell(model, c["run"], int(v.get("heads", 0)), sel, c.get("seed")))
    return out


def sft_model(cells: list[Cell], seed) -> str | None:
    """The Vanilla-SFT (heads 0) model of this seed, else of any seed."""
    zero = [c for c in cells if c.heads == 0]
    same = [c for c in zero if c.seed == seed]
    return (same or zero)[0].model if zero else None


def _f1(h: dict) -> np.ndarray:
    return np.asarray(h["f1"], dtype=float)


def _mean(a) -> float:
    a = np.asarray(a, dtype=float)
    return float(a.mean()) if a.size else math.nan


def _rank(h: dict | None, layer: int, head: int):
    if h is None:
        return None
    return next(
        (r["rank"] for r in h.get("ranking", []) if (r["layer"], r["head"]) == (layer, head)), None
    )


def target_heads(cells, runs, base: dict | None, hb: dict, sb: dict, many: bool) -> pd.DataFrame:
    """Figs. 5/6: each selected head of each model of ``runs`` (in that order): its retrieval
    score (and rank) in the base, after MuDAF and after Vanilla-SFT of the same seed."""
    recs = []
    for run in runs:
        for c in (c for c in cells if c.run == run and c.heads):
            after, sel = hb.get(c.model), sb.get(c.model)
            if base is None or after is None or sel is None:
                continue
            sft_id = sft_model(cells, c.seed)
            sft = hb.get(sft_id)
            for layer, head in sel["selected"]:
                rec = {"cell": c.label(many), "model": c.model, "vanilla_sft_model": sft_id}
                rec |= {"target": f"{layer}-{head}", "layer": layer, "head": head}
                for key, h in (("base", base), ("mudaf", after), ("vanilla_sft", sft)):
                    rec[key] = _f1(h)[layer, head] if h else math.nan
                    rec[f"{key}_rank"] = _rank(h, layer, head)
                rec["delta_mudaf"] = rec["mudaf"] - rec["base"]
                recs.append(rec | {"delta_vanilla_sft": rec["vanilla_sft"] - rec["base"]})
    return pd.DataFrame(recs)


GROUPS = ("selected", "same_layer", "other_layers")  # App. C's head groups


def layer_effect(cells, base: dict | None, hb: dict, sb: dict, many: bool):
    """App. C: the retrieval-score change (model − base) of the selected heads, of the other
    heads of layers holding a selected head, and of the heads of the other layers; Vanilla-SFT's
    (same seed) change on the same heads as the reference. Returns (summary, per-layer) tables
    and the deltas per model (for the maps)."""
    summary, per_layer, deltas = [], [], {}
    if base is None:
        return pd.DataFrame(), pd.DataFrame(), deltas
    f1 = _f1(base)
    for c in (c for c in cells if c.heads):
        after, sel = hb.get(c.model), sb.get(c.model)
        if after is None or sel is None or _f1(after).shape != f1.shape:
            continue
        sft = hb.get(sft_model(cells, c.seed))
        d = _f1(after) - f1
        ds = _f1(sft) - f1 if sft and _f1(sft).shape == f1.shape else np.full(f1.shape, math.nan)
        chosen = np.zeros(f1.shape, dtype=bool)
        for layer, head in sel["selected"]:
            chosen[layer, head] = True
        has = np.broadcast_to(chosen.any(axis=1)[:, None], f1.shape)
        masks = dict(zip(GROUPS, (chosen, has & ~chosen, ~has), strict=True))
        layers = sorted({int(layer) for layer, _ in sel["selected"]})
        rec = {"cell": c.label(many), "model": c.model, "n_selected": int(chosen.sum())}
        rec["selected_layers"] = " ".join(map(str, layers))
        for g, m in masks.items():
            rec |= {f"{g}_n": int(m.sum()), f"{g}_mudaf": _mean(d[m]), f"{g}_sft": _mean(ds[m])}
        summary.append(rec)
        deltas[c.model] = (c.label(many), d, sel["selected"])
        for layer in range(f1.shape[0]):
            rest = ~chosen[layer]
            per_layer.append(
                {
                    "cell": c.label(many),
                    "model": c.model,
                    "layer": layer,
                    "selected_in_layer": int(chosen[layer].sum()),
                    "other_heads": int(rest.sum()),
                    "mudaf": _mean(d[layer][rest]),
                    "vanilla_sft": _mean(ds[layer][rest]),
                    "improved_share": _mean(d[layer][rest] > EPS),
                }
            )
    return pd.DataFrame(summary), pd.DataFrame(per_layer), deltas


def study_of(spec: dict, model: str) -> str:
    if model in spec.get("studies", {}):
        return spec["studies"][model]
    return "mudaf" if model in spec.get("cells", {}) else "base"


def across_methods(spec: dict, heads: list[dict]) -> pd.DataFrame:
    """One row per heads file, grouped by study: mean and max F1 over all heads, the mean F1 of
    its base's top-5% heads, the heads with F1 ≥ 0.3, and the changes against its base (the spec's
    ``bases``: study -> base id; a base is its own)."""
    hb, bases = {h["model"]: h for h in heads}, spec.get("bases") or {}
    recs = []
    for h in heads:
        model, study = h["model"], study_of(spec, h["model"])
        ref = model if study == "base" else bases.get(study, "base")
        ref = ref if ref in hb else spec.get("base", "base")
        f1, rf = _f1(h), _f1(hb[ref]) if ref in hb else None
        top = []
        if rf is not None and rf.shape == f1.shape:
            order = np.argsort(-rf.ravel(), kind="stable")[: max(1, round(TOP_SHARE * rf.size))]
            top = [divmod(int(i), rf.shape[1]) for i in order]
        rec = {"study": study, "model": model, "base": ref if rf is not None else None}
        rec |= {"heads": f1.size, "mean_f1": float(f1.mean()), "max_f1": float(f1.max())}
        rec |= {"top5_heads": len(top), "top5_mean_f1": _mean([f1[lh] for lh in top])}
        rec["n_f1_ge_0.3"] = int((f1 >= STRONG_F1).sum())
        same = rf is not None and rf.shape == f1.shape
        rec["delta_mean_f1"] = rec["mean_f1"] - float(rf.mean()) if same else math.nan
        rec["delta_top5_mean_f1"] = (
            rec["top5_mean_f1"] - _mean([rf[lh] for lh in top]) if top else math.nan
        )
        recs.append(rec)
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    key = df["study"].map(study_rank) * 10**6 + df["model"].rank(method="first")
    return df.assign(_k=key).sort_values("_k").drop(columns="_k").reset_index(drop=True)


def masking_table(spec: dict, masking: list[dict]) -> pd.DataFrame:
    """Fig. 4 for every masked model: per k the score (×100) unmasked, with the top-k heads by
    its own retrieval score masked and with k random heads masked (mean, min, max of draws)."""
    recs = []
    for m in masking:
        for row in m.get("k", []):
            drawn = [x for x in row.get("random") or [] if x is not None]
            recs.append(
                {
                    "study": study_of(spec, m["model"]),
                    "model": m["model"],
                    "metric": m.get("metric"),
                    "k": row["k"],
                    "baseline": 100 * m["baseline"],
                    "top": 100 * row["top"],
                    "random_mean": 100 * np.mean(drawn) if drawn else math.nan,
                    "random_min": 100 * min(drawn) if drawn else math.nan,
                    "random_max": 100 * max(drawn) if drawn else math.nan,
                    "draws": len(drawn),
                }
            )
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    df["drop_top"] = df["baseline"] - df["top"]
    df["drop_random"] = df["baseline"] - df["random_mean"]
    key = df["study"].map(study_rank) * 10**6 + df["model"].rank(method="dense") * 1000 + df["k"]
    return df.assign(_k=key).sort_values("_k").drop(columns="_k").reset_index(drop=True)
