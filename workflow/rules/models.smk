if SYNTHETIC:

    rule pretrain:
        input:
            world=WORLD,
        output:
            directory(BASE),
        params:
            spec=lambda w: as_json(SPECS.pretrain()),
            ckpt=f"{OUT}/checkpoints/base",
        priority: 20  # everything after the data waits for it: start it as soon as the world exists
        threads: PRETRAIN_JOB.threads
        resources:
            **PRETRAIN_JOB.resources,
        retries: PRETRAIN_JOB.retries
        log:
            log_file("pretrain/base"),
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn pretrain --spec {params.spec:q}"
            " --world-dir {input.world} --out {output} --ckpt {params.ckpt} --threads {threads} > {log} 2>&1"

else:

    rule base_model:  # a hub or local model: resolved, checked against config, recorded
        output:
            directory(model_dir("{base}")),
        params:
            spec=lambda w: as_json(SPECS.base_model(w.base)),
        priority: 20
        threads: PRETRAIN_JOB.threads
        resources:
            **PRETRAIN_JOB.resources,
        retries: PRETRAIN_JOB.retries
        log:
            log_file("pretrain/{base}"),
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn base-model --spec {params.spec:q} --out {output}"
            " > {log} 2>&1"


rule finetune:
    input:
        unpack(finetune_input),
    output:
        directory(model_dir("{trained}")),
    params:
        spec=lambda w: as_json(SPECS.finetune(w.trained)),
        ckpt=lambda w: f"{OUT}/checkpoints/{w.trained}",
        margin=optional_arg("margin"),
        heads=optional_arg("heads"),
        patterns=optional_arg("patterns"),
        # derived from the resources: shown, never a reason to rerun; the threads asked for
        # (a dry run scales its own down to the local cores)
        launch=lambda w, resources: launch_message(
            w.trained, finetune_processes(w), FINETUNES.threads(w), resources
        ),
    message:
        "{params.launch}"  # several processes: the launcher and the request; one: Snakemake's own
    priority: 10  # the critical path: start every fine-tune before the short evaluation jobs
    threads: FINETUNES.threads
    resources:
        **FINETUNES.resources,
    retries: FINETUNES.retries
    log:
        log_file("finetune/{trained}"),
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m zoomattn finetune --spec {params.spec:q}"
        " --data-dir {input.data} --base-dir {input.base} --out {output} --ckpt {params.ckpt}"
        " {params.margin} {params.heads} {params.patterns} --threads {threads} > {log} 2>&1"


if SELECTION:

    rule select_heads:  # MuDAF's target heads, from its base model's retrieval-head scores
        input:
            scores=LAYOUT.heads_file(SELECTION.base),
        output:
            LAYOUT.selection_file("{trained}"),
        params:
            spec=lambda w: as_json(SPECS.select_heads(w.trained)),
        threads: 1
        resources:
            **DATA_JOB.resources,
        log:
            log_file("select_heads/{trained}"),
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m zoomattn select-heads --spec {params.spec:q}"
            " --scores {input.scores} --out {output} > {log} 2>&1"
