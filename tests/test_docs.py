"""The repository documents itself: no tracked text names a place on one machine, nothing cites a
reference file that lives outside the repository, and every citation of ``docs/papers.md §N`` or
``docs/notes.md §N`` names a section that exists.

What counts as a machine path (``machine_paths``):
- any absolute path under a root that holds people's or sites' own trees (``/work``, ``/home``,
  ``/Users``, ``/root``, ``/mnt``, ``/media``, ``/scratch``, ``/gpfs``, ``/lustre``, ``/nfs``,
  ``/shared``): such a path exists on one machine only;
- a path *into* ``/tmp`` deeper than one name (``/tmp/a/b``): it points inside a tree that
  someone made there (a clone, a build, a download).
``/tmp`` itself and ``/tmp/<name>`` are allowed: the system's temporary directory has the same
name on every POSIX machine, and the code names a folder there where every process on a machine
must find the same one (``zoomattn/gpus.py``'s ``/tmp/zoomattn-gpus``, the card locks), as a
usage line may name a scratch output (``--out /tmp/bench``). A path counts only where it starts a
word (after a space, quote, backtick, bracket, ``=`` or ``:``), so ``{OUT}/data/...`` or
``https://host/home/...`` are not absolute paths of this machine.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from zoomattn.config import ROOT

TEXT_SUFFIXES = {".py", ".md", ".smk", ".yaml", ".yml", ".toml", ".sh", ".rst", ".txt", ".in"}
TEXT_NAMES = {"Snakefile", "Makefile", "run", "setup", ".gitignore"}  # .ci/run, bin/setup
THIS_FILE = "tests/test_docs.py"  # it spells out the patterns it forbids

MACHINE_ROOTS = "work|home|Users|root|mnt|media|scratch|gpfs|lustre|nfs|shared"
_STARTS_A_WORD = r"(?:^|(?<=[\s'\"`(\[{=:,]))"
_MACHINE_PATH = re.compile(_STARTS_A_WORD + rf"(/(?:{MACHINE_ROOTS})/[^\s'\"`)\]]*)")
_DEEP_TMP = re.compile(_STARTS_A_WORD + r"(/tmp/[^/\s'\"`)\]]+/[^/\s'\"`)\]]+[^\s'\"`)\]]*)")
_EXTERNAL_REFERENCE = re.compile(r"\b(?:GRID|FACTS)\.md\b")

SECTION_ID = r"§(\d+(?:\.\d+)*)"
_HEADING = re.compile(rf"^#+\s+{SECTION_ID}[\s.]", re.MULTILINE)
# a citation (plain or a Markdown link), and the sections chained onto it: "docs/papers.md §1 and
# §3", "§2, §4", "§1-2", "[docs/notes.md](docs/notes.md) §4"
_CITATION = re.compile(
    rf"docs/(papers|notes)\.md(?:\]\([^)]*\)|\))?\s+{SECTION_ID}((?:\s*(?:,|and|or|-)\s*§?\d+(?:\.\d+)*)*)"
)
_CHAINED = re.compile(r"(\d+(?:\.\d+)*)")


def machine_paths(text: str) -> list[str]:
    """The absolute paths of one machine that ``text`` names (the rule: the module docstring)."""
    return _MACHINE_PATH.findall(text) + _DEEP_TMP.findall(text)


def sections(markdown: str) -> set[str]:
    """The section ids of a document whose headings start with ``§N`` or ``§N.M``."""
    return set(_HEADING.findall(markdown))


def citations(text: str) -> list[tuple[str, str]]:
    """Every (document, section) that ``text`` cites as ``docs/<document>.md §N``."""
    found = []
    for document, first, chained in _CITATION.findall(text):
        found += [(document, first)] + [(document, s) for s in _CHAINED.findall(chained)]
    return found


def tracked_files() -> list[str]:
    """Every tracked file of the repository, by its path from the root."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout, no tracked files to read: {listed.stderr.strip()}")
    return listed.stdout.splitlines()


def tracked_text_files() -> dict[str, str]:
    """Every tracked text file's text, by its path from the root."""
    files = {}
    for name in tracked_files():
        path = ROOT / name
        if (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES) and path.is_file():
            files[name] = path.read_text(encoding="utf-8")
    return files


def offending_lines(files: dict[str, str], find) -> list[str]:
    return [
        f"{name}:{number}: {', '.join(found)}"
        for name, text in files.items()
        if name != THIS_FILE
        for number, line in enumerate(text.splitlines(), start=1)
        if (found := find(line))
    ]


# ---- the rules themselves, on hand-written lines ----


def test_machine_path_rule_flags_site_trees_and_paths_deep_in_tmp():
    assert machine_paths("the paper at `/work/shared/papers/x.txt`") == [
        "/work/shared/papers/x.txt"
    ]
    assert machine_paths("cd /home/alice/zoomattn && make") == ["/home/alice/zoomattn"]
    assert machine_paths('path = "/tmp/w_docs/results/x.json"') == ["/tmp/w_docs/results/x.json"]


def test_machine_path_rule_allows_tmp_scratch_names_and_relative_paths():
    assert machine_paths('LOCK_DIR = "/tmp/zoomattn-gpus"  # like /tmp') == []
    assert machine_paths("python x.py --out /tmp/bench   # scratch") == []
    assert machine_paths("a lock per card in `/tmp/zoomattn-gpus/`") == []
    assert machine_paths('f"{OUT}/data/eval/{b}" results/tiny/data/world') == []
    assert machine_paths("https://example.org/home/page and hf.co/datasets/x") == []


def test_section_headings_and_citations_are_read_with_their_subsections():
    assert sections("# Title\n## §0. Words\n### §1.2 Grid\n## Not a section §9\n") == {"0", "1.2"}
    assert citations("(docs/papers.md §2, docs/notes.md §4.1)") == [
        ("papers", "2"),
        ("notes", "4.1"),
    ]
    assert citations("use: docs/papers.md §1 (OpAmp) and §3") == [("papers", "1")]
    assert citations("see [docs/notes.md](docs/notes.md) §4.") == [("notes", "4")]
    assert citations("docs/papers.md §1 and §3; docs/papers.md §2, §4") == [
        ("papers", "1"),
        ("papers", "3"),
        ("papers", "2"),
        ("papers", "4"),
    ]


# ---- the repository ----


def test_no_tracked_text_file_names_an_absolute_path_of_a_machine():
    offenders = offending_lines(tracked_text_files(), machine_paths)
    assert not offenders, "machine paths (see tests/test_docs.py for the rule):\n" + "\n".join(
        offenders
    )


def test_no_tracked_text_file_cites_reference_files_outside_the_repository():
    offenders = offending_lines(tracked_text_files(), _EXTERNAL_REFERENCE.findall)
    assert not offenders, (
        "cite docs/papers.md §N (the papers) or docs/notes.md §N (our measured facts):\n"
        + "\n".join(offenders)
    )


def test_every_papers_and_notes_citation_names_a_section_that_exists():
    files = tracked_text_files()
    known = {doc: sections(files[f"docs/{doc}.md"]) for doc in ("papers", "notes")}
    missing = [
        f"{name}: docs/{doc}.md §{section}"
        for name, text in files.items()
        if name != THIS_FILE
        for doc, section in citations(text)
        if section not in known[doc]
    ]
    assert not missing, "cited sections that do not exist:\n" + "\n".join(missing)


def test_every_relative_link_of_the_docs_points_to_a_tracked_file():
    files, tracked = tracked_text_files(), set(tracked_files())
    broken = []
    for name, text in files.items():
        if not name.endswith(".md"):
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (ROOT / name).parent / target
            inside = path.resolve().is_relative_to(ROOT.resolve())
            relative = str(path.resolve().relative_to(ROOT.resolve())) if inside else target
            if not (relative in tracked or any(f.startswith(relative + "/") for f in tracked)):
                broken.append(f"{name}: {target}")
    assert not broken, "links to files that are not in the repository:\n" + "\n".join(broken)


def test_readme_names_the_test_command_that_ci_runs():
    files = tracked_text_files()
    assert "make test" in files["README.md"]
    assert files[".ci/run"].strip().splitlines()[-1] == "make test"
