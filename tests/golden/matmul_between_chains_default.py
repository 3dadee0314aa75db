@triton.jit
def pointwise_0_mul_maximum(in_x, out_maximum, xnumel, XBLOCK: tl.constexpr, EVEN_X: tl.constexpr):
    # primitives: mul, maximum
    # reads 1024 bytes: x (float32[8, 32])
    # writes 1024 bytes: maximum (float32[8, 32])
    # pointwise: one flat pass
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = tl.full([XBLOCK], True, tl.int1) if EVEN_X else xindex < xnumel
    x = tl.load(in_x + xindex, mask=xmask, other=0)
    mul = (x * 2.0)
    maximum = tl.maximum(mul, 0.0, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_maximum + xindex, maximum, mask=xmask)


@triton.jit
def pointwise_2_add_mul_erf(in_mm, in_b, out_mul_3, stride_b_0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: add, mul, erf, mul, add, mul
    # reads 576 bytes: b (float32[16]), mm (float32[8, 16])
    # writes 512 bytes: mul_3 (float32[8, 16])
    # pointwise over a 2-D tile [rows, trailing dimensions]: broadcast operands are indexed by row or column, no division per element
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.program_id(1) * RBLOCK + tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    mm = tl.load(in_mm + xindex * rnumel + rindex, mask=mask, other=0)
    b = tl.load(in_b + rindex * stride_b_0, mask=rmask, other=0)
    add = (mm + b)
    mul_2 = (add * 0.5)
    mul_1 = (add * 0.7071067811865475)
    erf = _erf(mul_1)
    add_1 = (erf + 1.0)
    mul_3 = (mul_2 * add_1)
    tl.store(out_mul_3 + xindex * rnumel + rindex, mul_3, mask=mask)


def fusionlab_program(x, w, b):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    x = x.contiguous()
    b = b.contiguous()
    # pointwise_0_mul_maximum: reads x; writes maximum
    maximum = empty((8, 32), (32, 1), torch.float32)
    launch(pointwise_0_mul_maximum, x, maximum, xnumel=256)
    mm = const_aten_mm_default(maximum, w)  # extern: aten.mm.default runs eagerly
    mm = mm.contiguous()  # dense as traced: no copy when it is
    # pointwise_2_add_mul_erf: reads b, mm; writes mul_3
    mul_3 = empty((8, 16), (16, 1), torch.float32)
    launch(pointwise_2_add_mul_erf, mm, b, mul_3, 1, xnumel=8, rnumel=16)
    return (mul_3,)
