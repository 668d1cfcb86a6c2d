import pytest
from transformers import AutoTokenizer

from tests.modeling.family_tokenizers import family_tokenizer
from zoomattn.data.records import make_record
from zoomattn.data.tasks import render_prompt
from zoomattn.data.tokenizer import build_tokenizer
from zoomattn.evaluation.attention_share import document_spans, encoded_prompt
from zoomattn.modeling.boundary import (
    BOUNDARY_TOKENS,
    add_boundary_tokens,
    has_boundary_tokens,
    mark_record,
)
from zoomattn.modeling.chat import FAMILIES, prompt_ids, prompt_text

WORDS = (
    "a b c paris is the capital of france rome what ? and it document question answer : .".split()
)
RECORD = make_record(
    id="r0",
    family="conversational",
    documents=["paris is the capital of france", "rome is the capital"],
    golden=[0],
    history=[["what is paris", "the capital"]],
    question="and rome ?",
    answers=["the capital"],
)


def test_markers_are_added_once_with_stable_ids_and_survive_saving(tmp_path):
    tok = build_tokenizer(WORDS)
    n = len(tok)
    assert not has_boundary_tokens(tok)
    ids = add_boundary_tokens(tok)
    assert ids == [n, n + 1, n + 2, n + 3] and len(tok) == n + 4
    assert add_boundary_tokens(tok) == ids and len(tok) == n + 4
    assert has_boundary_tokens(tok)
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert has_boundary_tokens(again) and add_boundary_tokens(again) == ids


def test_our_tokenizer_reads_each_marker_as_one_special_token():
    tok = build_tokenizer(WORDS)
    d, e_i, *_ = add_boundary_tokens(tok)
    ids = tok("[d] a b [e_i]", add_special_tokens=False)["input_ids"]
    assert ids == [d, tok.convert_tokens_to_ids("a"), tok.convert_tokens_to_ids("b"), e_i]
    assert tok.decode(ids, skip_special_tokens=True) == "a b"


def test_marking_wraps_documents_and_the_current_question_only():
    marked = mark_record(RECORD)
    assert marked["documents"] == [
        "[d] paris is the capital of france [e_i]",
        "[d] rome is the capital [e_i]",
    ]
    assert marked["question"] == "[q] and rome ? [e_q]"
    assert marked["history"] == RECORD["history"]
    assert RECORD["question"] == "and rome ?"  # the record itself is left alone


def test_a_tokenizer_without_markers_renders_the_prompt_unchanged():
    tok = build_tokenizer(WORDS)
    assert prompt_text(tok, RECORD) == ([tok.bos_token_id], render_prompt(RECORD))
    assert "[d]" not in render_prompt(RECORD)


def test_a_tokenizer_with_markers_renders_the_marked_record():
    tok = build_tokenizer(WORDS)
    d, e_i, q, e_q = add_boundary_tokens(tok)
    _, text = prompt_text(tok, RECORD)
    assert text == render_prompt(mark_record(RECORD))
    ids = prompt_ids(tok, RECORD)
    assert [ids.count(m) for m in (d, e_i, q, e_q)] == [2, 2, 1, 1]
    assert tok.unk_token_id not in ids


@pytest.mark.parametrize("marked", [False, True])
def test_attention_share_still_finds_each_document_inside_the_prompt(marked):
    tok = build_tokenizer(WORDS)
    if marked:
        add_boundary_tokens(tok)
    p = encoded_prompt(tok, RECORD)
    assert [p.text[a:b] for a, b in p.doc_chars] == RECORD["documents"]
    ids, spans = document_spans(tok, RECORD)
    assert [tok.decode(ids[a:b]) for a, b in spans] == RECORD["documents"]


def test_a_chat_tokenizer_puts_single_marker_tokens_into_the_user_turn():
    tok = family_tokenizer("llama3", WORDS)
    tok.chat_template = FAMILIES["llama3"].template
    plain = prompt_ids(tok, RECORD)
    ids = add_boundary_tokens(tok)
    marked = prompt_ids(tok, RECORD)
    assert [marked.count(m) for m in ids] == [2, 2, 1, 1]
    assert [t for t in marked if t not in ids] == plain  # the markers are all that is added
    assert tok.convert_ids_to_tokens(ids) == list(BOUNDARY_TOKENS)
