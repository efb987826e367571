"""ONNX for the onnx-optimise task: load a scikit-learn or PyTorch model (an MLflow Model folder or a model file),
convert it (skl2onnx, torch.onnx), quantise the graph (onnxruntime's dynamic INT8, onnxconverter-common's FP16) and
time it. Needs onnx, onnxruntime, skl2onnx and onnxconverter-common: the "train" task environment has them
(requirements-train.txt). Imported lazily by onnx_optimise, so that the package imports without them."""

from __future__ import annotations

import json
import pickle  # nosec B403  # the project's own registered model, loaded inside the task's sandbox
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from apps.jobs.builtin_tasks._common import TaskError

PICKLES = (".joblib", ".pkl", ".pickle")
TORCH_FILES = (".pt", ".pth", ".pt2")
# What skl2onnx names a classifier's outputs, renamed to what the model server answers for a scikit-learn model, so
# that a client of the original version asks the ONNX version for the same outputs.
SKLEARN_OUTPUTS = {"label": "predict", "probabilities": "predict_proba", "variable": "predict"}
OPSET = 21  # ai.onnx opset of the graphs skl2onnx writes (onnxruntime 1.32 runs up to 23)
QUANTISED_OPS = {"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QLinearMatMul", "QLinearConv", "QAttention"}


@dataclass
class Source:
    """The model to optimise: its framework, the loaded object, the file whose size is its size, and what its MLmodel
    says (feature columns, a tensor input's name and shape, class names, free-form metadata)."""

    flavour: str  # "sklearn" or "pytorch"
    model: Any
    file: Path
    features: list[str] | None = None
    input_name: str = "input"
    input_shape: tuple[int, ...] | None = None  # without the batch dimension
    classes: list[Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    signature: dict[str, Any] | None = None
    torchscript: bool = False
    exported: Any = None  # torch.export's ExportedProgram of a .pt2 (what the exporter takes; `model` is its module)


def missing_packages() -> list[str]:
    import importlib.util

    names = ("onnx", "onnxruntime", "skl2onnx", "onnxconverter_common")
    return [name for name in names if importlib.util.find_spec(name) is None]


# --- loading ---------------------------------------------------------------------------------------------------------


def load_source(path: Path) -> Source:
    """A model file (.joblib/.pkl, .pt/.pth/.pt2) or a folder: an MLflow Model (MLmodel, or one folder down under
    model/) or a folder holding model.joblib (the sklearn-train output, with its params.json)."""
    if path.is_dir():
        for folder in (path, path / "model"):
            if (folder / "MLmodel").is_file():
                return _load_mlflow(folder)
        for name in ("model.joblib", "model.pkl", "model.pt", "model.pth", "model.pt2"):
            if (path / name).is_file():
                return load_source(path / name)
        raise TaskError(f"--model: no MLmodel, model.joblib, model.pkl or model.pt in {path}")
    if not path.is_file():
        raise TaskError(f"--model: {path} does not exist")
    if path.suffix in PICKLES:
        source = Source("sklearn", _unpickle(path), path)
        params = path.with_name("params.json")
        if params.is_file():
            record = json.loads(params.read_text(encoding="utf-8"))
            source.features = [str(name) for name in record.get("features") or []] or None
        return source
    if path.suffix in TORCH_FILES:
        return _torch_source(path)
    raise TaskError(f"--model: {path.name} is neither a scikit-learn pickle nor a PyTorch file")


def _load_mlflow(folder: Path) -> Source:
    try:
        mlmodel = json.loads((folder / "MLmodel").read_text(encoding="utf-8"))
    except ValueError:  # YAML, as the mlflow package writes it
        try:
            import yaml
        except ImportError:
            raise TaskError(f"{folder / 'MLmodel'} is YAML and PyYAML is not installed here") from None
        mlmodel = yaml.safe_load((folder / "MLmodel").read_text(encoding="utf-8")) or {}
    flavors = mlmodel.get("flavors") or {}
    metadata = mlmodel.get("metadata") if isinstance(mlmodel.get("metadata"), dict) else {}
    source: Source
    if "sklearn" in flavors:
        spec = flavors["sklearn"]
        file = folder / (spec.get("pickled_model") or "model.pkl")
        if spec.get("serialization_format") == "skops" or file.suffix == ".skops":
            import skops.io as sio

            model = sio.load(file, trusted=list(spec.get("skops_trusted_types") or ()))
        else:
            model = _unpickle(file)
        source = Source("sklearn", model, file)
    elif "pytorch" in flavors:
        data = folder / (flavors["pytorch"].get("model_data") or "data")
        if data.is_dir():
            data = next((data / n for n in ("model.pt2", "model.pth", "model.pt") if (data / n).is_file()), data)
        source = _torch_source(data)
    else:
        raise TaskError(f"{folder}: flavours {', '.join(flavors) or 'none'}; this task converts sklearn and pytorch")
    source.metadata = dict(metadata)
    if isinstance(metadata.get("classes"), list):
        source.classes = list(metadata["classes"])
    source.signature = mlmodel.get("signature") or None
    _read_signature(source)
    return source


def _read_signature(source: Source) -> None:
    try:
        inputs = json.loads((source.signature or {}).get("inputs") or "null")
    except (TypeError, ValueError):
        return
    if not isinstance(inputs, list) or not inputs:
        return
    if inputs[0].get("type") == "tensor" and len(inputs) == 1:
        shape = (inputs[0].get("tensor-spec") or {}).get("shape") or []
        source.input_name = str(inputs[0].get("name") or source.input_name)
        source.input_shape = tuple(int(dim) for dim in shape[1:]) or None
    elif all(column.get("name") for column in inputs):
        source.features = [str(column["name"]) for column in inputs]


def _unpickle(path: Path) -> Any:
    try:
        if path.suffix == ".joblib":
            import joblib

            return joblib.load(path)  # nosec B301  # the project's own registered model (module docstring)
        with path.open("rb") as fh:
            return pickle.load(fh)  # nosec B301
    except FileNotFoundError:
        raise TaskError(f"no model file at {path}") from None
    except Exception as exc:  # a corrupt pickle raises almost anything
        raise TaskError(f"{path.name} could not be unpickled: {type(exc).__name__}: {exc}", 1) from None


def _torch_source(path: Path) -> Source:
    """torch.export's .pt2, TorchScript, or a pickled nn.Module."""
    import torch

    if not path.is_file():
        raise TaskError(f"no PyTorch model file at {path}")
    try:
        if path.suffix == ".pt2":
            exported = torch.export.load(str(path))
            return Source("pytorch", exported.module(), path, exported=exported)
        try:
            return Source("pytorch", torch.jit.load(str(path), map_location="cpu"), path, torchscript=True)
        except RuntimeError:  # not TorchScript: a pickled module
            module = torch.load(path, map_location="cpu", weights_only=False)  # nosec B614  # module docstring
    except Exception as exc:  # a missing class of a pickled module, a corrupt file
        raise TaskError(f"{path.name} could not be loaded by torch: {type(exc).__name__}: {exc}", 1) from None
    if not isinstance(module, torch.nn.Module):
        raise TaskError(f"{path.name} holds a {type(module).__name__} (a state dict?), not a module", 1)
    return Source("pytorch", module, path)


# --- predicting with the original ------------------------------------------------------------------------------------


def torch_input(source: Source, x: np.ndarray) -> np.ndarray:
    """Rows of features as the module's input: float32, reshaped to the signature's tensor shape when it has one."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if source.input_shape and all(dim > 0 for dim in source.input_shape):
        x = x.reshape(len(x), *source.input_shape)
    return x


def torch_outputs(source: Source, x: np.ndarray) -> dict[str, np.ndarray]:
    """The module's outputs by the names the model server gives them: a tensor `predict`, a tuple `output-<i>`, a
    dict its keys."""
    import torch

    with torch.inference_mode():
        result = source.model(torch.from_numpy(torch_input(source, x)))
    if isinstance(result, dict):
        return {str(name): value.detach().numpy() for name, value in result.items()}
    if isinstance(result, tuple | list):
        return {f"output-{i}": value.detach().numpy() for i, value in enumerate(result)}
    return {"predict": result.detach().numpy()}


def classes_of(outputs: dict[str, np.ndarray]) -> np.ndarray:
    """The predicted class of each row: `predict` when it is one value per row, else the argmax of the first output
    that has one score per class."""
    ordered = ([outputs["predict"]] if "predict" in outputs else []) + list(outputs.values())
    for value in ordered:
        if value.ndim == 1 or (value.ndim == 2 and value.shape[1] == 1):
            return value.reshape(-1)
        if value.ndim == 2:
            return value.argmax(axis=1)
    raise TaskError("the model answers no output with one class or one score per class per row", 1)


# --- converting ------------------------------------------------------------------------------------------------------


def convert(source: Source, example: np.ndarray, path: Path) -> list[str]:
    """Write the model as one self-contained ONNX file at `path`; return its output names."""
    import onnx

    if source.flavour == "sklearn":
        model = convert_sklearn(source.model, example.shape[1])
    else:
        model = convert_torch(source, example, path.parent / "export")
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path), save_as_external_data=False)
    return [output.name for output in model.graph.output]


def convert_sklearn(estimator: Any, n_features: int) -> Any:
    """skl2onnx's graph of an estimator or pipeline taking float32 rows of `n_features`; a classifier answers
    `predict` and `predict_proba` (no ZipMap) as the model server does for the original."""
    from skl2onnx import to_onnx

    try:
        model = to_onnx(
            estimator,
            np.zeros((1, n_features), dtype=np.float32),
            options={"zipmap": False},
            target_opset={"": OPSET, "ai.onnx.ml": 3},
        )
    except Exception as exc:  # skl2onnx raises its own errors for estimators it has no converter for
        raise TaskError(
            f"skl2onnx cannot convert a {type(estimator).__name__}: {type(exc).__name__}: {exc}", 1
        ) from None
    rename_outputs(model, SKLEARN_OUTPUTS)
    return normalise_opsets(model)


def convert_torch(source: Source, example: np.ndarray, workdir: Path) -> Any:
    """torch.onnx's graph of the module with a dynamic batch dimension: torch.export-based (the default exporter) for a
    module, the TorchScript-based one for TorchScript, which is all that one takes."""
    import onnx
    import torch

    x = torch.from_numpy(torch_input(source, example[:2]))
    names = list(torch_outputs(source, example[:2]))
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / "model.onnx"
    module = source.exported if source.exported is not None else source.model
    with torch.inference_mode(False), torch.no_grad():
        if not source.torchscript:
            try:
                if source.exported is None:
                    module.eval()
                torch.onnx.export(
                    module,
                    (x,),
                    str(target),
                    input_names=[source.input_name],
                    output_names=names,
                    dynamic_shapes=({0: torch.export.Dim("batch")},),
                    dynamo=True,
                    verbose=False,
                )
                return onnx.load_model(str(target))
            except Exception as exc:  # torch.export refuses some modules the tracer takes
                if source.exported is not None:
                    raise TaskError(
                        f"torch.onnx cannot export {source.file.name}: {type(exc).__name__}: {exc}", 1
                    ) from None
                print(f"torch.export-based export failed ({type(exc).__name__}: {exc}); trying the TorchScript one")
        axes = {source.input_name: {0: "batch"}, **{name: {0: "batch"} for name in names}}
        try:
            torch.onnx.export(
                module,
                (x,),
                str(target),
                input_names=[source.input_name],
                output_names=names,
                dynamic_axes=axes,
                opset_version=18,
                dynamo=False,
            )
        except Exception as exc:
            raise TaskError(f"torch.onnx cannot export {source.file.name}: {type(exc).__name__}: {exc}", 1) from None
    return onnx.load_model(str(target))


def rename_outputs(model: Any, names: dict[str, str]) -> None:
    for output in model.graph.output:
        new = names.get(output.name)
        if new is None:
            continue
        for node in model.graph.node:
            node.output[:] = [new if value == output.name else value for value in node.output]
        output.name = new


def normalise_opsets(model: Any) -> Any:
    """One import per domain (skl2onnx may list ai.onnx twice) and always ai.onnx, which onnxruntime's quantiser
    requires even of a graph of ai.onnx.ml operators only."""
    import onnx

    versions: dict[str, int] = {}
    for opset in model.opset_import:
        domain = "" if opset.domain == "ai.onnx" else opset.domain
        versions[domain] = max(versions.get(domain, 0), opset.version)
    versions.setdefault("", OPSET)
    del model.opset_import[:]
    model.opset_import.extend(onnx.helper.make_opsetid(domain, version) for domain, version in versions.items())
    return model


# --- quantising ------------------------------------------------------------------------------------------------------


def quantise_int8(fp32: Path, target: Path) -> None:
    """Dynamic INT8: weights of MatMul/Gemm (and the like) stored as int8, activations quantised at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(fp32), str(target), weight_type=QuantType.QInt8)


def convert_fp16(fp32: Path, target: Path) -> None:
    """FP16 weights and arithmetic, float32 in and out (keep_io_types), so clients send what they sent before;
    operators without an FP16 kernel (the ai.onnx.ml ones of scikit-learn graphs) stay FP32 behind Casts."""
    import onnx
    from onnxconverter_common import float16

    model = float16.convert_float_to_float16(onnx.load_model(str(fp32)), keep_io_types=True)
    onnx.save_model(model, str(target), save_as_external_data=False)


def quantised_operators(path: Path) -> int:
    """How many nodes of the graph run in INT8 (0: nothing was quantisable, e.g. tree ensembles)."""
    import onnx

    return sum(1 for node in onnx.load_model(str(path)).graph.node if node.op_type in QUANTISED_OPS)


# --- running and timing ----------------------------------------------------------------------------------------------


class OnnxModel:
    """An ONNX file in onnxruntime on CPU with one intra-op thread, as the model server runs it."""

    def __init__(self, path: Path) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0]
        self.names = [output.name for output in self.session.get_outputs()]

    def outputs(self, x: np.ndarray, source: Source) -> dict[str, np.ndarray]:
        x = torch_input(source, x) if source.flavour == "pytorch" else np.ascontiguousarray(x, dtype=np.float32)
        return dict(zip(self.names, self.session.run(self.names, {self.input.name: x}), strict=True))


def median_ms(predict: Any, x: np.ndarray, runs: int) -> float:
    """The median wall time of `predict(x)` in milliseconds over `runs` calls, after one warm-up call."""
    predict(x)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        predict(x)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000
