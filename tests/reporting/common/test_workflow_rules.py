import re
from types import SimpleNamespace

from zoomattn.reporting.common.workflow_rules import rule_table_html


class _Job:  # what the table reads of a Snakemake job (hashable by identity, like one)
    def __init__(self, rule: str, rules_file: str, output=("out",)):
        self.rule = SimpleNamespace(name=rule, snakefile=f"/repo/workflow/rules/{rules_file}")
        self.output = list(output)


def _dag():
    """A small DAG whose rules recur on several levels, as Snakemake's graph shows them."""
    world = _Job("world", "data.smk")
    data = [_Job("eval_data", "data.smk") for _ in range(2)]
    base_eval = _Job("evaluate", "evaluate.smk")
    tune = _Job("finetune", "models.smk")
    tuned_eval = _Job("evaluate", "evaluate.smk")
    target = _Job("all", "Snakefile", output=())
    levels = [[world], data, [base_eval, tune], [tuned_eval], [target]]
    dependencies = {
        data[0]: {world: {"w"}},
        data[1]: {world: {"w"}},
        base_eval: {data[0]: {"d"}},
        tune: {world: {"w"}},
        tuned_eval: {data[1]: {"d"}, tune: {"m"}},
        target: {base_eval: {"e"}, tuned_eval: {"e"}},
    }
    return levels, dependencies


def _rows(table: str) -> list[list[str]]:
    return [
        re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)
        for row in re.findall(r"<tr>(.*?)</tr>", table)
    ]


def test_each_rule_appears_once_with_its_job_count_and_the_rules_it_reads():
    rows = _rows(rule_table_html(*_dag()))
    names = [re.sub(r"<[^>]+>", "", row[0]) for row in rows if len(row) == 3]
    assert names == ["rule", "world", "eval_data", "evaluate", "finetune"]
    evaluate = next(row for row in rows if ">evaluate<" in row[0])
    assert evaluate[1:] == ["2", "eval_data, finetune"]


def test_rules_are_grouped_under_their_rules_file_in_run_order():
    table = rule_table_html(*_dag())
    headers = re.findall(r'<th colspan="3">(.*?)</th>', table)
    assert headers == ["data.smk", "evaluate.smk", "models.smk"]  # by the first job of each


def test_the_target_rule_without_outputs_is_left_out_and_rules_link_to_their_panel():
    table = rule_table_html(*_dag())
    assert ">all<" not in table and "Snakefile" not in table
    assert "javascript:app.setView({navbarMode:'ruleinfo',ruleinfo:'finetune'})" in table
    assert "\n" not in table  # it goes into an RST raw block, line by line indented
