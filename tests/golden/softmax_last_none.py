@triton.jit
def reduction_0_amax(in_x, out_amax, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: amax
    # reads 1024 bytes: x (float32[8, 32])
    # writes 32 bytes: amax (float32[8, 1])
    # persistent reduction: each row stays in registers, one pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    x = tl.load(in_x + xindex * rnumel + rindex, mask=mask, other=0)
    amax = tl.reduce(tl.where(mask, x, float("-inf")), 1, _maximum)[:, None]
    tl.store(out_amax + xindex, amax, mask=xmask)


@triton.jit
def pointwise_2_sub(in_x, in_expand, out_sub, stride_expand_0, stride_expand_1, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: sub
    # reads 1056 bytes: x (float32[8, 32]), expand (float32[8, 32])
    # writes 1024 bytes: sub (float32[8, 32])
    # pointwise over a 2-D tile [rows, trailing dimensions]: broadcast operands are indexed by row or column, no division per element
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.program_id(1) * RBLOCK + tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    d0 = xindex
    x = tl.load(in_x + xindex * rnumel + rindex, mask=mask, other=0)
    expand = tl.load(in_expand + d0 * stride_expand_0 + rindex * stride_expand_1, mask=mask, other=0)
    sub = (x - expand)
    tl.store(out_sub + xindex * rnumel + rindex, sub, mask=mask)


@triton.jit
def pointwise_3_exp(in_sub, out_exp, xnumel, XBLOCK: tl.constexpr, EVEN_X: tl.constexpr):
    # primitives: exp
    # reads 1024 bytes: sub (float32[8, 32])
    # writes 1024 bytes: exp (float32[8, 32])
    # pointwise: one flat pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = tl.full([XBLOCK], True, tl.int1) if EVEN_X else xindex < xnumel
    sub = tl.load(in_sub + xindex, mask=xmask, other=0)
    exp = tl.exp(sub)
    tl.store(out_exp + xindex, exp, mask=xmask)


@triton.jit
def reduction_4_sum(in_exp, out_sum, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: sum
    # reads 1024 bytes: exp (float32[8, 32])
    # writes 32 bytes: sum (float32[8, 1])
    # persistent reduction: each row stays in registers, one pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    exp = tl.load(in_exp + xindex * rnumel + rindex, mask=mask, other=0)
    sum_ = tl.sum(tl.where(mask, exp, 0), 1)[:, None]
    tl.store(out_sum + xindex, sum_, mask=xmask)


@triton.jit
def pointwise_6_div(in_exp, in_expand_1, out_div, stride_expand_1_0, stride_expand_1_1, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: div
    # reads 1056 bytes: exp (float32[8, 32]), expand_1 (float32[8, 32])
    # writes 1024 bytes: div (float32[8, 32])
    # pointwise over a 2-D tile [rows, trailing dimensions]: broadcast operands are indexed by row or column, no division per element
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.program_id(1) * RBLOCK + tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    d0 = xindex
    exp = tl.load(in_exp + xindex * rnumel + rindex, mask=mask, other=0)
    expand_1 = tl.load(in_expand_1 + d0 * stride_expand_1_0 + rindex * stride_expand_1_1, mask=mask, other=0)
    div = (exp / expand_1)
    tl.store(out_div + xindex * rnumel + rindex, div, mask=mask)


def fusionlab_program(x):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    x = x.contiguous()
    # reduction_0_amax: reads x; writes amax
    amax = empty((8, 1), (1, 1), torch.float32)
    launch(reduction_0_amax, x, amax, xnumel=8, rnumel=32)
    # pointwise_2_sub: reads x, expand; writes sub
    sub = empty((8, 32), (32, 1), torch.float32)
    launch(pointwise_2_sub, x, amax, sub, 1, 0, xnumel=8, rnumel=32)
    # pointwise_3_exp: reads sub; writes exp
    exp = empty((8, 32), (32, 1), torch.float32)
    launch(pointwise_3_exp, sub, exp, xnumel=256)
    # reduction_4_sum: reads exp; writes sum
    sum_ = empty((8, 1), (1, 1), torch.float32)
    launch(reduction_4_sum, exp, sum_, xnumel=8, rnumel=32)
    # pointwise_6_div: reads exp, expand_1; writes div
    div = empty((8, 32), (32, 1), torch.float32)
    launch(pointwise_6_div, exp, sum_, div, 1, 0, xnumel=8, rnumel=32)
    return (div,)
