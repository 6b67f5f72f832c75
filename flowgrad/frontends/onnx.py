"""ONNX frontend (placeholder)."""


def from_onnx(model, backend=None):
    raise NotImplementedError
