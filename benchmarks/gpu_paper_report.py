"""The goals and the Markdown page of ``gpu_paper.py``'s results."""

from __future__ import annotations

from gpu_paper_cells import LKG_FUSED_PER_LAYER

STEP_GOAL, OPAMP_GOAL = 1.25, 2.2


def goals(steps: list[dict], attention: list[dict], goal_tokens: int) -> list[dict]:
    methods = [r for r in steps if r["method"] != "qlora"]
    worst = max(methods, key=lambda r: r["step_vs_qlora"] or float("inf"))
    opamp = [r for r in attention if r["variant"] == "opamp" and r["tokens"] == goal_tokens]
    opamp_ratio = opamp[0]["time_vs_sdpa"] if opamp else None
    return [
        {
            "goal": f"every method's step ≤ {STEP_GOAL}× QLoRA's",
            "measured": f"worst: {worst['study']}/{worst['cell']} {fmt(worst['step_vs_qlora'])}",
            "met": all(r["step_vs_qlora"] is not None and r["step_vs_qlora"] <= STEP_GOAL
                       for r in methods),
        },
        {
            "goal": f"OpAmp attention fwd+bwd ≤ {OPAMP_GOAL}× SDPA at {goal_tokens} tokens",
            "measured": fmt(opamp_ratio) if opamp else "not measured",
            "met": opamp_ratio is not None and opamp_ratio <= OPAMP_GOAL,
        },
    ]  # fmt: skip


def fmt(x, spec: str = ".2f", suffix: str = "×") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def markdown(data: dict) -> str:
    m = data["meta"]
    s = m["shape"]
    lines = [
        "# The paper preset's methods on one GPU (benchmarks/gpu_paper.py)",
        "",
        f"**{m['device']}** · {m['date']} · commit {m['commit']} · torch {m['torch']} · "
        f"transformers {m['transformers']} · bitsandbytes {m['bitsandbytes']} · "
        f"peft {m['peft']}" + (" · **smoke run: CPU, tiny shapes, no measurement**" * m["smoke"]),
        "",
        f"Random Llama model: hidden {s['hidden']}, {s['layers']} layers, {s['heads']} heads, "
        f"{s['kv_heads']} KV heads, intermediate {s['intermediate']}, vocab {s['vocab']}; 4-bit "
        f"{m['quantization']}; method modules in {m['dtype']}. Step: one optimizer step on one "
        f"micro-batch of the study's max_length (median of {m['steps']} after {m['warmup']} "
        f"warm-up); peak memory: {m['memory']}. Generation: {m['eval']['batch_size']} prompts "
        f"of {m['eval']['prompt_tokens']} tokens, {m['eval']['max_new_tokens']} new tokens, "
        "greedy (after a warm-up). LKG-RALM fuses "
        f"{LKG_FUSED_PER_LAYER} heads per layer; MuDAF's heads are a seeded draw.",
        "",
        "## Goals",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        *(f"| {g['goal']} | {g['measured']} | {'yes' if g['met'] else 'NO'} |"
          for g in data["goals"]),
        "",
        "## Training step and generation, as ratios to QLoRA (same study settings, same layers)",
        "",
        "| study | cell | layers | tokens/step | step time / QLoRA | tokens/s / QLoRA "
        "| peak mem / QLoRA | gen tokens/s / QLoRA | step s | tokens/s | peak GiB | gen tokens/s "
        "| settings |",
        "|" + "---|" * 13,
    ]  # fmt: skip
    for r in data["steps"]:
        layers = f"{r['layers']}" + (
            f" (OOM at {r['oom_at_layers']})" if r["oom_at_layers"] else ""
        )
        settings = (
            f"len {r['max_length']} × micro {r['micro_batch_size']}, LoRA r {r['lora_r']}, "
            f"{r['optimizer']}{', ' + r['note'] if r['note'] else ''}"
        )
        if r["status"] != "ok":
            lines.append(f"| {r['study']} | {r['cell']} | {layers} | {r['status']} |" + " |" * 8
                         + f" {settings} |")  # fmt: skip
            continue
        lines.append(
            f"| {r['study']} | {r['cell']} | {layers} | {r['tokens_per_step']} "
            f"| {fmt(r['step_vs_qlora'])} | {fmt(r['tokens_per_s_vs_qlora'])} "
            f"| {fmt(r['peak_vs_qlora'])} | {fmt(r['eval_vs_qlora'])} | {r['step_s']:.3f} "
            f"| {r['tokens_per_s']:.0f} | {r['peak_gib']:.2f} "
            f"| {fmt(r.get('eval_tokens_per_s'), '.1f', '')} | {settings} |"
        )
    lines += [
        "",
        "## Attention forward + backward, as ratios to causal SDPA",
        "",
        f"q [1, {s['heads']}, L, D], k/v [1, {s['kv_heads']}, L, D] in {m['dtype']}, as the model "
        "calls each function; memory: peak above the inputs. opamp: OpAmpAttention with the "
        "preset's adapters; rectified: rectified_attention with the preset's g and ξ; "
        f"lkg_fusion: relevance_attention on {LKG_FUSED_PER_LAYER} heads, bias built in the step.",
        "",
        "| tokens | variant | time / SDPA | peak mem / SDPA | ms | MiB above inputs |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["attention"]:
        if r["status"] != "ok":
            lines.append(f"| {r['tokens']} | {r['variant']} | {r['status']} | | | |")
            continue
        lines.append(
            f"| {r['tokens']} | {r['variant']} | {fmt(r['time_vs_sdpa'])} "
            f"| {fmt(r['memory_vs_sdpa'])} | {r['seconds'] * 1e3:.2f} "
            f"| {r['peak_mib_above_inputs']:.0f} |"
        )
    return "\n".join(lines) + "\n"
