"""What ``gpu_paper.py`` measures: one method's training step and generation on a random model,
and one attention function's forward + backward (each a "cell").

Time: CUDA events around the call after ``torch.cuda.synchronize`` (wall clock on the CPU), median
of the repeats after warm-up. Memory: ``torch.cuda.max_memory_allocated`` after
``reset_peak_memory_stats`` (on the CPU: the resident set's high-water mark after resetting it via
``/proc/self/clear_refs``). A cell that runs out of memory returns ``OOM`` instead of raising.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from pathlib import Path

import torch

OOM = "OOM"
PROMPT_WORDS = ("document", ":", "question", "answer")  # tasks.render_prompt's own words
DOCUMENTS = 10  # per example: LKG-RALM's 10 passages, MuDAF's golden + negatives
QUESTION_WORDS = 16
ANSWER_TOKENS = 32  # scored tokens per training example: the answer's words + the end token
LKG_FUSED_PER_LAYER = 4  # "middle-focused" heads per layer (the workflow finds them; here fixed)
GIB = 2**30


# --- measuring ---------------------------------------------------------------------------------


def seconds(fn, device: str) -> float:
    if device != "cuda":
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        return 1024 * next(int(line.split()[1]) for line in f if line.startswith(key))


def reset_peak(device: str) -> int:
    """Start a peak measurement; returns the bytes in use now."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    return _status_bytes("VmRSS:")


def peak_bytes(device: str) -> int:
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return _status_bytes("VmHWM:")


def free_memory() -> None:
    if torch.cuda.is_available():  # (on the CPU, collecting takes longer than a smoke cell)
        gc.collect()  # the LKG hooks and peft wrappers hold reference cycles
        torch.cuda.empty_cache()


def guarded(fn):
    """fn(), or OOM when it runs out of device memory (its tensors freed before returning)."""
    try:
        return fn()
    except torch.OutOfMemoryError:
        pass  # leaving the handler drops the traceback, and with it the failed call's tensors
    free_memory()
    return OOM


# --- the random base model and its data --------------------------------------------------------


def bench_tokenizer(vocab: int):
    """A word-level tokenizer with exactly the model's vocabulary (every generated id decodes);
    one word = one token, so a prompt's length is known from its word count."""
    from zoomattn.data.tokenizer import SPECIAL, build_tokenizer

    words = [*PROMPT_WORDS, *(f"w{i}" for i in range(vocab))]
    return build_tokenizer(words[: vocab - len(SPECIAL)])


def save_random_base(shape: dict, layers: int, out: Path, device: str) -> Path:
    """A Llama of ``shape`` with ``layers`` layers and random weights, saved in bf16."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = bench_tokenizer(shape["vocab"])
    config = LlamaConfig(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        num_hidden_layers=layers,
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        intermediate_size=shape["intermediate"],
        max_position_embeddings=131072,
        rope_theta=shape["rope_theta"],
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):  # random init of 8B parameters: seconds on a GPU, minutes on CPU
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    free_memory()
    return out


def sized_records(tok, n: int, length: int, answer_tokens: int, seed: int = 0) -> list[dict]:
    """n records whose encoded example (prompt, answer, end token) is exactly ``length`` tokens:
    ``DOCUMENTS`` passages of random words (the first golden), then a random question."""
    from zoomattn.data.records import make_record
    from zoomattn.training.batching import encode_example

    rng = random.Random(seed)
    words = [w for w in tok.get_vocab() if w.startswith("w")]

    def text(k: int) -> str:
        return " ".join(rng.choices(words, k=k))

    def record(i: int, sizes: list[int]) -> dict:
        return make_record(
            id=f"bench-{i}",
            family="single",
            question=text(QUESTION_WORDS),
            answers=[text(answer_tokens - 1)],
            documents=[text(k) for k in sizes],
            golden=[0],
        )

    out = []
    for i in range(n):
        spare = length - len(encode_example(tok, record(i, [0] * DOCUMENTS))["input_ids"])
        if spare < DOCUMENTS:
            raise ValueError(f"{length} tokens cannot hold {DOCUMENTS} documents and a question")
        sizes = [spare // DOCUMENTS + (j < spare % DOCUMENTS) for j in range(DOCUMENTS)]
        out.append(record(i, sizes))
        assert len(encode_example(tok, out[-1])["input_ids"]) == length
    return out


def method_context(shape: dict, layers: int, values: dict, tok):
    """What the workflow measures on the base before training: MuDAF's selected heads (here a
    seeded draw) and LKG-RALM's middle-focused heads (here ``LKG_FUSED_PER_LAYER`` per layer);
    and the base's tokenizer."""
    from zoomattn.methods import ResolveContext

    heads = [[layer, h] for layer in range(layers) for h in range(shape["heads"])]
    n_selected = min(values.get("heads", 0), len(heads))
    return ResolveContext(
        tokenizer=tok,
        selected_heads=random.Random(0).sample(heads, n_selected),
        middle_heads=[[layer, h] for layer in range(layers) for h in fused_heads(shape)],
    )


def fused_heads(shape: dict) -> list[int]:
    k = min(LKG_FUSED_PER_LAYER, shape["heads"])
    return [i * shape["heads"] // k for i in range(k)]


# --- a method's training step and generation ----------------------------------------------------


def step_cell(task: dict) -> dict:
    """One method at one study's fine-tuning settings, built as the fine-tune job builds it: its
    training step (``_train``), then its generation (``_generate``)."""
    from zoomattn.methods import METHODS
    from zoomattn.methods.loading import build_trainable
    from zoomattn.modeling.loading import enable_activation_checkpointing
    from zoomattn.placement import Placement

    torch.manual_seed(0)
    ft, shape = task["finetune"], task["shape"]
    method = METHODS[task["method"]]
    tok = bench_tokenizer(shape["vocab"])
    context = method_context(shape, task["layers"], task["values"], tok)
    values = method.resolve(task["values"], ft["lora"], context)
    cfg = method.make_config(values)
    method.prepare_tokenizer(tok, cfg)
    model = build_trainable(
        task["base_dir"],
        task["method"],
        cfg,
        ft["lora"],
        ft["quantization"],
        Placement(**task["placement"]),
    )
    if ft.get("gradient_checkpointing"):
        enable_activation_checkpointing(model)
    trained = guarded(lambda: _train(task, model, tok, method.objective(cfg)))
    model.zero_grad(set_to_none=True)
    free_memory()
    generated = guarded(lambda: _generate(task, model.eval(), tok))
    return {"values": values, **_or_oom(trained, "train"), **_or_oom(generated, "eval")}


def _train(task: dict, model, tok, objective) -> dict:
    """Time ``training/finetune.py::finetune``'s loop body on one micro-batch."""
    from zoomattn.methods import StepBatch
    from zoomattn.training.answer_loss import AnswerLoss
    from zoomattn.training.batching import encode_example
    from zoomattn.training.finetune import make_optimizer

    ft, device = task["finetune"], task["placement"]["device"]
    micro = ft.get("micro_batch_size") or ft["batch_size"]
    records = sized_records(tok, micro, ft["max_length"], ANSWER_TOKENS)
    examples = [encode_example(tok, r) for r in records]
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(ft["optimizer"], trainable, ft["lr"])
    model.train()
    objective = objective or AnswerLoss()
    batch = StepBatch(records, examples, tok.pad_token_id, micro, seed=0, step=0)

    def step():
        objective.step(model, tok, batch)
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(task["warmup"]):
        step()
    reset_peak(device)
    times = [seconds(step, device) for _ in range(task["steps"])]
    step_s, tokens = statistics.median(times), micro * ft["max_length"]
    return {
        "step_s": step_s,
        "step_times_s": times,
        "tokens_per_step": tokens,
        "tokens_per_s": tokens / step_s,
        "peak_gib": peak_bytes(device) / GIB,
        "trainable_params": sum(p.numel() for p in trainable),
    }


def _generate(task: dict, model, tok) -> dict:
    """Generated tokens/s of ``generate_answers`` on one batch (after a 2-token warm-up)."""
    from zoomattn.evaluation.generate import generate_answers

    ev = task["eval"]
    prompts = sized_records(tok, ev["batch_size"], ev["prompt_tokens"] + 2, 2, seed=1)
    if task["warmup"]:
        generate_answers(model, tok, prompts, ev["batch_size"], 2, desc="warm-up")
    t0 = time.perf_counter()  # the answers reach the host at the end: no sync needed
    answers = generate_answers(model, tok, prompts, ev["batch_size"], ev["max_new_tokens"])
    took = time.perf_counter() - t0
    n = sum(len(tok(a, add_special_tokens=False)["input_ids"]) for a in answers)
    return {"eval_s": took, "eval_tokens": n, "eval_tokens_per_s": n / took}


def _or_oom(result, part: str) -> dict:
    return {f"{part}_oom": True} if result == OOM else result


# --- one attention function, forward + backward ------------------------------------------------


def attention_step(variant: str, n: int, shape: dict, methods: dict, device: str, dtype):
    """Inputs and a fwd+bwd step of one attention function as the model calls it: post-RoPE q
    ``[1, H, n, D]``, k/v ``[1, KV, n, D]`` (laid out as the projections leave them), causal."""
    from zoomattn.attention.math import sdpa
    from zoomattn.methods import METHODS
    from zoomattn.methods.lkg.kernel import Boundary, segment_ids
    from zoomattn.methods.lkg.model import relevance_fusion
    from zoomattn.methods.opamp.model import OpAmpAttention
    from zoomattn.methods.rectify.kernel import Rectifier, rectified_attention

    torch.manual_seed(0)
    heads, kv, d = shape["heads"], shape["kv_heads"], shape["hidden"] // shape["heads"]

    def projected(h):
        x = torch.randn(1, n, h, d, device=device, dtype=dtype)
        return x.transpose(1, 2).requires_grad_(True)

    q, k, v = projected(heads), projected(kv), projected(kv)
    leaves = [q, k, v]
    if variant == "sdpa":
        fn = lambda: sdpa(q, k, v)  # noqa: E731
    elif variant in ("opamp", "opamp_triton"):
        cfg = METHODS["opamp"].make_config(methods["opamp"])
        layer = OpAmpAttention(heads, kv, d, cfg).to(device=device, dtype=dtype).train()
        leaves += list(layer.parameters())
        path = EXPLICIT_PATHS.get(variant)  # None: the dispatch's choice
        fn = lambda: layer(q, k, v, path=path)  # noqa: E731
    elif variant == "rectified":
        cfg = methods["rectify"]
        g, u = Rectifier(cfg["g"], float(cfg["xi"])), projected(heads)
        leaves.append(u)
        fn = lambda: rectified_attention(q, u, k, v, g, block=cfg["block"])  # noqa: E731
    elif variant == "lkg_fusion":
        boundary = Boundary(d=1, e=2, q=3, eq=4)
        ids, n_passages = _lkg_layout(n, boundary)
        segments = segment_ids(ids.to(device), boundary)
        log_alpha = torch.zeros(1, n_passages, device=device, dtype=dtype, requires_grad=True)
        leaves.append(log_alpha)
        fused = fused_heads(shape)

        def fn():  # the layer's dispatch: the bias from log α (needs grad), or FlexAttention
            return relevance_fusion(q, k, v, None, None, fused, segments, segments, log_alpha)
    else:
        raise ValueError(variant)
    grad = torch.randn_like(q)

    def step():
        fn().backward(grad)
        for t in leaves:
            t.grad = None

    return step


def _lkg_layout(n: int, b) -> tuple[torch.Tensor, int]:
    """Token ids of an n-token prompt: ``DOCUMENTS`` marked passages, a marked 16-token question
    and the answer tail (ids ≥ 10 are words)."""
    tail = 8
    passage = (n - 1 - QUESTION_WORDS - tail) // DOCUMENTS
    ids = [0]
    for _ in range(DOCUMENTS):
        ids += [b.d] + [10] * (passage - 2) + [b.e]
    ids += [b.q] + [11] * (QUESTION_WORDS - 2) + [b.eq]
    ids += [12] * (n - len(ids))
    return torch.tensor([ids]), DOCUMENTS


DISPATCHED_AS = {"opamp": "opamp", "rectified": "rectify", "lkg_fusion": "lkg"}  # kernels' names
# variants that name their path (opt-in, never dispatched): measured on CUDA only, one setting
EXPLICIT_PATHS = {"opamp_triton": "triton"}


def attention_cell(
    variant: str, n: int, shape: dict, methods: dict, device: str, dtype, repeats, setting
):
    """Median fwd+bwd seconds and peak memory above the inputs (MiB) of one variant at n tokens,
    run under ``attention_kernels: setting``; ``path``: the path its attention took
    (``kernels.paths_run``; on the CPU always the reference)."""
    from zoomattn.attention import kernels

    with kernels.using(setting):
        step = attention_step(variant, n, shape, methods, device, dtype)
        step()
        before = reset_peak(device)
        step()
        peak = (peak_bytes(device) - before) / 2**20
        times = [seconds(step, device) for _ in range(repeats)]
        ran = kernels.paths_run()
    if variant in EXPLICIT_PATHS:
        path = EXPLICIT_PATHS[variant]
    elif variant == "sdpa":
        path = "sdpa"
    else:
        path = ran.get(DISPATCHED_AS[variant], "reference (undispatched)")
    return {"seconds": statistics.median(times), "peak_mib_above_inputs": peak, "path": path}
