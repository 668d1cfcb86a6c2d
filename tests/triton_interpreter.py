"""Work-arounds for Triton 3.6's interpreter (TRITON_INTERPRET=1), which the fused kernels' CPU
tests run in; call before importing a kernel module."""


def squeeze_interpreter_indices() -> None:
    """Triton 3.6's interpreter turns loop bounds into ints with int(array of shape (1,)), which
    NumPy ≥ 2.4 refuses (triton-lang/triton#9171); apply the upstream fix (squeeze first)."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "squeezes_indices", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched.squeezes_indices = True
    interpreter._patch_lang_tensor = patched


def interpreter_or_skip(cuda_tests: str) -> None:
    """Skip the calling test module unless triton runs here in its interpreter (CPU tensors; set
    by tests/conftest.py where CUDA is absent), naming ``cuda_tests``, the module that checks the
    compiled kernel; else apply the work-arounds. Call before importing a kernel module."""
    import pytest

    triton = pytest.importorskip("triton", reason="triton is not installed (the kernels')")
    if not triton.knobs.runtime.interpret:
        pytest.skip(
            "CPU tensors in Triton's interpreter: TRITON_INTERPRET=1, which tests/conftest.py sets "
            f"without CUDA (on CUDA: {cuda_tests})",
            allow_module_level=True,
        )
    squeeze_interpreter_indices()


# the two switches OpAmp's and rectification's kernels share, and their cases' names (off, on)
SPANS = ("mask_bytes", "padding_spans")  # PADDING_SPANS: a padding mask read as key spans
KEYS = (
    "kv_queries_as_rows",
    "kv_keys_as_rows",
)  # KV_KEYS_AS_ROWS: dK/dV's tiles as [keys, queries]


def switches_id(spans: bool, keys: bool) -> str:
    """A case's name for the two switches, as ``kernel_switches``' fixtures name them."""
    return f"{SPANS[spans]}-{KEYS[keys]}"


def kernel_switches(kernel_module) -> tuple:
    """For a test module of a kernel with both switches: the autouse fixtures ``padding_spans``
    and ``kv_keys_as_rows`` (every test with each switch off and on), then the marks that run a
    test with one of them as ``kernel_module`` ships it only (``one_way``), for a test that no
    padding mask or no backward reaches, or that is about another part."""
    return (
        switch_fixture(kernel_module, "PADDING_SPANS", SPANS),
        switch_fixture(kernel_module, "KV_KEYS_AS_ROWS", KEYS),
        one_way(SPANS, kernel_module.PADDING_SPANS),
        one_way(KEYS, kernel_module.KV_KEYS_AS_ROWS),
    )


def switch_cases(kernel_module, cases: list[tuple], has_padding_mask) -> list[tuple]:
    """``with_switches``' cases ``(spans, keys, *case)``: each case with dK/dV's tiles both ways,
    and with the mask read both ways where ``has_padding_mask(*case)``, else as ``kernel_module``
    ships it (no mask to read as spans)."""
    shipped = (kernel_module.PADDING_SPANS,)
    return [
        (spans, keys, *case)
        for case in cases
        for spans in ((False, True) if has_padding_mask(*case) else shipped)
        for keys in (False, True)
    ]


def with_switches(names: tuple[str, ...], cases: list):
    """Parametrize ``("padding_spans", "kv_keys_as_rows", *names)`` over ``cases``, the two
    switches' fixtures indirectly: each case ``(spans, keys, *values)``, named by
    ``switches_id`` and its values, or a ``pytest.param`` of them with its own id."""
    import pytest

    def named(case):
        if hasattr(case, "marks"):  # a pytest.param
            return case
        spans, keys, *values = case
        return pytest.param(*case, id="-".join([switches_id(spans, keys), *map(str, values)]))

    return pytest.mark.parametrize(
        ("padding_spans", "kv_keys_as_rows", *names),
        [named(case) for case in cases],
        indirect=["padding_spans", "kv_keys_as_rows"],
    )


def switch_fixture(kernel_module, switch: str, ids: tuple[str, str]):
    """An autouse fixture, named ``ids[1]``, that runs every test of the module holding it with
    the kernel module's ``switch`` off and then on (``ids``: the two cases' names); a test picks
    one by parametrizing the fixture indirectly."""
    import pytest

    @pytest.fixture(autouse=True, params=[False, True], ids=list(ids), name=ids[1])
    def both_ways(request, monkeypatch):
        monkeypatch.setattr(kernel_module, switch, request.param)
        return request.param

    return both_ways


def one_way(ids: tuple[str, str], value: bool):
    """A mark running a test with the ``switch_fixture`` of these ``ids`` at ``value`` only: for
    a test the switch's code cannot reach (no padding mask to read as key spans, no backward to
    lay out), where both ways would run the same kernels twice, or for one about that value."""
    import pytest

    return pytest.mark.parametrize(ids[1], [value], ids=[ids[value]], indirect=True)
