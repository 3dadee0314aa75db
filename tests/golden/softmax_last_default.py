@triton.jit
def reduction_0_amax_sub_exp_sum_div(in_x, out_div, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: amax, sub, exp, sum, div
    # reads 1024 bytes: x (float32[8, 32])
    # writes 1024 bytes: div (float32[8, 32])
    # persistent reduction: each row stays in registers, one pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    x = tl.load(in_x + xindex * rnumel + rindex, mask=mask, other=0)
    amax = tl.reduce(tl.where(mask, x, float("-inf")), 1, _maximum)[:, None]
    sub = (x - amax)
    exp = tl.exp(sub)
    sum_ = tl.sum(tl.where(mask, exp, 0), 1)[:, None]
    div = (exp / sum_)
    tl.store(out_div + xindex * rnumel + rindex, div, mask=mask)


def fusionlab_program(x):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    x = x.contiguous()
    # reduction_0_amax_sub_exp_sum_div: reads x; writes div
    div = empty((8, 32), (32, 1), torch.float32)
    launch(reduction_0_amax_sub_exp_sum_div, x, div, xnumel=8, rnumel=32)
    return (div,)
