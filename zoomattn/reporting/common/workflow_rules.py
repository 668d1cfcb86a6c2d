"""The landing page's workflow overview in `snakemake --report`: each rule once.

Snakemake's own graph draws one node per rule and dependency level (37 for the smoke grid, most
names repeated); this table lists each rule of the run once, grouped by its rules file
(workflow/rules/*.smk) in the order the jobs run, with its number of jobs and the rules whose
outputs it reads. Each rule links to Snakemake's panel of its code.
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path


def _rule_link(rule: str) -> str:
    """A link that opens the rule's panel of the report (Snakemake's own javascript: links)."""
    name = html.escape(rule)
    show = f"app.setView({{navbarMode:'ruleinfo',ruleinfo:'{name}'}})"
    return f'<a href="javascript:{show}">{name}</a>'


def _rules(levels, dependencies):
    """rule -> (rules file, first level, jobs, rules it reads from), for rules with outputs: the
    target rule (``all``) makes no file and has no panel."""
    info: dict = {}
    for depth, level in enumerate(levels):
        for job in level:
            if not job.output:
                continue
            rule = job.rule.name
            group = Path(job.rule.snakefile).name
            info.setdefault(rule, {"group": group, "first": depth, "jobs": 0, "reads": set()})
            info[rule]["jobs"] += 1
            info[rule]["reads"] |= {dep.rule.name for dep in dependencies.get(job, ())}
    return info


def rule_table_html(levels, dependencies) -> str:
    """One html table (no line breaks: it goes into an RST raw block) of the DAG's rules, a
    header row per rules file.

    ``levels`` is the DAG's jobs level by level (``dag.toposorted()``), ``dependencies`` maps a
    job to the jobs it reads from (``dag.dependencies``)."""
    info = _rules(levels, dependencies)
    groups: dict[str, list[str]] = defaultdict(list)
    for rule in sorted(info, key=lambda r: (info[r]["first"], r)):
        groups[info[rule]["group"]].append(rule)
    rows = []
    for group, rules in groups.items():
        rows.append(f'<tr><th colspan="3">{html.escape(group)}</th></tr>')
        for rule in rules:
            reads = ", ".join(sorted(info[rule]["reads"]))
            cells = [_rule_link(rule), str(info[rule]["jobs"]), html.escape(reads)]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in ("rule", "jobs", "reads the outputs of"))
    return (
        f'<table class="zoomattn-rules"><thead><tr>{header}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
