@triton.jit
def reduction_0_mean_sub_mul_add_rsqrt(in_x, in_w, in_b, out_add_1, stride_w_0, stride_b_0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: mean, sub, mul, mean, add, rsqrt, mul, mul, add
    # reads 1280 bytes: x (float32[8, 32]), w (float32[32]), b (float32[32])
    # writes 1024 bytes: add_1 (float32[8, 32])
    # persistent reduction: each row stays in registers, one pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    x = tl.load(in_x + xindex * rnumel + rindex, mask=mask, other=0)
    mean = (tl.sum(tl.where(mask, x, 0), 1)[:, None] / rnumel)
    sub = (x - mean)
    mul = (sub * sub)
    mean_1 = (tl.sum(tl.where(mask, mul, 0), 1)[:, None] / rnumel)
    add = (mean_1 + 1e-05)
    rsqrt = tl.rsqrt(add)
    mul_1 = (sub * rsqrt)
    w = tl.load(in_w + rindex * stride_w_0, mask=rmask, other=0)
    mul_2 = (mul_1 * w)
    b = tl.load(in_b + rindex * stride_b_0, mask=rmask, other=0)
    add_1 = (mul_2 + b)
    tl.store(out_add_1 + xindex * rnumel + rindex, add_1, mask=mask)


def fusionlab_program(x, w, b):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    x = x.contiguous()
    w = w.contiguous()
    b = b.contiguous()
    # reduction_0_mean_sub_mul_add_rsqrt: reads x, w, b; writes add_1
    add_1 = empty((8, 32), (32, 1), torch.float32)
    launch(reduction_0_mean_sub_mul_add_rsqrt, x, w, b, add_1, 1, 1, xnumel=8, rnumel=32)
    return (add_1,)
