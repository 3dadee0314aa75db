@triton.jit
def reduction_0_add_mean_sub_mul_rsqrt(in_x, in_r, in_w, in_b, out_add, out_add_2, stride_w_0, stride_b_0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: add, mean, sub, mul, mean, add, rsqrt, mul, mul, add
    # reads 2304 bytes: x (float32[8, 32]), r (float32[8, 32]), w (float32[32]), b (float32[32])
    # writes 2048 bytes: add (float32[8, 32]), add_2 (float32[8, 32])
    # persistent reduction: each row stays in registers, one pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    x = tl.load(in_x + xindex * rnumel + rindex, mask=mask, other=0)
    r = tl.load(in_r + xindex * rnumel + rindex, mask=mask, other=0)
    add = (x + r)
    mean = (tl.sum(tl.where(mask, add, 0), 1)[:, None] / rnumel)
    sub = (add - mean)
    mul = (sub * sub)
    mean_1 = (tl.sum(tl.where(mask, mul, 0), 1)[:, None] / rnumel)
    tl.store(out_add + xindex * rnumel + rindex, add, mask=mask)
    add_1 = (mean_1 + 1e-05)
    rsqrt = tl.rsqrt(add_1)
    mul_1 = (sub * rsqrt)
    w = tl.load(in_w + rindex * stride_w_0, mask=rmask, other=0)
    mul_2 = (mul_1 * w)
    b = tl.load(in_b + rindex * stride_b_0, mask=rmask, other=0)
    add_2 = (mul_2 + b)
    tl.store(out_add_2 + xindex * rnumel + rindex, add_2, mask=mask)


def fusionlab_program(x, r, w, b):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    x = x.contiguous()
    r = r.contiguous()
    w = w.contiguous()
    b = b.contiguous()
    # reduction_0_add_mean_sub_mul_rsqrt: reads x, r, w, b; writes add, add_2
    add = empty((8, 32), (32, 1), torch.float32)
    add_2 = empty((8, 32), (32, 1), torch.float32)
    launch(reduction_0_add_mean_sub_mul_rsqrt, x, r, w, b, add, add_2, 1, 1, xnumel=8, rnumel=32)
    return (add, add_2)
