"""The Open Inference Protocol v2 (REST) on the wire: an inference request decoded into one numpy batch the model
accepts, and the response encoded back. Every way a request can be wrong is a BadRequest with a message naming
the problem (the app answers it with 400).

Tensors travel as JSON `data`, or raw after the JSON (the binary tensor data extension of Triton and KServe,
what `tritonclient` sends by default): the `Inference-Header-Content-Length` header gives the JSON's length, an
input with parameter `binary_data_size` takes that many bytes from what follows, in input order; outputs asked
for with `binary_data` (or all of them with the request parameter `binary_data_output`) come back the same way.
Binary data is little-endian, row-major, unpadded; a BYTES element is a 4-byte little-endian length and its
bytes; BOOL one byte per element."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from apps.serving.modelserver.predictors import DATATYPES, Predictor, datatype_of

_LENGTH = struct.Struct("<I")  # a BYTES element's length in binary data


class BadRequest(Exception):
    """The request is not one the model can answer; the message says why (400)."""


@dataclass
class InferenceRequest:
    """A decoded request: the rows as one array of the model's dtype, the outputs asked for, the id to echo."""

    x: np.ndarray
    outputs: tuple[str, ...]
    id: str | None
    binary: frozenset[str] = frozenset()  # the outputs to answer as binary data


def parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None


def decode_request(body: bytes, predictor: Predictor, header_length: int | None = None) -> InferenceRequest:
    """`header_length`: the Inference-Header-Content-Length header (the JSON's size when binary tensors follow
    it), None without one."""
    binary = memoryview(b"")
    if header_length is not None:
        if not 0 < header_length <= len(body):
            raise BadRequest(
                f"Inference-Header-Content-Length is {header_length}, but the body holds {len(body)} bytes"
            )
        binary = memoryview(body)[header_length:]
        body = body[:header_length]
    payload = parse_json(body)
    if not isinstance(payload, dict):
        raise BadRequest("the body must be a JSON object with an 'inputs' list")
    inputs = payload.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("'inputs' must be a non-empty list of tensors")
    request_id = payload.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequest("'id' must be a string")
    parameters = payload.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise BadRequest("'parameters' must be an object")
    offset = 0
    tensors = []
    for i, tensor in enumerate(inputs):
        name, array, used = decode_tensor(tensor, i, binary[offset:])
        tensors.append((name, array))
        offset += used
    if offset != len(binary):
        raise BadRequest(
            f"the inputs' binary_data_size add up to {offset} bytes, but {len(binary)} follow the JSON header"
        )
    x = _model_input(tensors, predictor)
    names, as_binary = _requested_outputs(payload.get("outputs"), predictor, _flag(parameters, "binary_data_output"))
    return InferenceRequest(x, names, request_id, as_binary)


def _flag(parameters: Any, key: str) -> bool:
    value = parameters.get(key, False) if isinstance(parameters, dict) else False
    if not isinstance(value, bool):
        raise BadRequest(f"parameter {key!r} must be true or false")
    return value


def decode_tensor(tensor: Any, index: int, binary: memoryview | None = None) -> tuple[str, np.ndarray, int]:
    """One request input as (name, array of its declared datatype and shape, bytes it took from `binary`: the
    raw data after the JSON header, from this input's start)."""
    if not isinstance(tensor, dict):
        raise BadRequest(f"inputs[{index}] must be an object with name, shape, datatype and data")
    name = tensor.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"inputs[{index}] needs a 'name'")
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise BadRequest(f"input {name!r}: 'shape' must be a list of non-negative integers")
    datatype = tensor.get("datatype")
    if datatype not in DATATYPES:
        raise BadRequest(f"input {name!r}: unknown datatype {datatype!r} (one of {', '.join(DATATYPES)})")
    parameters = tensor.get("parameters")
    size = parameters.get("binary_data_size") if isinstance(parameters, dict) else None
    expected = math.prod(shape)
    if size is not None:
        if "data" in tensor:
            raise BadRequest(f"input {name!r}: both 'data' and binary_data_size; send one")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadRequest(f"input {name!r}: binary_data_size must be a non-negative integer")
        if binary is None or len(binary) < size:
            left = 0 if binary is None else len(binary)
            raise BadRequest(
                f"input {name!r}: binary_data_size is {size}, but {left} bytes of binary data are left"
                + ("" if left else " (binary data needs the Inference-Header-Content-Length header)")
            )
        array = _from_binary(name, binary[:size], datatype, expected)
        return name, array.reshape(shape), size
    if "data" not in tensor:
        raise BadRequest(f"input {name!r}: 'data' is missing")
    array = _convert(name, tensor["data"], datatype)
    if array.size != expected:
        raise BadRequest(f"input {name!r}: shape {shape} needs {expected} values, but data holds {array.size}")
    return name, array.reshape(shape), 0


def _from_binary(name: str, raw: memoryview, datatype: str, count: int) -> np.ndarray:
    """A binary tensor's elements: fixed-size little-endian values, or length-prefixed BYTES elements."""
    if datatype == "BYTES":
        values: list[str | bytes] = []
        offset = 0
        while offset < len(raw):
            if offset + 4 > len(raw):
                raise BadRequest(f"input {name!r}: BYTES data ends inside an element's 4-byte length")
            (length,) = _LENGTH.unpack_from(raw, offset)
            offset += 4
            if offset + length > len(raw):
                raise BadRequest(f"input {name!r}: a BYTES element of {length} bytes runs past binary_data_size")
            value = bytes(raw[offset : offset + length])
            offset += length
            try:  # text, as a JSON string would have been; other bytes stay bytes
                values.append(value.decode("utf-8"))
            except UnicodeDecodeError:
                values.append(value)
        if len(values) != count:
            raise BadRequest(f"input {name!r}: the shape needs {count} values, but the binary data holds {len(values)}")
        array = np.empty(count, dtype=object)
        array[:] = values
        return array
    dtype = DATATYPES[datatype].newbyteorder("<")
    if len(raw) != count * dtype.itemsize:
        raise BadRequest(
            f"input {name!r}: the shape needs {count} {datatype} values ({count * dtype.itemsize} bytes), "
            f"but binary_data_size is {len(raw)}"
        )
    array = np.frombuffer(raw, dtype=dtype)
    if datatype == "BOOL" and array.size and (array.view(np.uint8) > 1).any():
        raise BadRequest(f"input {name!r}: BOOL bytes must be 0 or 1")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise BadRequest(f"input {name!r}: values must be finite (NaN and infinity are not numbers a model takes)")
    return array.astype(DATATYPES[datatype], copy=False)


def _convert(name: str, data: Any, datatype: str) -> np.ndarray:
    target = DATATYPES[datatype]
    if datatype == "BYTES":
        try:
            array = np.array(data, dtype=object)
        except ValueError:
            raise BadRequest(f"input {name!r}: data is ragged (nested lists of different lengths)") from None
        if array.dtype != object or any(not isinstance(v, str | bytes) for v in array.ravel()):
            raise BadRequest(f"input {name!r}: BYTES data must hold strings")
        return array
    try:
        array = np.array(data)
    except (ValueError, OverflowError):
        raise BadRequest(f"input {name!r}: data is ragged (nested lists of different lengths)") from None
    kind = array.dtype.kind
    if array.size and kind not in "biuf":
        raise BadRequest(f"input {name!r}: data is not convertible to {datatype} (it holds non-numbers)")
    if target.kind in "iu" and kind == "f" and not (np.isfinite(array).all() and (array == np.round(array)).all()):
        raise BadRequest(f"input {name!r}: datatype {datatype} but data holds non-integer numbers")
    if target.kind == "b" and array.size and kind != "b":
        raise BadRequest(f"input {name!r}: datatype BOOL but data holds non-booleans")
    if target.kind in "iu" and array.size:
        info = np.iinfo(target)
        if array.min() < info.min or array.max() > info.max:
            raise BadRequest(f"input {name!r}: values out of the range of {datatype}")
    with np.errstate(over="ignore"):  # overflow to inf is reported just below
        converted = array.astype(target, copy=False)
    if target.kind == "f" and not np.isfinite(converted).all():
        raise BadRequest(f"input {name!r}: values out of the range of {datatype}")
    return converted


def _model_input(tensors: list[tuple[str, np.ndarray]], predictor: Predictor) -> np.ndarray:
    """The request's rows in the layout the model takes: one tensor [rows, ...], or one tensor per column
    (each [rows] or [rows, 1]) for a tabular model, ordered by the model's feature names when they match."""
    spec = predictor.input
    wants_bytes = spec.datatype == "BYTES"
    for name, array in tensors:
        if (array.dtype == object) != wants_bytes:
            raise BadRequest(
                f"input {name!r}: datatype {datatype_of(array.dtype)} cannot feed the model's {spec.datatype} input"
            )
    if len(tensors) == 1:
        name, x = tensors[0]
        if spec.shape is not None and len(spec.shape) == 2 and x.ndim == 1 and spec.shape[1] not in (-1, 1):
            x = x.reshape(1, -1)  # one row sent as a flat vector
    else:
        x = _columns(tensors, predictor)
        name = "columns"
    if x.ndim == 0:
        raise BadRequest(f"input {name!r}: a scalar; the model takes rows (shape [rows, ...])")
    if x.shape[0] == 0:
        raise BadRequest(f"input {name!r}: no rows")
    if spec.shape is not None:
        if x.ndim == 1 and len(spec.shape) == 2 and spec.shape[1] in (-1, 1):
            x = x.reshape(-1, 1)
        if x.ndim != len(spec.shape):
            raise BadRequest(f"input {name!r}: shape {list(x.shape)}, but the model takes {_shape(spec.shape)}")
        for axis, (got, want) in enumerate(zip(x.shape[1:], spec.shape[1:], strict=True), start=1):
            if want >= 0 and got != want:
                if len(spec.shape) == 2:
                    raise BadRequest(f"input {name!r}: {got} features per row, the model takes {want}")
                raise BadRequest(f"input {name!r}: dimension {axis} is {got}, the model takes {_shape(spec.shape)}")
    return x if wants_bytes else x.astype(predictor.dtype, copy=False)


def _columns(tensors: list[tuple[str, np.ndarray]], predictor: Predictor) -> np.ndarray:
    spec = predictor.input
    if spec.shape is None or len(spec.shape) != 2:
        raise BadRequest(f"the model takes one input tensor, the request has {len(tensors)}")
    names = [name for name, _ in tensors]
    if len(set(names)) != len(names):
        raise BadRequest("input names repeat")
    features = predictor.feature_names or []
    if features and set(names) == set(features):
        order = {feature: i for i, feature in enumerate(features)}
        tensors = sorted(tensors, key=lambda item: order[item[0]])
    rows = tensors[0][1].shape[0] if tensors[0][1].ndim else 0
    for name, array in tensors:
        if array.ndim not in (1, 2) or (array.ndim == 2 and array.shape[1] != 1) or array.shape[0] != rows:
            raise BadRequest(f"input {name!r}: a column input must have shape [{rows}] or [{rows}, 1]")
    return np.column_stack([array.reshape(-1) for _, array in tensors])


def _requested_outputs(outputs: Any, predictor: Predictor, all_binary: bool) -> tuple[tuple[str, ...], frozenset[str]]:
    """The outputs to answer, and those of them to answer as binary data (`binary_data` of an output wins over
    the request's `binary_data_output`)."""
    if outputs is None:
        return predictor.default_outputs, frozenset(predictor.default_outputs if all_binary else ())
    if not isinstance(outputs, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in outputs
    ):
        raise BadRequest("'outputs' must be a list of objects with a 'name'")
    names = tuple(dict.fromkeys(o["name"] for o in outputs))
    unknown = [n for n in names if n not in predictor.outputs]
    if unknown:
        raise BadRequest(f"unknown output {unknown[0]!r} (the model answers {', '.join(predictor.outputs)})")
    if not names:
        return predictor.default_outputs, frozenset(predictor.default_outputs if all_binary else ())
    binary = set()
    for output in outputs:
        parameters = output.get("parameters")
        if isinstance(parameters, dict) and "binary_data" in parameters:
            if _flag(parameters, "binary_data"):
                binary.add(output["name"])
        elif all_binary:
            binary.add(output["name"])
    return names, frozenset(binary)


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join("rows" if i == 0 else ("any" if d < 0 else str(d)) for i, d in enumerate(shape)) + "]"


def encode_tensor(name: str, value: np.ndarray) -> dict[str, Any]:
    value = np.asarray(value)
    datatype = datatype_of(value.dtype)
    flat = value.reshape(-1)
    if datatype == "BYTES":
        data: Any = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat.tolist()]
    elif datatype == "FP16":
        data = flat.tolist()
    else:
        data = np.ascontiguousarray(flat)  # orjson writes numeric numpy arrays natively
    return {"name": name, "shape": list(value.shape), "datatype": datatype, "data": data}


def binary_tensor(name: str, value: np.ndarray) -> tuple[dict[str, Any], bytes]:
    """An output as binary data: its JSON description (no `data`; `binary_data_size`) and its bytes."""
    value = np.asarray(value)
    datatype = datatype_of(value.dtype)
    if datatype == "BYTES":
        pieces = []
        for item in value.reshape(-1).tolist():
            raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
            pieces += (_LENGTH.pack(len(raw)), raw)
        data = b"".join(pieces)
    else:
        data = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()
    description = {"name": name, "shape": list(value.shape), "datatype": datatype}
    description["parameters"] = {"binary_data_size": len(data)}
    return description, data


def encode_response(
    model: str,
    version: str,
    request_id: str | None,
    results: dict[str, np.ndarray],
    binary: frozenset[str] = frozenset(),
) -> tuple[bytes, int | None]:
    """The response body, and the length of its JSON header when binary outputs follow it (None: all JSON)."""
    response: dict[str, Any] = {"model_name": model, "model_version": version}
    if request_id is not None:
        response["id"] = request_id
    tensors, raw = [], []
    for name, value in results.items():
        if name in binary:
            description, data = binary_tensor(name, value)
            tensors.append(description)
            raw.append(data)
        else:
            tensors.append(encode_tensor(name, value))
    response["outputs"] = tensors
    header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if not raw:
        return header, None
    return b"".join([header, *raw]), len(header)


def encode_error(message: str) -> bytes:
    return orjson.dumps({"error": message})
