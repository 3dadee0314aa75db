"""`fusionlab.models`: a zoo of real models, built from configs (no downloads), to run through fusionlab.

    >>> from fusionlab import models
    >>> models.names()
    ['bert', 'gpt2', 'llama', 'resnet50', 'vit']
    >>> model, inputs = models.build("gpt2", size="tiny")
    >>> out = model(**inputs)                       # eager
    >>> ex = fl.explore(model, **inputs)            # fusionlab
    >>> compiled = torch.compile(model, backend="fusionlab")

Each model comes at two sizes: "tiny" (CPU tests, seconds) and "gpu" (the sizes users run). `train=True` returns the
model in train mode with labels among its inputs, so `model(**inputs).loss` is the training loss. The models are
transformers' own (`transformers` is in the `models` extra).
"""

from fusionlab.models.zoo import ModelSpec, build, loss_of, names, spec, train_step

__all__ = ["ModelSpec", "build", "loss_of", "names", "spec", "train_step"]
