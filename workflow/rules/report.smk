rule report:
    input:
        evals=EVAL_FILES,
        attention=ATTENTION_FILES,
        base=BASE,
    output:
        directory(REPORT),
    params:
        spec=lambda w: as_json({"preset": PRESET, "benchmarks": CFG["benchmarks"],
                                "cells": {r: CELLS[r] for r in CELLS}, "seeds": CFG["seeds"],
                                "attention": CFG["attention"], "code": code_hash("report")}),
    log:
        f"{OUT}/logs/report.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m zoomattn report --spec {params.spec:q} --results {RESULTS}"
        " --eval-files {input.evals} --attention-files {input.attention}"
        " --base-metrics {input.base}/metrics.json --out {output} > {log} 2>&1"


if RECT:

    rule rect_report:
        input:
            evals=RECT_EVAL_FILES,
            margin=margin_file(grid.rect_base(CFG)),
        output:
            directory(RECT_REPORT),
        params:
            spec=lambda w: as_json({"preset": PRESET, "rectification": RECT,
                                    "cells": {m: {"run": t.run, "method": t.method,
                                                  "values": t.values, "placement": t.placement,
                                                  "seed": t.seed}
                                              for m, t in TRAINED.items() if t.study != "opamp"},
                                    "base": grid.rect_base(CFG), "seeds": CFG["seeds"],
                                    "code": code_hash("report")}),
        log:
            f"{OUT}/logs/report_rectification.log",
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn rect-report --spec {params.spec:q} --results {RESULTS}"
            " --eval-files {input.evals} --margin {input.margin} --out {output} > {log} 2>&1"
