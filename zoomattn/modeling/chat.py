"""How a record becomes token ids for each model family: prompt, training target, stop tokens.

Our tiny tokenizer has no chat template: its prompt is ``<bos>`` + ``render_prompt(record)`` and
the target is `` answer <eos>``. A hub tokenizer is used through its chat template (the model's
own, or the family's below when a base model ships none, set when the base is prepared): the
record becomes a user turn (instruction, numbered documents, options, question; a conversation's
earlier turns become earlier user/assistant turns) and the target is the answer followed by the
family's end-of-turn token. Generation stops at every end token of the family: Llama-3 ends a turn
with ``<|eot_id|>`` and a text with ``<|end_of_text|>``; stopping at only one runs on past answers.
A tokenizer with LKG-RALM's boundary tokens wraps each document and the question in them.
"""

from __future__ import annotations

from dataclasses import dataclass

from zoomattn.data.tasks import Record, render_prompt
from zoomattn.modeling.boundary import has_boundary_tokens, mark_record


@dataclass(frozen=True)
class ChatFamily:
    name: str
    marker: str  # a token only this family's tokenizers have: how a tokenizer is recognised
    turn_end: str  # appended to every training target
    stop_tokens: tuple[str, ...]  # generation ends at any of these
    template: str  # Jinja chat template for base models whose tokenizer has none


FAMILIES = {
    f.name: f
    for f in (
        ChatFamily(
            "llama3",
            "<|eot_id|>",
            "<|eot_id|>",
            ("<|eot_id|>", "<|end_of_text|>"),
            "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
            "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
            "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
            "{% endif %}",
        ),
        ChatFamily(
            "chatml",  # Qwen2 / Qwen2.5
            "<|im_end|>",
            "<|im_end|>",
            ("<|im_end|>", "<|endoftext|>"),
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        ),
        ChatFamily(
            "mistral",  # Mistral-7B-Instruct-v0.2: [INST] is plain text, turns end with </s>
            "[INST]",
            "</s>",
            ("</s>",),
            "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
            "[INST] {{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}"
            "{% endif %}{% endfor %}",
        ),
    )
}


def _token_id(tok, token: str) -> int | None:
    i = tok.convert_tokens_to_ids(token)
    return None if i is None or i == tok.unk_token_id else i


def family_of(tok) -> ChatFamily | None:
    """The chat family of a hub tokenizer; None for a tokenizer without a chat template (ours)."""
    if tok.chat_template is None:
        return None
    for family in FAMILIES.values():
        if _token_id(tok, family.marker) is not None or family.marker in tok.chat_template:
            return family
    raise ValueError(
        f"tokenizer {tok.name_or_path!r}: its chat template matches no known family "
        f"({', '.join(FAMILIES)}); add one to zoomattn/modeling/chat.py"
    )


def stop_ids(tok) -> list[int]:
    family = family_of(tok)
    if family is None:
        return [tok.eos_token_id]
    ids = [_token_id(tok, t) for t in family.stop_tokens]
    missing = [t for t, i in zip(family.stop_tokens, ids, strict=True) if i is None]
    if missing:
        raise ValueError(f"tokenizer {tok.name_or_path!r} ({family.name}) lacks {missing}")
    return ids


def user_text(record: Record) -> str:
    """The first user turn: instruction, numbered documents, options, first question."""
    parts = [record["instruction"]] if record.get("instruction") else []
    parts += [f"Document [{i + 1}]: {d}" for i, d in enumerate(record["documents"])]
    first = record["history"][0][0] if record["history"] else record["question"]
    options = record.get("options") or []
    if options and not record["history"]:
        first += "\n" + "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))
    if record["family"] == "chat" and not parts:  # plain chat data (Tulu): the turn as it is
        return first
    if record.get("placement") == "reverse":  # the question before the documents
        parts.insert(1 if record.get("instruction") else 0, f"Question: {first}")
    else:
        parts.append(f"Question: {first}")
    return "\n\n".join(parts)


def messages(record: Record) -> list[dict]:
    turns = [{"role": "user", "content": user_text(record)}]
    for i, (_, answer) in enumerate(record["history"]):
        turns.append({"role": "assistant", "content": answer})
        later = record["history"][i + 1][0] if i + 1 < len(record["history"]) else None
        turns.append({"role": "user", "content": later or record["question"]})
    return turns


def prompt_text(tok, record: Record) -> tuple[list[int], str]:
    """The prompt as (ids before the text, text): tokenising the text and prepending the ids gives
    ``prompt_ids``; the text lets callers find where each document sits (attention share). With
    LKG-RALM's boundary tokens in the tokenizer, the record is marked (modeling/boundary.py)."""
    if has_boundary_tokens(tok):
        record = mark_record(record)
    if family_of(tok) is None:
        return [tok.bos_token_id], render_prompt(record)
    return [], tok.apply_chat_template(messages(record), tokenize=False, add_generation_prompt=True)


def prompt_ids(tok, record: Record) -> list[int]:
    prefix, text = prompt_text(tok, record)
    return prefix + tok(text, add_special_tokens=False)["input_ids"]


def target_ids(tok, record: Record) -> list[int]:
    family = family_of(tok)
    if family is None:
        return tok(" " + record["answers"][0], add_special_tokens=False)["input_ids"] + [
            tok.eos_token_id
        ]
    answer = tok(record["answers"][0], add_special_tokens=False)["input_ids"]
    return answer + [_token_id(tok, family.turn_end)]
