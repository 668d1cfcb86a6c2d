if SYNTHETIC:

    rule world:
        output:
            directory(WORLD),
        params:
            spec=lambda w: as_json(SPECS.world()),
        threads: DATA_JOB.threads
        resources:
            **DATA_JOB.resources,
        retries: DATA_JOB.retries
        log:
            log_file("data/world"),
        conda:
            "../../envs/data.yaml"
        shell:
            "python -m zoomattn world --spec {params.spec:q} --out {output} > {log} 2>&1"


rule train_data:  # the shared training set, or a study's (golden documents + hard distractors)
    input:
        unpack(world_input),
    output:
        directory(LAYOUT.data_dir("{train_set}")),
    params:
        spec=lambda w: as_json(SPECS.train_data(w.train_set)),
        world=world_arg,
    threads: DATA_JOB.threads
    resources:
        **DATA_JOB.resources,
    retries: DATA_JOB.retries
    log:
        log_file("data/{train_set}"),  # data/train.log, data/train-<study>/<placement>.log
    conda:
        "../../envs/data.yaml"
    shell:
        "python -m zoomattn train-data --spec {params.spec:q}"
        " {params.world} --out {output} > {log} 2>&1"


rule eval_data:  # one split of a benchmark of any study (zoomattn/splits.py)
    input:
        unpack(world_input),
    output:
        directory(LAYOUT.split_dir("{benchmark}", "{split}")),
    params:
        spec=lambda w: as_json(SPECS.eval_data(w.benchmark, w.split)),
        world=world_arg,
    threads: DATA_JOB.threads
    resources:
        **DATA_JOB.resources,
    retries: DATA_JOB.retries
    log:
        log_file("data/eval_{benchmark}_{split}"),
    conda:
        "../../envs/data.yaml"
    shell:
        "python -m zoomattn eval-data --spec {params.spec:q}"
        " {params.world} --out {output} > {log} 2>&1"
