rule evaluate:
    input:
        model=lambda w: model_dir(w.model),
        base=lambda w: model_dir(model_base(w.model)),
        split=f"{OUT}/data/eval/{{benchmark}}/{{split}}",
    output:
        metrics=f"{OUT}/eval/{{model}}/{{benchmark}}/{{split}}.json",
        predictions=f"{OUT}/eval/{{model}}/{{benchmark}}/{{split}}.predictions.jsonl",
    params:
        spec=lambda w: as_json(eval_spec(w.model, w.benchmark, w.split)),
    threads: threads(CFG, "evaluate")
    resources:
        **rule_resources(CFG, "evaluate"),
    retries: retries(CFG, "evaluate")
    log:
        f"{OUT}/logs/evaluate/{{model}}_{{benchmark}}_{{split}}.log",
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zoomattn evaluate --spec {params.spec:q}"
        " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
        " --out {output.metrics} --predictions {output.predictions} --threads {threads} > {log} 2>&1"


rule attention:  # every model of the grid: golden share by position, answer-token gap
    input:
        model=lambda w: model_dir(w.model),
        base=lambda w: model_dir(model_base(w.model)),
        split=split_dir(CFG["attention"]["benchmark"], CFG["attention"]["noise_ratio"]),
    output:
        f"{OUT}/attention/{{model}}.json",
    params:
        spec=lambda w: as_json(attention_spec(w.model)),
    threads: threads(CFG, "evaluate")
    resources:
        **rule_resources(CFG, "evaluate"),
    retries: retries(CFG, "evaluate")
    log:
        f"{OUT}/logs/attention/{{model}}.log",
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zoomattn attention --spec {params.spec:q}"
        " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
        " --out {output} --threads {threads} > {log} 2>&1"


if RECT:

    rule score_margin:  # Fig. 5 and xi auto: p90 - p10 of the base model's pre-softmax scores
        input:
            model=lambda w: model_dir(w.base),
            split=lambda w: f"{OUT}/data/eval/{margin_split()[0]}/{margin_split()[1]}",
        output:
            f"{OUT}/analysis/score_margin/{{base}}.json",
        params:
            spec=lambda w: as_json(margin_spec(w.base)),
        threads: threads(CFG, "evaluate")
        resources:
            **rule_resources(CFG, "evaluate"),
        retries: retries(CFG, "evaluate")
        log:
            f"{OUT}/logs/analysis/score_margin_{{base}}.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn score-margin --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.model} --split-dir {input.split}"
            " --out {output} --threads {threads} > {log} 2>&1"


if MUDAF:

    rule retrieval_heads:  # every head's retrieval score (MuDAF App. A.2), for any model
        input:
            model=lambda w: model_dir(w.model),
            base=lambda w: model_dir(model_base(w.model)),
            split=heads_split(),
        output:
            heads_file("{model}"),
        params:
            spec=lambda w: as_json(retrieval_heads_spec(w.model)),
        threads: threads(CFG, "evaluate")
        resources:
            **rule_resources(CFG, "evaluate"),
        retries: retries(CFG, "evaluate")
        log:
            f"{OUT}/logs/analysis/retrieval_heads/{{model}}.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn retrieval-heads --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
            " --out {output} --threads {threads} > {log} 2>&1"

    rule head_masking:  # MuDAF Fig. 4: the top-k retrieval heads masked vs k random heads
        input:
            model=lambda w: model_dir(w.model),
            base=lambda w: model_dir(model_base(w.model)),
            split=heads_split(),
            scores=lambda w: heads_file(w.model),
        output:
            masking_file("{model}"),
        params:
            spec=lambda w: as_json(masking_spec(w.model)),
        threads: threads(CFG, "evaluate")
        resources:
            **rule_resources(CFG, "evaluate"),
        retries: retries(CFG, "evaluate")
        log:
            f"{OUT}/logs/analysis/head_masking/{{model}}.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn head-masking --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
            " --scores {input.scores} --out {output} --threads {threads} > {log} 2>&1"


if LKG:

    rule head_patterns:  # LKG-RALM Fig. 2: every head edge / uniform / middle-focused (App. D)
        input:
            model=lambda w: model_dir(w.model),
            base=lambda w: model_dir(model_base(w.model)),
            split=patterns_split(),
        output:
            patterns_file("{model}"),
        params:
            spec=lambda w: as_json(head_patterns_spec(w.model)),
        threads: threads(CFG, "evaluate")
        resources:
            **rule_resources(CFG, "evaluate"),
        retries: retries(CFG, "evaluate")
        log:
            f"{OUT}/logs/analysis/head_patterns/{{model}}.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn head-patterns --spec {params.spec:q}"
            " --model-dir {input.model} --base-dir {input.base} --split-dir {input.split}"
            " --out {output} --threads {threads} > {log} 2>&1"
