rule report:
    input:
        evals=EVAL_FILES,
        attention=ATTENTION_FILES,
        base=BASE,
        spec=report_spec_file("opamp", {"preset": PRESET, "benchmarks": CFG["benchmarks"],
                                        "cells": {m: {"run": t.run, "method": t.method,
                                                      "values": t.values, "seed": t.seed}
                                                  for m, t in TRAINED.items()
                                                  if t.study == "opamp"},
                                        "seeds": CFG["seeds"], "attention": CFG["attention"],
                                        "code": code_hash("report")}),
    output:
        report_flag(REPORT, "opamp"),
    log:
        f"{OUT}/logs/report.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m zoomattn report --study opamp --spec-file {input.spec}"
        " --inputs evals={input.evals} attention={input.attention}"
        " base_metrics={input.base}/metrics.json --out {output} > {log} 2>&1"


if RECT:

    rule rect_report:
        input:
            evals=RECT_EVAL_FILES,
            margin=margin_file(grid.rect_base(CFG)),
            spec=report_spec_file("rectification", {
                "preset": PRESET, "rectification": RECT,
                "cells": {m: {"run": t.run, "method": t.method, "values": t.values,
                              "placement": t.placement, "seed": t.seed}
                          for m, t in TRAINED.items() if t.study == grid.RECT},
                "base": grid.rect_base(CFG), "seeds": CFG["seeds"], "code": code_hash("report")}),
        output:
            report_flag(RECT_REPORT, "rectification"),
        log:
            f"{OUT}/logs/report_rectification.log",
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn report --study rectification --spec-file {input.spec}"
            " --inputs evals={input.evals} margin={input.margin} --out {output} > {log} 2>&1"


if MUDAF:
    MUDAF_CELLS = {m: t for m, t in TRAINED.items() if t.study == grid.MUDAF}

    rule mudaf_report:
        input:
            evals=MUDAF_EVAL_FILES,
            heads=[heads_file(m) for m in ALL_MODELS],
            masking=[masking_file(m) for m in MASKED_MODELS],
            selections=[selection_file(m) for m, t in MUDAF_CELLS.items()
                        if t.values.get("heads", 0) > 0],
            spec=report_spec_file("mudaf", {
                "preset": PRESET, "mudaf": MUDAF,
                "cells": {m: {"run": t.run, "method": t.method, "values": t.values,
                              "seed": t.seed} for m, t in MUDAF_CELLS.items()},
                "studies": {m: t.study for m, t in TRAINED.items()},
                "bases": {s: grid.study_base(CFG, s) for s in ["opamp", *grid.studies(CFG)]},
                "base": MUDAF_BASE, "seeds": CFG["seeds"],
                "clipped_heads": grid.clipped_heads(CFG), "code": code_hash("report")}),
        output:
            report_flag(MUDAF_REPORT, "mudaf"),
        log:
            f"{OUT}/logs/report_mudaf.log",
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn report --study mudaf --spec-file {input.spec}"
            " --inputs evals={input.evals} heads={input.heads}"
            " masking={input.masking} selections={input.selections} --out {output}"
            " > {log} 2>&1"


if LKG:

    rule lkg_report:
        input:
            evals=LKG_EVAL_FILES,
            patterns=[patterns_file(m) for m in ALL_MODELS],
            models=[model_dir(m) for m in LKG_MODELS],
            spec=report_spec_file("lkg", lkg_report_spec()),
        output:
            report_flag(LKG_REPORT, "lkg"),
        params:
            train=[f"{model_dir(m)}/metrics.json" for m in LKG_MODELS],
        log:
            f"{OUT}/logs/report_lkg.log",
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn report --study lkg --spec-file {input.spec}"
            " --inputs evals={input.evals} patterns={input.patterns}"
            " train_metrics={params.train} --out {output} > {log} 2>&1"


if LEADERBOARD:

    rule leaderboard_report:  # the cross-method report: from the metric files of the whole grid
        input:
            evals=CROSS_INPUTS["evals"],
            predictions=[f.replace(".json", ".predictions.jsonl") for f in CROSS_INPUTS["evals"]],
            attention=CROSS_INPUTS["attention"],
            heads=CROSS_INPUTS["heads"],
            patterns=CROSS_INPUTS["patterns"],
            spec=report_spec_file("leaderboard", leaderboard_report_spec()),
        output:
            report_flag(LEADERBOARD_REPORT, "leaderboard"),
        log:
            f"{OUT}/logs/report_leaderboard.log",
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn report --study leaderboard --spec-file {input.spec}"
            " --inputs evals={input.evals} predictions={input.predictions}"
            " attention={input.attention} heads={input.heads} patterns={input.patterns}"
            " --out {output} > {log} 2>&1"
