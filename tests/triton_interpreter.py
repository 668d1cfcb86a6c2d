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
