@triton.jit
def reduction_0_argmax(in_x, out_argmax, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: argmax
    # reads 1024 bytes: x (float32[8, 32])
    # writes 64 bytes: argmax (int64[8])
    # persistent reduction: each row stays in registers, one pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    x = tl.load(in_x + xindex * rnumel + rindex, mask=mask, other=0)
    argmax_value, argmax = tl.reduce((tl.where(mask, x, float("-inf")), tl.broadcast_to(rindex, [XBLOCK, RBLOCK]).to(tl.int64)), 1, _argmax)
    argmax = argmax[:, None]
    tl.store(out_argmax + xindex, argmax, mask=xmask)


def fusionlab_program(x):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    x = x.contiguous()
    # reduction_0_argmax: reads x; writes argmax
    argmax = empty((8,), (1,), torch.int64)
    launch(reduction_0_argmax, x, argmax, xnumel=8, rnumel=32)
    return (argmax,)
