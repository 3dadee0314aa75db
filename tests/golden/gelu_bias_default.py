@triton.jit
def pointwise_0_add_mul_erf(in_x, in_b, out_mul_2, stride_b_0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: add, mul, erf, mul, add, mul
    # reads 1152 bytes: b (float32[32]), x (float32[8, 32])
    # writes 1024 bytes: mul_2 (float32[8, 32])
    # pointwise over a 2-D tile [rows, trailing dimensions]: broadcast operands are indexed by row or column, no division per element
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.program_id(1) * RBLOCK + tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    x = tl.load(in_x + xindex * rnumel + rindex, mask=mask, other=0)
    b = tl.load(in_b + rindex * stride_b_0, mask=rmask, other=0)
    add = (x + b)
    mul_1 = (add * 0.5)
    mul = (add * 0.7071067811865475)
    erf = _erf(mul)
    add_1 = (erf + 1.0)
    mul_2 = (mul_1 * add_1)
    tl.store(out_mul_2 + xindex * rnumel + rindex, mul_2, mask=mask)


def fusionlab_program(x, b):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    x = x.contiguous()
    b = b.contiguous()
    # pointwise_0_add_mul_erf: reads b, x; writes mul_2
    mul_2 = empty((8, 32), (32, 1), torch.float32)
    launch(pointwise_0_add_mul_erf, x, b, mul_2, 1, xnumel=8, rnumel=32)
    return (mul_2,)
