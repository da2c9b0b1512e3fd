"""What crosses between the caller, the judge and the candidate: framed messages of plain data, with size caps.

A frame is a 12-byte header (JSON length: uint32, blob length: uint64, big-endian), a JSON object, then a blob of raw
tensor bytes. Tensors travel as ``{"$tensor": [offset, nbytes], "dtype": "float32", "shape": [4, 4]}`` pointing into
the blob; tuples as ``{"$tuple": [...]}``, dicts as ``{"$dict": [[key, value], ...]}``. Nothing else crosses: no
pickle, no tensor subclasses, no objects with behaviour. A receiver states the most it accepts, and a frame that
announces more is refused before a byte of its body is read.

Reads and writes take a deadline and a cancel event and wait in short slices (`select`), so a peer that stops reading
or writing cannot block the other side past its deadline.
"""

import json
import os
import select
import struct
import threading
import time

HEADER = struct.Struct("!IQ")
MAX_JSON_BYTES = 64 * 1024 * 1024
POLL_S = 0.05

# The dtypes that may cross, by the name str(dtype) gives without "torch.".
_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32",
                "int64", "uint8", "bool")


class WireError(Exception):
    """A frame that is malformed, too large, or holds something that may not cross."""


class PeerGone(Exception):
    """The other side closed its end (it exited or was killed)."""


class Stopped(Exception):
    """The deadline passed or the cancel event was set while waiting; `reason` is "timeout" or "cancelled"."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---- plain data <-> (JSON-able object, blob) ---------------------------------------------------------------------


def encode(value) -> tuple[object, bytes]:
    """Turn plain data (tensors, numbers, strings, None, lists, tuples, dicts with str keys) into a JSON-able object
    and the blob its tensors point into. Raises WireError naming the first thing that may not cross."""
    chunks: list[bytes] = []
    offset = [0]

    def walk(item, where: str):
        import torch

        if item is None or isinstance(item, (bool, str)):
            return item
        if isinstance(item, (int, float)) and type(item) in (int, float):
            return item
        if isinstance(item, torch.Tensor):
            if type(item) not in (torch.Tensor, torch.nn.Parameter):
                raise WireError(f"{where} is a tensor subclass ({type(item).__name__}): only plain tensors cross")
            if item.layout != torch.strided:
                raise WireError(f"{where} is a {item.layout} tensor: only dense tensors cross")
            name = str(item.dtype).removeprefix("torch.")
            if name not in _DTYPE_NAMES:
                raise WireError(f"{where} has dtype {name}, which the checker does not accept")
            data = _tensor_bytes(item)
            entry = {"$tensor": [offset[0], len(data)], "dtype": name, "shape": list(item.shape)}
            chunks.append(data)
            offset[0] += len(data)
            return entry
        if type(item) is tuple:
            return {"$tuple": [walk(x, f"{where}[{i}]") for i, x in enumerate(item)]}
        if type(item) is list:
            return [walk(x, f"{where}[{i}]") for i, x in enumerate(item)]
        if type(item) is dict and all(isinstance(key, str) for key in item):
            return {"$dict": [[key, walk(x, f"{where}[{key!r}]")] for key, x in item.items()]}
        raise WireError(f"{where} is a {type(item).__name__}: only tensors, numbers, tuples and lists cross")

    return walk(value, "output"), b"".join(chunks)


def encode_at(value, where: str) -> tuple[object, bytes]:
    """encode(), with messages naming `where` instead of "output"."""
    try:
        return encode(value)
    except WireError as error:
        raise WireError(str(error).replace("output", where, 1)) from None


def decode(tree, blob: bytes):
    """The inverse of encode: plain torch.Tensors (CPU) and Python values."""
    import torch

    view = memoryview(blob)

    def walk(item):
        if isinstance(item, list):
            return [walk(x) for x in item]
        if not isinstance(item, dict):
            return item
        if "$tuple" in item:
            return tuple(walk(x) for x in item["$tuple"])
        if "$dict" in item:
            return {str(key): walk(x) for key, x in item["$dict"]}
        if "$tensor" in item:
            start, length = (int(n) for n in item["$tensor"])
            name, shape = item.get("dtype"), [int(n) for n in item.get("shape", [])]
            if name not in _DTYPE_NAMES or start < 0 or start + length > len(blob):
                raise WireError("a tensor entry points outside its frame or names an unknown dtype")
            dtype = getattr(torch, name)
            count = 1
            for size in shape:
                count *= size
            if count * torch.empty((), dtype=dtype).element_size() != length or any(n < 0 for n in shape):
                raise WireError("a tensor's shape does not match its byte count")
            if length == 0:
                return torch.empty(shape, dtype=dtype)
            flat = torch.frombuffer(bytearray(view[start:start + length]), dtype=torch.uint8)
            return flat.view(dtype).reshape(shape)
        raise WireError("an unknown object in a frame")

    return walk(tree)


def _tensor_bytes(tensor) -> bytes:
    import torch

    flat = tensor.detach().resolve_conj().resolve_neg().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def nbytes(tree) -> int:
    """The tensor bytes an encoded tree holds (for caps)."""
    if isinstance(tree, list):
        return sum(nbytes(x) for x in tree)
    if isinstance(tree, dict):
        if "$tensor" in tree:
            return int(tree["$tensor"][1])
        return sum(nbytes(x) for x in (tree.get("$tuple") or [v for _, v in tree.get("$dict", [])]))
    return 0


# ---- frames on file descriptors ---------------------------------------------------------------------------------


class Channel:
    """One direction each way: reads frames from `read_fd`, writes them to `write_fd` (either may be None)."""

    def __init__(self, read_fd: int | None = None, write_fd: int | None = None):
        self.read_fd, self.write_fd = read_fd, write_fd
        for fd in (read_fd, write_fd):
            if fd is not None:
                os.set_blocking(fd, False)
        self._write_lock = threading.Lock()
        self._buffer = bytearray()

    def send(self, message: dict, blob: bytes = b"", *, deadline: float | None = None,
             cancel: threading.Event | None = None) -> None:
        """Stopped midway leaves a partial frame behind: the peer can then only be stopped, as the judge does."""
        text = json.dumps(message).encode()
        if len(text) > MAX_JSON_BYTES:
            raise WireError(f"message too large ({len(text)} bytes of JSON)")
        data = memoryview(HEADER.pack(len(text), len(blob)) + text + blob)
        with self._write_lock:
            while data:
                _wait_ready(self.write_fd, "w", deadline, cancel)
                try:
                    written = os.write(self.write_fd, data[: 1 << 20])
                except BlockingIOError:
                    continue
                except (BrokenPipeError, OSError) as error:
                    raise PeerGone(str(error)) from None
                data = data[written:]

    def receive(self, *, max_blob: int, deadline: float | None = None,
                cancel: threading.Event | None = None) -> tuple[dict, bytes]:
        """The next frame as (message, blob). Raises WireError when it announces more than max_blob tensor bytes.
        Stopped leaves a partly read frame buffered: the next call goes on with it."""
        self._fill(HEADER.size, deadline, cancel)
        json_length, blob_length = HEADER.unpack(self._buffer[:HEADER.size])
        if json_length > MAX_JSON_BYTES:
            raise WireError(f"a message of {json_length} bytes of JSON, above the {MAX_JSON_BYTES} accepted")
        if blob_length > max_blob:
            raise WireError(f"{blob_length} bytes of tensors sent, above the {max_blob} accepted")
        end = HEADER.size + json_length + blob_length
        self._fill(end, deadline, cancel)
        frame, self._buffer = self._buffer[:end], self._buffer[end:]
        try:
            message = json.loads(bytes(frame[HEADER.size:HEADER.size + json_length]))
        except ValueError:
            raise WireError("a frame that is not JSON") from None
        if not isinstance(message, dict):
            raise WireError("a frame that is not a JSON object")
        return message, bytes(frame[HEADER.size + json_length:])

    def _fill(self, count: int, deadline, cancel) -> None:
        while len(self._buffer) < count:
            _wait_ready(self.read_fd, "r", deadline, cancel)
            try:
                chunk = os.read(self.read_fd, max(count - len(self._buffer), 1 << 16))
            except BlockingIOError:
                continue
            if not chunk:
                raise PeerGone("end of stream")
            self._buffer += chunk

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.read_fd = self.write_fd = None


def _wait_ready(fd: int, mode: str, deadline: float | None, cancel: threading.Event | None) -> None:
    while True:
        if cancel is not None and cancel.is_set():
            raise Stopped("cancelled")
        slice_s = POLL_S
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Stopped("timeout")
            slice_s = min(slice_s, remaining)
        if cancel is None and deadline is None:
            slice_s = None  # nothing to watch: wait as long as it takes
        readable, writable, _ = select.select([fd] if mode == "r" else [], [fd] if mode == "w" else [], [], slice_s)
        if readable or writable:
            return
