"""Open-domain QA datasets of the attention-rectification, MuDAF and LKG-RALM papers.

=================  =========================================  ===================================
builder            what it reads                              paper (docs/papers.md)
=================  =========================================  ===================================
dpr_nq             DPR retriever results ``nq-{split}.json``  rectification (§2)
dpr_triviaqa       the same, ``trivia-{split}.json``          rectification (§2)
hotpotqa           raw HotpotQA JSON (or hub parquet)         rectification (§2)
2wiki              raw 2WikiMultihopQA JSON (or its zip)      rectification (§2)
asqa               ALCE ``asqa_eval_dpr_top100.json``         rectification (§2)
mudaf_hotpotqa     HotpotQA train + hard negatives            MuDAF (§3)
lkg_<name>         retrieval results, nq / triviaqa /         LKG-RALM (§4)
                   hotpotqa / popqa / 2wiki
=================  =========================================  ===================================

Formats, golden documents and options are in each builder's docstring (open_qa_retrieved.py,
open_qa_multihop.py); the shared helpers in open_qa_base.py. Formats: docs/datasets/open_qa.md.
"""

from __future__ import annotations

from zoomattn.data.sources import open_qa_multihop, open_qa_retrieved

BUILDERS = {**open_qa_retrieved.BUILDERS, **open_qa_multihop.BUILDERS}
