rule evaluate:
    input:
        model=lambda w: model_dir(w.model),
        base=base_dir,
        split=LAYOUT.split_dir("{benchmark}", "{split}"),
    output:
        metrics=LAYOUT.eval_file("{model}", "{benchmark}", "{split}"),
        predictions=f"{OUT}/eval/{{model}}/{{benchmark}}/{{split}}.predictions.jsonl",
    params:
        spec=lambda w: as_json(SPECS.evaluate(w.model, w.benchmark, w.split)),
    threads: EVALUATE_JOB.threads
    resources:
        **EVALUATE_JOB.resources,
    retries: EVALUATE_JOB.retries
    log:
        log_file("evaluate/{model}_{benchmark}_{split}"),
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zoomattn evaluate --spec {params.spec:q}"
        " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
        " --out {output.metrics} --predictions {output.predictions} --threads {threads} > {log} 2>&1"


rule attention:  # every model of the grid: golden share by position, answer-token gap
    input:
        model=lambda w: model_dir(w.model),
        base=base_dir,
        split=LAYOUT.analysis_split_dir(GRID.analysis("attention"), "attention"),
    output:
        LAYOUT.attention_file("{model}"),
    params:
        spec=lambda w: as_json(SPECS.attention(w.model)),
    threads: EVALUATE_JOB.threads
    resources:
        **EVALUATE_JOB.resources,
    retries: EVALUATE_JOB.retries
    log:
        log_file("attention/{model}"),
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zoomattn attention --spec {params.spec:q}"
        " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
        " --out {output} --threads {threads} > {log} 2>&1"


if MARGIN:

    rule score_margin:  # Fig. 5 and xi auto: p90 - p10 of the base model's pre-softmax scores
        input:
            model=lambda w: model_dir(w.base),
            split=LAYOUT.analysis_split_dir(MARGIN, "score_margin"),
        output:
            LAYOUT.margin_file("{base}"),
        params:
            spec=lambda w: as_json(SPECS.score_margin(w.base)),
        threads: EVALUATE_JOB.threads
        resources:
            **EVALUATE_JOB.resources,
        retries: EVALUATE_JOB.retries
        log:
            log_file("analysis/score_margin_{base}"),
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn score-margin --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.model} --split-dir {input.split}"
            " --out {output} --threads {threads} > {log} 2>&1"


if HEADS:

    rule retrieval_heads:  # every head's retrieval score (MuDAF App. A.2), for any model
        input:
            model=lambda w: model_dir(w.model),
            base=base_dir,
            split=LAYOUT.analysis_split_dir(HEADS, "retrieval_heads"),
        output:
            LAYOUT.heads_file("{model}"),
        params:
            spec=lambda w: as_json(SPECS.retrieval_heads(w.model)),
        threads: EVALUATE_JOB.threads
        resources:
            **EVALUATE_JOB.resources,
        retries: EVALUATE_JOB.retries
        log:
            log_file("analysis/retrieval_heads/{model}"),
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn retrieval-heads --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
            " --out {output} --threads {threads} > {log} 2>&1"


if MASKING:

    rule head_masking:  # MuDAF Fig. 4: the top-k retrieval heads masked vs k random heads
        input:
            model=lambda w: model_dir(w.model),
            base=base_dir,
            split=LAYOUT.analysis_split_dir(MASKING, "head_masking"),
            scores=lambda w: LAYOUT.heads_file(w.model),
        output:
            LAYOUT.masking_file("{model}"),
        params:
            spec=lambda w: as_json(SPECS.head_masking(w.model)),
        threads: EVALUATE_JOB.threads
        resources:
            **EVALUATE_JOB.resources,
        retries: EVALUATE_JOB.retries
        log:
            log_file("analysis/head_masking/{model}"),
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn head-masking --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
            " --scores {input.scores} --out {output} --threads {threads} > {log} 2>&1"


if PATTERNS:

    rule head_patterns:  # LKG-RALM Fig. 2: every head edge / uniform / middle-focused (App. D)
        input:
            model=lambda w: model_dir(w.model),
            base=base_dir,
            split=LAYOUT.analysis_split_dir(PATTERNS, "head_patterns"),
        output:
            LAYOUT.patterns_file("{model}"),
        params:
            spec=lambda w: as_json(SPECS.head_patterns(w.model)),
        threads: EVALUATE_JOB.threads
        resources:
            **EVALUATE_JOB.resources,
        retries: EVALUATE_JOB.retries
        log:
            log_file("analysis/head_patterns/{model}"),
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn head-patterns --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
            " --out {output} --threads {threads} > {log} 2>&1"
