"""tilepy.models.zoo: ready-made models built from tilepy.models.nn, each with a test that
trains it a few steps and a script (`python -m tilepy.models.zoo.digits`) that trains it to
a stated accuracy. MLP and LeNet-5 (adapted to 8x8 digits) for now."""

from tilepy.models.zoo.vision import lenet5, mlp

__all__ = ["lenet5", "mlp"]
