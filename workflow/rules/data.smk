if SYNTHETIC:

    rule world:
        output:
            directory(WORLD),
        params:
            spec=lambda w: as_json(world_spec()),
        threads: threads(CFG, "data")
        resources:
            **rule_resources(CFG, "data"),
        retries: retries(CFG, "data")
        log:
            f"{OUT}/logs/data/world.log",
        conda:
            "../../envs/data.yaml"
        shell:
            "python -m zoomattn world --spec {params.spec:q} --out {output} > {log} 2>&1"


rule train_data:
    input:
        unpack(world_input),
    output:
        directory(f"{OUT}/data/train"),
    params:
        spec=lambda w: as_json(train_data_spec()),
        world=world_arg,
    threads: threads(CFG, "data")
    resources:
        **rule_resources(CFG, "data"),
    retries: retries(CFG, "data")
    log:
        f"{OUT}/logs/data/train.log",
    conda:
        "../../envs/data.yaml"
    shell:
        "python -m zoomattn train-data --spec {params.spec:q}"
        " {params.world} --out {output} > {log} 2>&1"


rule eval_data:
    wildcard_constraints:  # an OpAmp benchmark: a leaderboard set is r<noise> too (study_eval_data)
        benchmark=_alternatives(CFG["benchmarks"]),
    input:
        unpack(world_input),
    output:
        directory(f"{OUT}/data/eval/{{benchmark}}/r{{noise}}"),
    params:
        spec=lambda w: as_json(eval_data_spec(w.benchmark, w.noise)),
        world=world_arg,
    threads: threads(CFG, "data")
    resources:
        **rule_resources(CFG, "data"),
    retries: retries(CFG, "data")
    log:
        f"{OUT}/logs/data/eval_{{benchmark}}_r{{noise}}.log",
    conda:
        "../../envs/data.yaml"
    shell:
        "python -m zoomattn eval-data --spec {params.spec:q}"
        " {params.world} --out {output} > {log} 2>&1"


if STUDIES:

    rule study_train_data:  # a side study's training set: golden documents plus hard distractors
        input:
            unpack(world_input),
        output:
            directory(f"{OUT}/data/train-{{study}}/{{placement}}"),
        params:
            spec=lambda w: as_json(study_data_spec(w.study, w.placement)),
            world=world_arg,
        threads: threads(CFG, "data")
        resources:
            **rule_resources(CFG, "data"),
        retries: retries(CFG, "data")
        log:
            f"{OUT}/logs/data/train-{{study}}_{{placement}}.log",
        conda:
            "../../envs/data.yaml"
        shell:
            "python -m zoomattn train-data --spec {params.spec:q}"
            " {params.world} --out {output} > {log} 2>&1"

    rule study_eval_data:
        input:
            unpack(world_input),
        output:
            directory(f"{OUT}/data/eval/{{sbenchmark}}/{{ssplit}}"),
        params:
            spec=lambda w: as_json(
                study_data_spec(grid.study_of_benchmark(CFG, w.sbenchmark), w.ssplit, w.sbenchmark)
            ),
            world=world_arg,
        threads: threads(CFG, "data")
        resources:
            **rule_resources(CFG, "data"),
        retries: retries(CFG, "data")
        log:
            f"{OUT}/logs/data/eval_{{sbenchmark}}_{{ssplit}}.log",
        conda:
            "../../envs/data.yaml"
        shell:
            "python -m zoomattn eval-data --spec {params.spec:q}"
            " {params.world} --out {output} > {log} 2>&1"
