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
