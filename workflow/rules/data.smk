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
            "python -m zoomattn world --spec {params.spec:q} --results {RESULTS} --out {output} > {log} 2>&1"


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
        "python -m zoomattn train-data --spec {params.spec:q} --results {RESULTS}"
        " {params.world} --out {output} > {log} 2>&1"


rule eval_data:
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
        "python -m zoomattn eval-data --spec {params.spec:q} --results {RESULTS}"
        " {params.world} --out {output} > {log} 2>&1"


if RECT:

    rule rect_train_data:
        input:
            unpack(world_input),
        output:
            directory(f"{OUT}/data/train-rectification/{{placement}}"),
        params:
            spec=lambda w: as_json(rect_data_spec(w.placement)),
            world=world_arg,
        threads: threads(CFG, "data")
        resources:
            **rule_resources(CFG, "data"),
        retries: retries(CFG, "data")
        log:
            f"{OUT}/logs/data/train-rectification_{{placement}}.log",
        conda:
            "../../envs/data.yaml"
        shell:
            "python -m zoomattn train-data --spec {params.spec:q} --results {RESULTS}"
            " {params.world} --out {output} > {log} 2>&1"

    rule rect_eval_data:
        input:
            unpack(world_input),
        output:
            directory(f"{OUT}/data/eval/{{rbenchmark}}/{{placement}}"),
        params:
            spec=lambda w: as_json(rect_data_spec(w.placement, w.rbenchmark)),
            world=world_arg,
        threads: threads(CFG, "data")
        resources:
            **rule_resources(CFG, "data"),
        retries: retries(CFG, "data")
        log:
            f"{OUT}/logs/data/eval_{{rbenchmark}}_{{placement}}.log",
        conda:
            "../../envs/data.yaml"
        shell:
            "python -m zoomattn eval-data --spec {params.spec:q} --results {RESULTS}"
            " {params.world} --out {output} > {log} 2>&1"
