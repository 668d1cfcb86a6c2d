if SYNTHETIC:

    rule pretrain:
        input:
            world=WORLD,
        output:
            directory(BASE),
        params:
            spec=lambda w: as_json(pretrain_spec()),
            ckpt=f"{OUT}/checkpoints/base",
        priority: 20  # everything after the data waits for it: start it as soon as the world exists
        threads: threads(CFG, "pretrain")
        resources:
            **rule_resources(CFG, "pretrain"),
        retries: retries(CFG, "pretrain")
        log:
            f"{OUT}/logs/pretrain/base.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn pretrain --spec {params.spec:q}"
            " --world-dir {input.world} --out {output} --ckpt {params.ckpt} --threads {threads} > {log} 2>&1"

else:

    rule base_model:  # a hub or local model: resolved, checked against config, recorded
        output:
            directory(f"{OUT}/models/{{base}}"),
        params:
            spec=lambda w: as_json(base_model_spec(w.base)),
        priority: 20
        threads: threads(CFG, "pretrain")
        resources:
            **rule_resources(CFG, "pretrain"),
        retries: retries(CFG, "pretrain")
        log:
            f"{OUT}/logs/pretrain/{{base}}.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn base-model --spec {params.spec:q} --out {output}"
            " > {log} 2>&1"


rule finetune:
    input:
        unpack(finetune_input),
    output:
        directory(f"{OUT}/models/{{trained}}"),
    params:
        spec=lambda w: as_json(finetune_spec(w.trained)),
        ckpt=lambda w: f"{OUT}/checkpoints/{w.trained}",
        margin=lambda w, input: f"--margin {input.margin}" if "margin" in input.keys() else "",
        heads=lambda w, input: f"--heads {input.heads}" if "heads" in input.keys() else "",
        patterns=lambda w, input: f"--patterns {input.patterns}" if "patterns" in input.keys() else "",
    priority: 10  # the critical path: start every fine-tune before the short evaluation jobs
    threads: threads(CFG, "finetune")
    resources:
        **rule_resources(CFG, "finetune"),
    retries: retries(CFG, "finetune")
    log:
        f"{OUT}/logs/finetune/{{trained}}.log",
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zoomattn finetune --spec {params.spec:q}"
        " --data-dir {input.data} --base-dir {input.base} --out {output} --ckpt {params.ckpt}"
        " {params.margin} {params.heads} {params.patterns} --threads {threads} > {log} 2>&1"


if MUDAF:

    rule select_heads:  # MuDAF's target heads, from its base model's retrieval-head scores
        input:
            scores=heads_file(MUDAF_BASE),
        output:
            selection_file("{trained}"),
        params:
            spec=lambda w: as_json(selection_spec(w.trained)),
        threads: 1
        resources:
            **rule_resources(CFG, "data"),
        log:
            f"{OUT}/logs/select_heads/{{trained}}.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn select-heads --spec {params.spec:q}"
            " --scores {input.scores} --out {output} > {log} 2>&1"
