# One report per study, from the files its Study names by kind (LAYOUT.report_inputs): evals,
# attention, base_metrics, margin, heads, masking, selections, patterns, train_metrics.


OPAMP_INPUTS = REPORT_INPUTS["opamp"]


rule report:
    input:
        evals=OPAMP_INPUTS["evals"],
        attention=OPAMP_INPUTS["attention"],
        base=model_dirs(OPAMP_INPUTS["base_metrics"]),
        spec=report_spec_file("opamp"),
    output:
        report_flag("opamp"),
    log:
        log_file("report"),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m zoomattn report --spec-file {input.spec}"
        " --eval-files {input.evals} --attention-files {input.attention}"
        " --base-metrics {input.base}/metrics.json --out {output} > {log} 2>&1"


if "rectification" in STUDIES:
    RECTIFICATION_INPUTS = REPORT_INPUTS["rectification"]

    rule rect_report:
        input:
            evals=RECTIFICATION_INPUTS["evals"],
            margin=RECTIFICATION_INPUTS["margin"],
            spec=report_spec_file("rectification"),
        output:
            report_flag("rectification"),
        log:
            log_file("report_rectification"),
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn rect-report --spec-file {input.spec}"
            " --eval-files {input.evals} --margin {input.margin} --out {output} > {log} 2>&1"


if "mudaf" in STUDIES:
    MUDAF_INPUTS = REPORT_INPUTS["mudaf"]

    rule mudaf_report:
        input:
            evals=MUDAF_INPUTS["evals"],
            heads=MUDAF_INPUTS["heads"],
            masking=MUDAF_INPUTS["masking"],
            selections=MUDAF_INPUTS["selections"],
            spec=report_spec_file("mudaf"),
        output:
            report_flag("mudaf"),
        log:
            log_file("report_mudaf"),
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn mudaf-report --spec-file {input.spec}"
            " --eval-files {input.evals} --heads-files {input.heads}"
            " --masking-files {input.masking} --selection-files {input.selections} --out {output}"
            " > {log} 2>&1"


if "lkg" in STUDIES:
    LKG_INPUTS = REPORT_INPUTS["lkg"]

    rule lkg_report:
        input:
            evals=LKG_INPUTS["evals"],
            patterns=LKG_INPUTS["patterns"],
            models=model_dirs(LKG_INPUTS["train_metrics"]),
            spec=report_spec_file("lkg"),
        output:
            report_flag("lkg"),
        params:
            train=LKG_INPUTS["train_metrics"],
        log:
            log_file("report_lkg"),
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn lkg-report --spec-file {input.spec}"
            " --eval-files {input.evals} --patterns-files {input.patterns}"
            " --train-files {params.train} --out {output} > {log} 2>&1"


if "leaderboard" in STUDIES:
    CROSS_INPUTS = REPORT_INPUTS["leaderboard"]

    rule leaderboard_report:  # the cross-method report: from the metric files of the whole grid
        input:
            evals=CROSS_INPUTS["evals"],
            predictions=[f.replace(".json", ".predictions.jsonl") for f in CROSS_INPUTS["evals"]],
            attention=CROSS_INPUTS["attention"],
            heads=CROSS_INPUTS["heads"],
            patterns=CROSS_INPUTS["patterns"],
            spec=report_spec_file("leaderboard"),
        output:
            report_flag("leaderboard"),
        log:
            log_file("report_leaderboard"),
        conda:
            "../../envs/report.yaml"
        shell:
            "python -m zoomattn leaderboard-report --spec-file {input.spec}"
            " --eval-files {input.evals} --attention-files {input.attention}"
            " --heads-files {input.heads} --patterns-files {input.patterns} --out {output}"
            " > {log} 2>&1"
