"""What a convolutional model's layout costs: ResNet-50 (the zoo's GPU size, bf16 inference) run by eager, Inductor and
fusionlab, once as built (NCHW parameters and images) and once with the model and its images in channels-last, each
checked against eager of its own layout before it is timed. Prints wall ms (cuda events, median), GPU ms (the kernels'
times summed by torch.profiler), launches, and the GPU time of the kernels whose names say they convert layouts.

    python benchmarks/channels_last_probe.py [MODEL] [--options KEY=VALUE ...]   # default: resnet50
"""

from __future__ import annotations

import sys

import torch

from fusionlab import models
from fusionlab.measure.timing import cuda_kernel_ms, median_cuda_ms

CONVERSIONS = ("nchwToNhwc", "nhwcToNchw", "direct_copy", "transpose")  # (our kernels that copy are named so)


def run(name: str, channels_last: bool, options: dict[str, object]) -> None:
    model, inputs = models.build(name, "gpu", device=torch.device("cuda"), dtype=torch.bfloat16, train=False)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = {k: v.contiguous(memory_format=torch.channels_last) if v.dim() == 4 else v for k, v in inputs.items()}
    torch._dynamo.reset()
    ours = torch.compile(model, backend="fusionlab", options=options)
    inductor = torch.compile(model)

    def logits(run) -> torch.Tensor:
        with torch.no_grad():
            out = run(**inputs)
        return getattr(out, "logits", out).float()

    expected = logits(model)
    errors = {label: (logits(fn) - expected).abs().max().item() for label, fn in (("inductor", inductor),
                                                                                 ("fusionlab", ours))}
    print(f"  max error against eager: {errors}")
    # as the model benchmark checks: bf16 logits of a 50-layer network differ by rounding in any compiler
    assert errors["fusionlab"] <= max(0.1, 2 * errors["inductor"]), "fusionlab differs from eager"
    layout = "channels_last" if channels_last else "nchw"
    for label, fn in (("eager", model), ("inductor", inductor), ("fusionlab", ours)):
        def step(fn=fn):
            with torch.no_grad():
                return fn(**inputs)
        wall = median_cuda_ms(step)
        per_kernel, launches = cuda_kernel_ms(step, iterations=3)
        converting = sum(ms for k, ms in per_kernel.items() if any(c.lower() in k.lower() for c in CONVERSIONS))
        top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:6]
        print(f"{name} {layout:13s} {label:9s} wall {wall:.3f} ms  gpu {sum(per_kernel.values()):.3f} ms  "
              f"launches {launches}  conversions {converting:.3f} ms")
        for kernel, ms in top:
            print(f"      {ms:.4f}  {kernel[:110]}")


def main() -> None:
    args = sys.argv[1:]
    options: dict[str, object] = {}
    if "--options" in args:
        at = args.index("--options")
        for pair in args[at + 1:]:
            key, value = pair.split("=", 1)
            options[key] = {"true": True, "false": False}.get(value.lower(), value)
        args = args[:at]
    name = args[0] if args else "resnet50"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, options {options}")
    for channels_last in (False, True):
        run(name, channels_last, options)


if __name__ == "__main__":
    main()
