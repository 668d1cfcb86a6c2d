"""LKG-RALM (docs/papers.md §4, paper §4): boundary embeddings, estimator pass, relevance-guided
fusion.

``attach`` hangs one ``LkgModule`` at the decoder's ``zoom`` (the trainable boundary embeddings
and the ``PassageEstimator``; saved with the other ``.zoom.`` parameters) and an
``LkgLayerAttention`` under every layer's ``self_attn.zoom``. A forward pre-hook on the decoder
does, for every call that comes with token ids:

- embeddings: the ids' embeddings, with the rows of the four markers taken from ``boundary``
  (their ids may lie past the embedding matrix, which is never resized; such ids look up row 0
  before being overwritten);
- at prefill (no cache, or an empty one): the segments of ``kernel.segment_ids``, every token
  the call's 2-D attention mask hides OTHER (padding, on either side); then the
  estimator pass, the same decoder called once more on the same embeddings under the blocked
  bidirectional ``estimator_mask`` (its layers record each ``[e_i]`` row's attention entropy, and
  forward hooks every layer's output at ``[e_i]`` and ``[e_q]``), giving r, c and α (eq. 5); or,
  for the w/o-LPR ablation, α from a lexical reranker;
- while decoding: the new positions are TAIL.

Which mode a layer runs in travels with its mask: the estimator pass hands the decoder the 4-D
estimator mask, tagged ``lkg_estimate``. Everything else a layer reads (segments, log α) stays
fixed between a forward and its backward, so gradient checkpointing's recomputation repeats the
forward exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from zoomattn.attention import kernels
from zoomattn.attention.interface import attention_modules
from zoomattn.attention.math import attention_probs, last_row_probs, sdpa
from zoomattn.methods.lkg.config import LkgConfig
from zoomattn.methods.lkg.estimator import PassageEstimator, guidance, passage_entropy
from zoomattn.methods.lkg.flex import flex_relevance_attention
from zoomattn.methods.lkg.kernel import (
    QUESTION,
    TAIL,
    Boundary,
    call_mask,
    estimator_mask,
    fusion_bias,
    n_passages,
    relevance_attention,
    relevance_last_row,
    segment_ids,
)
from zoomattn.methods.lkg.rankers import RANKERS, normalised
from zoomattn.modeling.boundary import add_boundary_tokens

ESTIMATE = "lkg_estimate"  # attribute tagging the estimator pass's mask
FORWARD_ARGS = ("input_ids", "attention_mask", "position_ids", "past_key_values", "inputs_embeds")


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def real_tokens(kwargs: dict) -> torch.Tensor | None:
    """The decoder call's 2-D attention mask as ``[B, L]`` bool, True for a real token; None
    without one, or for a 4-D mask (whose padding then keeps the segments of its ids)."""
    mask = kwargs.get("attention_mask")
    return mask.bool() if mask is not None and mask.dim() == 2 else None


class LkgState:
    """What the decoder hook hands the layers for one call (a plain object, not a module)."""

    def __init__(self, boundary: Boundary, n_layers: int):
        self.boundary, self.n_layers = boundary, n_layers
        self.in_estimate = False  # the hook's recursion guard
        self.checkpointed = False  # the decoder's layers recompute in backward (a fine-tune's)
        self.estimator_passes = 0
        self.reset()

    def reset(self) -> None:
        self.query_segments = self.key_segments = None  # [B, L] / [B, S]
        self.log_alpha = None  # [B, Lyr, P]: fusion runs on this call when set
        self.r = self.c = self.alpha = None  # [B, Lyr, P]
        self.passage_valid = None  # [B, P]: passages with their [e_i] and a question
        self.ends = self.in_passage = None  # [e_i] positions [B, P]; membership [B, P, S]
        self.entropy: dict[int, torch.Tensor] = {}  # layer -> H [B, P]


def relevance_fusion(q, k, v, mask, scaling, heads, query_segments, key_segments, log_alpha,
                     checkpointed: bool = False):  # fmt: skip
    """Eq. 6 on ``heads`` (``kernel.relevance_attention`` with ``kernel.fusion_bias``), at the one
    dispatch point of LKG-RALM's attention: FlexAttention without a bias where ``kernels.choose``
    says fused (CUDA), else the materialised bias on SDPA. ``checkpointed``: the call is
    recomputed in backward (``flex.flex_fused_heads``)."""
    if kernels.choose("lkg", q.device) == kernels.FUSED:
        segments = (query_segments, key_segments, log_alpha)
        return flex_relevance_attention(
            q, k, v, mask, scaling, heads, *segments, checkpointed=checkpointed
        )
    allowed = call_mask(mask, q.shape[2], k.shape[2], q.device)
    bias = fusion_bias(query_segments, key_segments, log_alpha, allowed)
    return relevance_attention(q, k, v, mask, scaling, heads, bias)


def passage_terms(ids: list[int], segments: list[int], n: int, boundary: Boundary):
    """(question token ids, each passage's token ids) of one row, markers left out."""
    markers = {boundary.d, boundary.e, boundary.q, boundary.eq}
    question = [t for t, s in zip(ids, segments, strict=True) if s == QUESTION and t not in markers]
    passages = [[] for _ in range(n)]
    for t, s in zip(ids, segments, strict=True):
        if 0 <= s < n and t not in markers:
            passages[s].append(t)
    return question, passages


class LkgLayerAttention(nn.Module):
    """The zoom module of one layer: plain attention, the estimator pass's masked attention, or
    relevance-guided fusion on this layer's ``heads``."""

    def __init__(self, layer_idx: int, heads: list[int], state: LkgState, entropy: bool):
        super().__init__()
        self.layer_idx, self.heads, self.entropy = layer_idx, tuple(heads), entropy
        self.state = state

    def forward(self, q, k, v, mask=None, scaling=None, last_row: bool = False):
        st = self.state
        if mask is not None and getattr(mask, ESTIMATE, False):
            if last_row:
                return last_row_probs(q, k, mask, scaling)
            if self.entropy and st.ends is not None:
                st.entropy[self.layer_idx] = self._entropy(q, k, mask, scaling)
            return sdpa(q, k, v, mask, scaling)
        if st.log_alpha is None or not self.heads:
            return last_row_probs(q, k, mask, scaling) if last_row else sdpa(q, k, v, mask, scaling)
        if st.query_segments.shape[-1] != q.shape[2] or st.key_segments.shape[-1] != k.shape[2]:
            raise RuntimeError(
                f"lkg: segments of {st.query_segments.shape[-1]} queries/"
                f"{st.key_segments.shape[-1]} keys for a call with {q.shape[2]}/{k.shape[2]}"
            )
        segments = (st.query_segments, st.key_segments, st.log_alpha[:, self.layer_idx])
        if last_row:  # one row: the bias path on every device
            bias = fusion_bias(*segments, call_mask(mask, q.shape[2], k.shape[2], q.device))
            return relevance_last_row(q, k, mask, scaling, self.heads, bias)
        return relevance_fusion(q, k, v, mask, scaling, self.heads, *segments, st.checkpointed)

    def _entropy(self, q, k, mask, scaling) -> torch.Tensor:
        """H of each ``[e_i]`` row's attention over its passage ``[B, P]`` (rows only)."""
        st = self.state
        b, h, _, d = q.shape
        pos = st.ends  # [B, P]
        rows = q.gather(2, pos[:, None, :, None].expand(b, h, pos.shape[1], d))
        row_mask = mask.gather(2, pos[:, None, :, None].expand(b, 1, pos.shape[1], mask.shape[-1]))
        probs = attention_probs(rows, k, row_mask, scaling)  # [B, H, P, S]
        return passage_entropy(probs, st.in_passage)


class LkgModule(nn.Module):
    """Trainable boundary embeddings ``[4, hidden]`` (``[d] [e_i] [q] [e_q]``) and the estimator;
    its forward pre-hook on the decoder prepares every call (module docstring)."""

    def __init__(self, decoder: nn.Module, cfg: LkgConfig, n_layers: int):
        super().__init__()
        if cfg.boundary_ids is None:
            raise ValueError("boundary_ids: not set (LkgConfig.resolved fills them in)")
        self.cfg = cfg
        embed = decoder.get_input_embeddings()
        weight = embed.weight.detach().float()
        self.boundary = nn.Parameter(weight.mean(0).repeat(len(cfg.boundary_ids), 1))
        self.estimator = PassageEstimator(
            weight.shape[1], cfg.adapter_dim, cfg.score_dim, cfg.dropout
        ).to(weight.device)
        self.state = LkgState(Boundary(*cfg.boundary_ids), n_layers)

    def runs_estimator(self) -> bool:
        cfg = self.cfg
        return cfg.estimator == "layerwise" and (
            cfg.fusion or (self.training and cfg.aux_weight > 0)
        )

    def embed(self, decoder, ids: torch.Tensor) -> torch.Tensor:
        table = decoder.get_input_embeddings()
        emb = table(ids.masked_fill(ids >= table.weight.shape[0], 0))
        markers = ids[..., None] == torch.tensor(self.cfg.boundary_ids, device=ids.device)
        rows = markers.to(emb.dtype) @ self.boundary.to(emb.dtype)
        return torch.where(markers.any(-1, keepdim=True), rows, emb)

    def pre_hook(self, decoder, args, kwargs):
        st = self.state
        if st.in_estimate:
            return None
        st.checkpointed = decoder.training and any(
            getattr(layer, "gradient_checkpointing", False) for layer in decoder.layers
        )
        kwargs = {**dict(zip(FORWARD_ARGS, args, strict=False)), **kwargs}
        ids = kwargs.get("input_ids")
        if ids is None:  # embeddings from elsewhere: no markers to read, plain attention
            st.reset()
            return (), kwargs
        kwargs["input_ids"], kwargs["inputs_embeds"] = None, self.embed(decoder, ids)
        cache = kwargs.get("past_key_values")
        if cache is None or cache.get_seq_length() == 0:
            self._prefill(decoder, ids, kwargs)
        else:
            self._decode_step(ids, cache.get_seq_length())
        return (), kwargs

    def _decode_step(self, ids: torch.Tensor, past: int) -> None:
        st = self.state
        if st.key_segments is None:
            return
        if st.key_segments.shape != (ids.shape[0], past):
            raise RuntimeError(
                f"lkg: the cache holds {past} positions, the prefill's segments "
                f"{tuple(st.key_segments.shape)} (batch {ids.shape[0]})"
            )
        tail = torch.full_like(ids, TAIL)
        st.query_segments = tail
        st.key_segments = torch.cat([st.key_segments, tail], dim=1)

    def _prefill(self, decoder, ids: torch.Tensor, kwargs: dict) -> None:
        st = self.state
        st.reset()
        real = real_tokens(kwargs)
        segments = segment_ids(ids, st.boundary, real)
        st.query_segments = st.key_segments = segments
        n = n_passages(segments)
        if n == 0:
            return
        cfg = self.cfg
        if cfg.estimator == "reranker":
            alpha = self._reranked(ids, segments, n)[:, None].expand(-1, st.n_layers, -1)
        elif self.runs_estimator():
            alpha = self._estimate(decoder, ids, segments, n, real, kwargs)
        else:
            return
        st.alpha = alpha
        if cfg.fusion:
            st.log_alpha = alpha.log()

    def _reranked(self, ids: torch.Tensor, segments: torch.Tensor, n: int) -> torch.Tensor:
        """w/o LPR: α per passage from the normalised reranker scores ``[B, P]`` (1 in slots a
        row does not fill)."""
        rank = RANKERS[self.cfg.reranker]
        alpha = torch.ones(ids.shape[0], n, dtype=torch.float32, device=ids.device)
        for b, (row, seg) in enumerate(zip(ids.tolist(), segments.tolist(), strict=True)):
            n_row = max(seg) + 1
            if n_row > 0:
                question, passages = passage_terms(row, seg, n_row, self.state.boundary)
                alpha[b, :n_row] = torch.tensor(normalised(rank(question, passages)))
        return alpha

    def _estimate(self, decoder, ids, segments, n: int, real, kwargs: dict) -> torch.Tensor:
        """The estimator pass: r, c (kept in the state) and α ``[B, Lyr, P]``."""
        st, cfg = self.state, self.cfg
        b_idx = torch.arange(ids.shape[0], device=ids.device)
        ends, valid = self._positions(ids, segments, n, st.boundary.e, lambda s: s >= 0)
        q_end, q_valid = self._positions(ids, segments, 1, st.boundary.eq, lambda s: s == QUESTION)
        st.ends, st.passage_valid = ends, valid & q_valid
        st.in_passage = segments[:, None, :] == torch.arange(n, device=ids.device)[None, :, None]
        mask = estimator_mask(segments, real)
        setattr(mask, ESTIMATE, True)
        at_ends: list[tuple[torch.Tensor, torch.Tensor]] = []

        def keep(module, args, out):  # each layer's output at the [e_i] and [e_q] rows only
            out = out[0] if isinstance(out, tuple) else out
            # what indexing saves (the index tensors, never edited in place: identity hooks skip
            # autograd's version check) is kept as is, not by an activation checkpoint around the
            # hook, whose recomputation runs without it (transformers 5.17: docs/notes.md §9)
            with torch.autograd.graph.saved_tensors_hooks(_same, _same):
                at_ends.append((out[b_idx[:, None], ends], out[b_idx, q_end[:, 0]]))

        hooks = [layer.register_forward_hook(keep) for layer in decoder.layers]
        st.in_estimate = True
        try:
            decoder(
                inputs_embeds=kwargs["inputs_embeds"],
                attention_mask=mask,
                position_ids=kwargs.get("position_ids"),
                use_cache=False,
            )
        finally:
            st.in_estimate = False
            for hook in hooks:
                hook.remove()
        st.estimator_passes += 1
        e_passages = torch.stack([p for p, _ in at_ends], dim=1)  # [B, Lyr, P, hidden]
        e_question = torch.stack([q for _, q in at_ends], dim=1)  # [B, Lyr, hidden]
        r, c = self.estimator(e_passages, e_question)
        if cfg.entropy:
            entropy = torch.stack([st.entropy[i] for i in range(st.n_layers)], dim=1)
        else:  # w/o ELS: log(1 + H) = log 2 at every layer
            entropy = torch.ones_like(r)
        alpha = guidance(r, c, entropy.to(r.dtype), cfg.beta, cfg.alpha_init)
        st.r, st.c = r, c
        # a passage the estimator cannot read (no [e_i], no question) stays fully visible
        return torch.where(st.passage_valid[:, None, :], alpha, torch.ones_like(alpha))

    @staticmethod
    def _positions(ids, segments, n: int, marker: int, belongs) -> tuple[torch.Tensor, ...]:
        """Position of the closing ``marker`` of each of n slots ``[B, n]`` and whether found.
        Slot = the segment code for passages, 0 for the question."""
        hits = (ids == marker) & belongs(segments)
        rows, cols = hits.nonzero(as_tuple=True)
        slots = segments[rows, cols].clamp_min(0)
        pos = torch.zeros(ids.shape[0], n, dtype=torch.long, device=ids.device)
        found = torch.zeros(ids.shape[0], n, dtype=torch.bool, device=ids.device)
        pos[rows, slots] = cols
        found[rows, slots] = True
        return pos, found


def lkg_module(model) -> LkgModule:
    """The LkgModule of a model (plain or inside a peft wrapper)."""
    for module in model.modules():
        if isinstance(module, LkgModule):
            return module
    raise ValueError("not an LKG model: no LkgModule attached")


def fused_heads(cfg: LkgConfig, n_layers: int, n_heads: int) -> list[list[int]]:
    """The heads fusion runs on, per layer."""
    per_layer: list[list[int]] = [[] for _ in range(n_layers)]
    if cfg.fusion_heads == "all":
        return [list(range(n_heads)) for _ in range(n_layers)]
    for layer, head in cfg.middle_heads or []:
        if not (layer < n_layers and head < n_heads):
            raise ValueError(f"middle_heads: no head ({layer}, {head}) in {n_layers}×{n_heads}")
        per_layer[layer].append(head)
    return per_layer


def attach(model, cfg: LkgConfig) -> None:
    decoder = getattr(model, model.base_model_prefix)
    layers = attention_modules(model)
    heads = fused_heads(cfg, len(layers), model.config.num_attention_heads)
    module = LkgModule(decoder, cfg, len(layers))
    decoder.zoom = module
    for i, attn in enumerate(layers):
        attn.zoom = LkgLayerAttention(i, heads[i], module.state, cfg.entropy)
    decoder.register_forward_pre_hook(module.pre_hook, with_kwargs=True)


def prepare_tokenizer(tok, cfg: LkgConfig) -> None:
    """Add the boundary tokens to a tokenizer; their ids must be those the model was built with."""
    ids = add_boundary_tokens(tok)
    if cfg.boundary_ids is not None and ids != list(cfg.boundary_ids):
        raise ValueError(f"boundary_ids: the model has {cfg.boundary_ids}, the tokenizer {ids}")
