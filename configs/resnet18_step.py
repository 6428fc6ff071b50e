"""A real training step for loadtune: a torchvision ResNet-18 trained on each batch.

Used by configs/resnet18.yaml as `step.factory: resnet18_step.py:make_step`. The factory is
called once per trial with the trial's device; the step it returns runs forward, backward
and an optimizer step on a batch of (images, labels) already on that device. On CUDA it
uses bfloat16 autocast and channels-last, as a tuned training script would; loadtune
synchronises the device after each step, so the kernels are timed, not just launched.
"""

from __future__ import annotations

from typing import Any, Callable


def make_step(device: str = "cuda", num_classes: int = 10, lr: float = 0.05, amp: bool = True,
              channels_last: bool = True) -> Callable[[Any], None]:
    import torch
    import torchvision

    target = torch.device(device)
    on_cuda = target.type == "cuda"
    model = torchvision.models.resnet18(num_classes=num_classes).to(target)
    if on_cuda and channels_last:
        model = model.to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    use_amp = amp and on_cuda

    def step(batch: Any) -> None:
        images, labels = batch
        if on_cuda and channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=target.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step.model = model  # type: ignore[attr-defined]
    return step
