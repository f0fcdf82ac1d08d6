"""`tilelang.intrinsics.mma_macro_generator`: TileLang's emitters of warp-level tensor-core
instructions (ldmatrix, mma per thread). They describe what each GPU thread holds, which has
no CPU meaning: constructing one raises NotPortableError (T.gemm is the portable form)."""

from __future__ import annotations

from tilepy.errors import NotPortableError


class _Emitter:
    what = "warp-level tensor-core MMA emitters"

    def __init__(self, *args, **kwargs):
        raise NotPortableError(
            f"not portable to the CPU reference: {self.what} "
            f"(tilelang.intrinsics.{type(self).__name__})",
            hint="write the product as T.gemm(A_shared, B_shared, C_local), the portable "
                 "form TileLang also accepts")


class TensorCoreIntrinEmitter(_Emitter):
    pass


class TensorCoreIntrinEmitterWithLadderTransform(_Emitter):
    pass


class INT4TensorCoreIntrinEmitter(_Emitter):
    pass
