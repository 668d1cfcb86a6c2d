# One report per study: `python -m zoomattn report --study S` runs zoomattn/reporting/<S>/ on the
# files the study's Study names by kind (zoomattn/layout.py: Layout.report_inputs).


rule report:
    input:
        unpack(report_input),
    output:
        report_flag(),
    params:
        inputs=report_inputs_arg,
    log:
        log_file("report_{study}"),
    conda:
        "../../envs/report.yaml"
    shell:
        "python -m zoomattn report --study {wildcards.study} --spec-file {input.spec}"
        " --inputs {params.inputs} --out {output} > {log} 2>&1"
