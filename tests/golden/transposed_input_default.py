@triton.jit
def pointwise_0_exp_add_copy(in_x, out_add_eager_layout, stride_x_0, stride_x_1, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, EVEN_X: tl.constexpr, EVEN_R: tl.constexpr):
    # primitives: exp, add, copy
    # reads 1024 bytes: x (float32[8, 32])
    # writes 1024 bytes: add_eager_layout (float32[32, 8])
    # pointwise over a 2-D tile [rows, trailing dimensions]: broadcast operands are indexed by row or column, no division per element
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK, 1], True, tl.int1) if EVEN_X else xindex < xnumel
    rindex = tl.program_id(1) * RBLOCK + tl.arange(0, RBLOCK)[None, :]
    rmask = tl.full([1, RBLOCK], True, tl.int1) if EVEN_R else rindex < rnumel
    mask = xmask & rmask
    d0 = xindex
    x = tl.load(in_x + rindex * stride_x_0 + d0 * stride_x_1, mask=mask, other=0)
    exp = tl.exp(x)
    add = (exp + 1.0)
    add_eager_layout = add
    tl.store(out_add_eager_layout + xindex * rnumel + rindex, add_eager_layout, mask=mask)


def fusionlab_program(x):
    device = x.device
    empty = allocator(device)  # empty(sizes, strides, dtype) on that device
    # pointwise_0_exp_add_copy: reads x; writes add_eager_layout
    add_eager_layout = empty((32, 8), (8, 1), torch.float32)
    launch(pointwise_0_exp_add_copy, x, add_eager_layout, x.stride(0), x.stride(1), xnumel=32, rnumel=8)
    add_as_eager = add_eager_layout.permute((1, 0))  # view: no copy where PyTorch can avoid one
    return (add_as_eager,)
