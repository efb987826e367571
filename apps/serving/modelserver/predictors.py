"""Loaded models behind one interface: what they take (an input tensor spec), what they can answer (named
outputs) and `run(x, outputs)` on a stacked numpy batch. One class per framework family; loading.py builds them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Open Inference Protocol v2 datatypes and the numpy dtype each one decodes to.
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}


def datatype_of(dtype: np.dtype) -> str:
    """The OIP datatype naming a numpy dtype (strings and objects travel as BYTES)."""
    if dtype.kind in "USOT":
        return "BYTES"
    for name, candidate in DATATYPES.items():
        if candidate == dtype:
            return name
    return "FP64"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor a model takes or answers: name, OIP datatype and shape (-1 for a variable dimension; `shape`
    None when the model does not say, e.g. a PyTorch module without an MLflow signature)."""

    name: str
    datatype: str
    shape: tuple[int, ...] | None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape or (-1,))}


@dataclass
class Predictor:
    """A loaded model. `run` takes rows stacked on axis 0 (already of `dtype`) and returns one array per
    requested output, each with as many rows as the input."""

    platform: str
    input: TensorSpec
    outputs: dict[str, TensorSpec]
    default_outputs: tuple[str, ...]
    feature_names: list[str] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def dtype(self) -> np.dtype:
        return DATATYPES[self.input.datatype]

    def run(self, x: np.ndarray, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def probe(self, rows: int) -> float:
        """Run every output once on `rows` zero rows (empty strings for a BYTES input) to fill in the output
        datatypes and shapes the model did not declare; return the median seconds of the default outputs on those
        rows (the batcher decides from it whether predict needs a thread).
        Raises when the model rejects zeros; the caller keeps the declared specs then."""
        if self.input.shape is None or any(dim < 0 for dim in self.input.shape[1:]):
            raise ValueError("input shape unknown")
        shape = (rows, *self.input.shape[1:])
        # Strings for a BYTES input (a text model's vectoriser refuses numbers), zeros otherwise.
        x = np.full(shape, "", dtype=object) if self.input.datatype == "BYTES" else np.zeros(shape, dtype=self.dtype)
        results = self.run(x, tuple(self.outputs))  # also the warm-up: first calls fill caches
        for name, value in results.items():
            value = np.asarray(value)
            self.outputs[name] = TensorSpec(name, datatype_of(value.dtype), (-1, *value.shape[1:]))
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            self.run(x, self.default_outputs)
            timings.append(time.perf_counter() - started)
        return sorted(timings)[1]


class SklearnPredictor(Predictor):
    """scikit-learn estimators and pipelines, and anything with their API (XGBoost's and LightGBM's sklearn
    wrappers): outputs `predict`, and `predict_proba` when the estimator has it."""

    METHODS = ("predict", "predict_proba", "decision_function")

    def __init__(self, model: Any, platform: str = "sklearn", input: TensorSpec | None = None,
                 feature_names: list[str] | None = None, parameters: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.model = model
        names = getattr(model, "feature_names_in_", None)
        feature_names = [str(name) for name in names] if names is not None else feature_names
        if input is None:
            n = getattr(model, "n_features_in_", None) or (len(feature_names) if feature_names else None)
            input = TensorSpec("input-0", "FP64", (-1, int(n)) if n else None)
        outputs = {}
        for method in self.METHODS:
            if hasattr(model, method):  # available_if hides predict_proba of e.g. SVC(probability=False)
                outputs[method] = TensorSpec(method, "FP64", (-1, -1) if method != "predict" else (-1,))
        classes = getattr(model, "classes_", None)
        if classes is not None and "predict" in outputs:
            outputs["predict"] = TensorSpec("predict", datatype_of(np.asarray(classes).dtype), (-1,))
        params = dict(parameters or {})
        if classes is not None:
            params["classes"] = np.asarray(classes).tolist()
        super().__init__(platform, input, outputs, ("predict",), feature_names, params)

    def run(self, x: np.ndarray, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        return {name: getattr(self.model, name)(x) for name in outputs}


class BoosterPredictor(Predictor):
    """A raw xgboost.Booster (MLflow's xgboost flavour with model_class Booster, or a .ubj/.xgb file)."""

    def __init__(self, booster: Any, parameters: dict[str, Any] | None = None) -> None:
        self.booster = booster
        n = booster.num_features()
        names = booster.feature_names
        super().__init__(
            "xgboost",
            TensorSpec("input-0", "FP32", (-1, n)),
            {"predict": TensorSpec("predict", "FP32", (-1,))},
            ("predict",),
            list(names) if names else None,
            dict(parameters or {}),
        )

    def run(self, x: np.ndarray, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        # inplace_predict takes the numpy array as it is: no DMatrix copy per batch.
        return {"predict": self.booster.inplace_predict(x)}


ONNX_TYPES = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int64)": "INT64",
    "tensor(int32)": "INT32",
    "tensor(int16)": "INT16",
    "tensor(int8)": "INT8",
    "tensor(uint8)": "UINT8",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}


def _onnx_shape(shape: list[Any]) -> tuple[int, ...]:
    return tuple(dim if isinstance(dim, int) and dim >= 0 else -1 for dim in shape)


class OnnxPredictor(Predictor):
    """An ONNX graph run by onnxruntime (CPU). One input tensor; every tensor output can be asked for by name,
    and all of them are answered by default (non-tensor outputs such as skl2onnx's ZipMap are left out), but for a
    graph with an output named `predict` (the onnx-optimise template names a classifier's outputs as the model server
    does a scikit-learn model's: predict, predict_proba), which alone is answered by default, as for that model."""

    def __init__(
        self, session: Any, parameters: dict[str, Any] | None = None, feature_names: list[str] | None = None
    ) -> None:
        self.session = session
        inputs = session.get_inputs()
        if len(inputs) != 1:
            names = ", ".join(i.name for i in inputs)
            raise ValueError(f"the ONNX graph has {len(inputs)} inputs ({names}); the model server feeds one")
        first = inputs[0]
        if first.type not in ONNX_TYPES:
            raise ValueError(f"the ONNX input {first.name!r} is a {first.type}, not a tensor")
        outputs = {
            out.name: TensorSpec(out.name, ONNX_TYPES[out.type], _onnx_shape(out.shape))
            for out in session.get_outputs()
            if out.type in ONNX_TYPES
        }
        if not outputs:
            raise ValueError("the ONNX graph has no tensor output")
        self.onnx_input = first.name
        super().__init__(
            "onnx",
            TensorSpec(first.name, ONNX_TYPES[first.type], _onnx_shape(first.shape)),
            outputs,
            ("predict",) if "predict" in outputs else tuple(outputs),
            feature_names if feature_names and len(first.shape) == 2 and first.shape[1] == len(feature_names) else None,
            dict(parameters or {}),
        )

    def run(self, x: np.ndarray, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        values = self.session.run(list(outputs), {self.onnx_input: x})
        return dict(zip(outputs, values, strict=True))


class TorchPredictor(Predictor):
    """A PyTorch module (TorchScript or a pickled nn.Module) in eval mode on CPU: output `predict` is what
    forward returns (a tuple answers `output-0`, `output-1`, …; a dict of tensors answers its keys, e.g.
    `predict` and `predict_proba` as a scikit-learn classifier does)."""

    def __init__(self, module: Any, input: TensorSpec | None, parameters: dict[str, Any] | None = None) -> None:
        import torch

        self.torch = torch
        with contextlib.suppress(AttributeError, NotImplementedError):  # torch.export modules have no eval()
            module.eval()
        self.module = module
        super().__init__(
            "pytorch",
            input or TensorSpec("input-0", "FP32", None),
            {"predict": TensorSpec("predict", "FP32", None)},
            ("predict",),
            None,
            dict(parameters or {}),
        )

    def forward(self, x: np.ndarray) -> dict[str, np.ndarray]:
        try:
            with self.torch.inference_mode():
                result = self.module(self.torch.from_numpy(np.ascontiguousarray(x)))
        except (RuntimeError, AssertionError) as exc:  # torch.export's shape guards assert
            # Without a signature the input shape is unchecked: torch's shape complaints are the caller's (400).
            if any(word in str(exc) for word in ("shape", "size", "dimension", "Expected", "Guard failed")):
                raise ValueError(str(exc)) from None
            raise
        if isinstance(result, dict):
            return {str(name): r.detach().cpu().numpy() for name, r in result.items()}
        if isinstance(result, tuple | list):
            return {f"output-{i}": r.detach().cpu().numpy() for i, r in enumerate(result)}
        return {"predict": result.detach().cpu().numpy()}

    def run(self, x: np.ndarray, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        answered = self.forward(x)
        return {name: answered[name] for name in outputs}

    def probe(self, rows: int) -> float:
        if self.input.shape is None or any(dim < 0 for dim in self.input.shape[1:]):
            raise ValueError("input shape unknown")
        # forward may answer a tuple: learn the output names before the generic probe asks for them.
        answered = self.forward(np.zeros((1, *self.input.shape[1:]), dtype=self.dtype))
        self.outputs = {name: TensorSpec(name, "FP32", None) for name in answered}
        self.default_outputs = tuple(answered)
        return super().probe(rows)
