"""Model loading: an MLflow Model folder (MLmodel + flavours), a plain model file (model.joblib as the
sklearn-train template writes it, .pkl, .skops, .onnx, .pt/.pth, .ubj/.xgb), or a folder holding one of those.

Pickles (joblib, pickle, cloudpickle, torch.save) execute code when loaded: the model server loads them only
because the control plane starts it on artifacts of the project's own registry, which only project members
can write. Never point it at a file from elsewhere. skops files are checked against their trusted types."""

from __future__ import annotations

import json
import pickle  # nosec B403  # trusted artifacts of the project's own registry (module docstring)
import sys
from pathlib import Path
from typing import Any

from apps.serving.modelserver.predictors import (
    BoosterPredictor,
    OnnxPredictor,
    Predictor,
    SklearnPredictor,
    TensorSpec,
    TorchPredictor,
)

PICKLES = (".joblib", ".pkl", ".pickle")
MODEL_SUFFIXES = (*PICKLES, ".skops", ".onnx", ".pt", ".pth", ".pt2", ".ubj", ".xgb")
# MLflow signature types (column-based) and numpy dtype names (tensor-based) as OIP datatypes.
SIGNATURE_TYPES = {
    "double": "FP64", "float": "FP32", "long": "INT64", "integer": "INT32", "boolean": "BOOL",
    "string": "BYTES", "binary": "BYTES",
    "float64": "FP64", "float32": "FP32", "float16": "FP16", "int64": "INT64", "int32": "INT32",
    "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32",
    "uint64": "UINT64", "bool": "BOOL", "str": "BYTES", "object": "BYTES",
}  # fmt: skip
LOADER_MODULES = {
    "mlflow.sklearn": "sklearn",
    "mlflow.xgboost": "xgboost",
    "mlflow.onnx": "onnx",
    "mlflow.pytorch": "pytorch",
}


class LoadError(Exception):
    """The model cannot be served: missing file, unknown format, or a framework not installed here."""


def load(path: str | Path) -> Predictor:
    """The predictor for a model file or folder; raises LoadError with a message fit for the user."""
    path = Path(path)
    if not path.exists():
        raise LoadError(f"no model at {path}")
    if path.is_dir():
        return _load_dir(path)
    return _load_file(path, {})


def _load_dir(folder: Path) -> Predictor:
    if (folder / "MLmodel").is_file():
        return _load_mlflow(folder)
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in MODEL_SUFFIXES)
    named_model = [p for p in files if p.stem == "model"]
    if len(named_model) == 1 or len(files) == 1:
        return _load_file((named_model or files)[0], _sidecar_params(folder))
    if files:
        raise LoadError(f"{folder} holds several model files ({', '.join(p.name for p in files)}): name one")
    nested = sorted(p.parent for p in folder.glob("*/MLmodel")) + sorted(p.parent for p in folder.glob("*/*/MLmodel"))
    if len(nested) == 1:
        return _load_mlflow(nested[0])
    if nested:
        raise LoadError(f"{folder} holds several MLflow models ({', '.join(str(p) for p in nested)}): name one")
    raise LoadError(f"{folder} holds no model (an MLmodel file or one of {', '.join(MODEL_SUFFIXES)})")


def _sidecar_params(folder: Path) -> dict[str, Any]:
    """Feature names from the params.json the sklearn-train template writes beside model.joblib."""
    try:
        params = json.loads((folder / "params.json").read_text())
    except (OSError, ValueError):
        return {}
    features = params.get("features") if isinstance(params, dict) else None
    if isinstance(features, list) and all(isinstance(f, str) for f in features):
        return {"feature_names": features}
    return {}


def _load_file(path: Path, extra: dict[str, Any]) -> Predictor:
    suffix = path.suffix.lower()
    if suffix in PICKLES:
        return _estimator(_unpickle(path), extra)
    if suffix == ".skops":
        return _estimator(_load_skops(path, None), extra)
    if suffix == ".onnx":
        return _onnx(path)
    if suffix in (".pt", ".pth", ".pt2"):
        return _torch(path, None)
    if suffix in (".ubj", ".xgb"):
        return _xgboost(path, "xgboost.core.Booster")
    raise LoadError(f"{path.name}: unknown model file type (known: {', '.join(MODEL_SUFFIXES)})")


def _load_mlflow(folder: Path) -> Predictor:
    import yaml

    try:
        mlmodel = yaml.safe_load((folder / "MLmodel").read_text()) or {}
        flavors = mlmodel.get("flavors") or {}
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise LoadError(f"{folder / 'MLmodel'} is not a readable MLmodel file: {exc}") from None
    signature = _signature_input(mlmodel.get("signature") or {})
    params = {"source": "mlflow", "mlflow_version": mlmodel.get("mlflow_version")}
    if isinstance(mlmodel.get("metadata"), dict):  # MLflow's free-form model metadata (e.g. an image input's range)
        params["metadata"] = mlmodel["metadata"]
    if signature and signature[1]:
        params["feature_names"] = signature[1]
    extra = {"input": signature[0] if signature else None, **params}
    pyfunc = flavors.get("python_function") or {}
    flavor = next((f for f in ("sklearn", "xgboost", "onnx", "pytorch") if f in flavors), None)
    if flavor is None:
        flavor = LOADER_MODULES.get(pyfunc.get("loader_module", ""))
    if flavor is None:
        raise LoadError(
            f"{folder}: flavours {', '.join(flavors) or 'none'} (python_function loader "
            f"{pyfunc.get('loader_module')!r}); the model server loads sklearn, xgboost, onnx and pytorch models"
        )
    spec = flavors.get(flavor) or {}
    if flavor == "sklearn":
        file = folder / (spec.get("pickled_model") or pyfunc.get("model_path") or "model.pkl")
        fmt = spec.get("serialization_format") or ("skops" if file.suffix == ".skops" else "pickle")
        model = _load_skops(file, spec.get("skops_trusted_types")) if fmt == "skops" else _unpickle(file)
        return _estimator(model, extra)
    if flavor == "xgboost":
        file = folder / (spec.get("data") or pyfunc.get("data") or "model.xgb")
        return _xgboost(file, spec.get("model_class") or "xgboost.core.Booster", extra)
    if flavor == "onnx":
        return _onnx(folder / (spec.get("data") or pyfunc.get("data") or "model.onnx"), params)
    data = folder / (spec.get("model_data") or pyfunc.get("model_path") or "data")
    if data.is_dir():  # MLflow 3 writes model.pt2 (torch.export) by default, model.pth (pickle) on request
        data = next((data / n for n in ("model.pt2", "model.pth") if (data / n).is_file()), data / "model.pth")
    return _torch(data, extra.get("input"), params)


def _signature_input(signature: dict[str, Any]) -> tuple[TensorSpec, list[str] | None] | None:
    """The input spec (and column names) an MLflow signature declares, when it declares one tensor or columns."""
    try:
        inputs = json.loads(signature.get("inputs") or "null")
    except (TypeError, ValueError):
        return None
    if not isinstance(inputs, list) or not inputs:
        return None
    if inputs[0].get("type") == "tensor" and len(inputs) == 1:
        tensor = inputs[0].get("tensor-spec") or {}
        shape = tuple(int(dim) for dim in tensor.get("shape") or (-1,))
        return TensorSpec(
            inputs[0].get("name") or "input-0", SIGNATURE_TYPES.get(tensor.get("dtype"), "FP64"), shape
        ), None
    types = {SIGNATURE_TYPES.get(col.get("type"), "BYTES") for col in inputs}
    if "BYTES" in types or len(inputs) != len([c for c in inputs if c.get("name")]):
        return None  # mixed or string columns need a DataFrame: let the estimator decide
    datatype = types.pop() if len(types) == 1 else "FP64"
    names = [col["name"] for col in inputs]
    return TensorSpec("input-0", datatype, (-1, len(names))), names


def _missing(package: str, what: str) -> LoadError:
    return LoadError(
        f"{what} needs the Python package {package!r}, which is not installed in this environment "
        f"({sys.executable}): install it there or serve the model from an environment that has it"
    )


def _unpickle(path: Path) -> Any:
    try:
        try:
            import joblib
        except ImportError:  # joblib comes with scikit-learn; a plain pickle still loads without it
            with path.open("rb") as fh:
                return pickle.load(fh)  # nosec B301  # trusted artifacts of the project's own registry
        # joblib reads plain pickles too, and people save joblib dumps as .pkl
        return joblib.load(path)  # nosec B301  # trusted artifacts of the project's own registry
    except ModuleNotFoundError as exc:
        raise _missing((exc.name or "?").split(".")[0], f"the pickled model {path.name}") from None
    except FileNotFoundError:
        raise LoadError(f"no model file at {path}") from None
    except Exception as exc:  # a corrupt pickle can raise almost anything
        raise LoadError(f"{path.name} could not be unpickled: {type(exc).__name__}: {exc}") from None


def _load_skops(path: Path, trusted: list[str] | None) -> Any:
    try:
        import skops.io as sio
    except ImportError:
        raise _missing("skops", f"the skops model {path.name}") from None
    if not path.is_file():
        raise LoadError(f"no model file at {path}")
    untrusted = set(sio.get_untrusted_types(file=path)) - set(trusted or ())
    if untrusted:
        raise LoadError(
            f"{path.name} holds types skops does not trust by default: {', '.join(sorted(untrusted))}; "
            "list them in MLmodel's skops_trusted_types if they are yours"
        )
    try:
        return sio.load(path, trusted=list(trusted or ()))
    except Exception as exc:
        raise LoadError(f"{path.name} could not be loaded by skops: {type(exc).__name__}: {exc}") from None


def _estimator(model: Any, extra: dict[str, Any]) -> Predictor:
    if not hasattr(model, "predict"):
        raise LoadError(f"the loaded object is a {type(model).__name__}, which has no predict method")
    family = type(model).__module__.split(".")[0]
    platform = family if family in ("xgboost", "lightgbm", "catboost") else "sklearn"
    params = {k: v for k, v in extra.items() if k not in ("input", "feature_names") and v is not None}
    return SklearnPredictor(model, platform, extra.get("input"), extra.get("feature_names"), params)


def _xgboost(path: Path, model_class: str, extra: dict[str, Any] | None = None) -> Predictor:
    try:
        import xgboost
    except ImportError:
        raise _missing("xgboost", f"the XGBoost model {path.name}") from None
    module, _, name = model_class.rpartition(".")
    if not module.startswith("xgboost") or not hasattr(xgboost, name):
        raise LoadError(f"unknown XGBoost model class {model_class!r}")
    try:
        model = getattr(xgboost, name)()
        model.load_model(str(path))
    except Exception as exc:
        raise LoadError(f"{path.name} could not be loaded by xgboost: {exc}") from None
    params = {k: v for k, v in (extra or {}).items() if k not in ("input", "feature_names") and v is not None}
    if isinstance(model, xgboost.Booster):
        return BoosterPredictor(model, params)
    return SklearnPredictor(model, "xgboost", (extra or {}).get("input"), (extra or {}).get("feature_names"), params)


def _onnx(path: Path, params: dict[str, Any] | None = None) -> Predictor:
    try:
        import onnxruntime
    except ImportError:
        raise _missing("onnxruntime", f"the ONNX model {path.name}") from None
    try:
        options = onnxruntime.SessionOptions()
        # One replica is one process on a shared machine: the replica count, not intra-op threads, scales it.
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        extra = {k: v for k, v in (params or {}).items() if k != "feature_names" and v is not None}
        # The MLmodel's column signature (the onnx-optimise template copies the source's) names the input's columns.
        return OnnxPredictor(session, extra, (params or {}).get("feature_names"))
    except Exception as exc:
        raise LoadError(f"{path.name} could not be loaded by onnxruntime: {exc}") from None


def _torch(path: Path, input: TensorSpec | None, params: dict[str, Any] | None = None) -> Predictor:
    try:
        import torch
    except ImportError:
        raise _missing("torch", f"the PyTorch model {path.name}") from None
    if not path.is_file():
        raise LoadError(f"no model file at {path}")
    try:
        if path.suffix == ".pt2":  # torch.export's archive
            module = torch.export.load(str(path)).module()
        else:
            try:
                module = torch.jit.load(str(path), map_location="cpu")
            except RuntimeError:  # not TorchScript: a pickled nn.Module (torch.save, MLflow with pickle format)
                module = torch.load(path, map_location="cpu", weights_only=False)  # nosec B614  # trusted registry
    except ModuleNotFoundError as exc:
        raise _missing((exc.name or "?").split(".")[0], f"the PyTorch model {path.name}") from None
    except Exception as exc:
        raise LoadError(f"{path.name} could not be loaded by torch: {exc}") from None
    if not callable(module):
        raise LoadError(f"{path.name} holds a {type(module).__name__} (a state dict?), not a module")
    return TorchPredictor(module, input, {k: v for k, v in (params or {}).items() if v is not None})
