"""Data for the training benchmarks: scikit-learn's 8x8 digits, or MNIST-format IDX files.

Nothing is downloaded. The default is ``sklearn.datasets.load_digits`` (1,797 images of
8x8 pixels with values 0..16, shipped inside scikit-learn), split into train and test with
a seeded permutation. ``hardgrad bench --data PATH`` reads MNIST-format IDX files a user
already has instead (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each optionally ``.gz``).

Pixels are scaled to [0, 1] (``x / 16`` for digits, ``x / 255`` for IDX) and flattened.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

#: IDX element types: type code -> (torch dtype, bytes per element, struct format char).
IDX_TYPES = {
    0x08: (torch.uint8, 1, "B"),
    0x09: (torch.int8, 1, "b"),
    0x0B: (torch.int16, 2, "h"),
    0x0C: (torch.int32, 4, "i"),
    0x0D: (torch.float32, 4, "f"),
    0x0E: (torch.float64, 8, "d"),
}

#: The MNIST file names, without the optional ``.gz``.
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@dataclass(frozen=True)
class Dataset:
    """Flattened images in [0, 1] and integer labels, split into train and test.

    Attributes:
        name: ``"digits"`` or ``"idx:<folder>"``.
        image_shape: the (height, width) of one image.
        x_train, y_train, x_test, y_test: ``(N, H*W)`` float32 and ``(N,)`` int64 tensors.
    """

    name: str
    image_shape: tuple[int, int]
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor

    @property
    def features(self) -> int:
        return self.x_train.shape[1]

    def to(self, device: str | torch.device) -> Dataset:
        return Dataset(
            self.name,
            self.image_shape,
            self.x_train.to(device),
            self.y_train.to(device),
            self.x_test.to(device),
            self.y_test.to(device),
        )


def _header(head: bytes, path: Path) -> tuple[int, tuple[int, ...], int]:
    """From the first bytes of an IDX file: its type code, shape and header length."""
    if len(head) < 4 or head[0] != 0 or head[1] != 0:
        raise ValueError(
            f"Expected an IDX file (magic 0x0000TTDD) at {path}, but found {head[:4]!r}"
        )
    code, ndim = head[2], head[3]
    if code not in IDX_TYPES:
        raise ValueError(
            f"Expected an IDX type code in {sorted(IDX_TYPES)}, but found {code:#x} in {path}"
        )
    length = 4 + 4 * ndim
    if len(head) < length:
        raise ValueError(
            f"Expected a {length}-byte IDX header for {ndim} dimensions in {path}, but the "
            f"file ends after {len(head)} bytes"
        )
    return code, struct.unpack(f">{ndim}I", head[4:length]), length


def _data_bytes(code: int, shape: tuple[int, ...]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count * IDX_TYPES[code][1]


def _read(path: Path, limit: int = -1) -> bytes:
    """The bytes of ``path`` (``.gz`` decompressed), a truncated or corrupt gzip stream
    reported as a ``ValueError`` naming the file."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            return handle.read(limit)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ValueError(f"Expected a gzip-compressed IDX file at {path}: {error}") from None


def read_idx(path: str | Path) -> Tensor:
    """The array in an IDX file (``.gz`` read transparently), as a tensor.

    Raises:
        ValueError: the file is not IDX (bad magic number, unknown type, short header,
            wrong length) or not valid gzip.
    """
    path = Path(path)
    raw = _read(path)
    code, shape, header = _header(raw[:1024], path)
    dtype, size, char = IDX_TYPES[code]
    expected = _data_bytes(code, shape)
    if len(raw) - header != expected:
        raise ValueError(
            f"Expected {expected} data bytes for shape {shape} in {path}, "
            f"but found {len(raw) - header}"
        )
    count = expected // size
    values = struct.unpack(f">{count}{char}", raw[header:]) if size > 1 else raw[header:]
    if size == 1:
        data = torch.frombuffer(bytearray(values), dtype=dtype)
    else:
        data = torch.tensor(values, dtype=dtype)
    return data.reshape(shape)


def _idx_shape(path: Path) -> tuple[int, ...]:
    """The shape in an IDX file's header, with the file's length checked against it,
    without reading the data into memory (a ``.gz`` is decompressed in chunks)."""
    head = _read(path, 1024)
    code, shape, header = _header(head, path)
    if path.suffix == ".gz":
        total = 0
        try:
            with gzip.open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    total += len(chunk)
        except (EOFError, gzip.BadGzipFile, zlib.error) as error:
            raise ValueError(f"Expected a gzip-compressed IDX file at {path}: {error}") from None
    else:
        total = path.stat().st_size
    expected = _data_bytes(code, shape)
    if total - header != expected:
        raise ValueError(
            f"Expected {expected} data bytes for shape {shape} in {path}, "
            f"but found {total - header} (a truncated or corrupt file?)"
        )
    return shape


def check_idx_folder(folder: str | Path) -> None:
    """Check what :func:`load_idx_folder` needs without loading it: the four files there,
    valid IDX headers and lengths, 3-d images, 1-d labels, as many labels as images.

    Raises:
        FileNotFoundError: ``folder`` is not a folder, or a file is missing.
        ValueError: a file is not a valid IDX file of the expected shape.
    """
    folder = Path(folder)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise FileNotFoundError(f"Expected a folder of IDX files, but {folder} {what}")
    shapes = {key: _idx_shape(_find(folder, stem)) for key, stem in MNIST_FILES.items()}
    for split in ("train", "test"):
        images, labels = shapes[f"{split}_images"], shapes[f"{split}_labels"]
        if len(images) != 3:
            raise ValueError(
                f"Expected 3-d image arrays in {MNIST_FILES[f'{split}_images']}, but found "
                f"shape {images}"
            )
        if len(labels) != 1:
            raise ValueError(
                f"Expected 1-d labels in {MNIST_FILES[f'{split}_labels']}, but found shape {labels}"
            )
        if images[0] != labels[0]:
            raise ValueError(
                f"Expected as many {split} labels as images, but found {labels[0]} and {images[0]}"
            )
        if images[0] == 0:
            raise ValueError(f"Expected {split} images, but found none")
    if shapes["train_images"][1:] != shapes["test_images"][1:]:
        raise ValueError(
            f"Expected train and test images of one size, but found "
            f"{shapes['train_images'][1:]} and {shapes['test_images'][1:]}"
        )


def write_idx(path: str | Path, array: Tensor) -> None:
    """Write ``array`` (uint8 or int32) as an IDX file (gzip when the name ends in ``.gz``);
    the tests use it to make small MNIST-format files."""
    path = Path(path)
    codes = {torch.uint8: 0x08, torch.int32: 0x0C}
    if array.dtype not in codes:
        raise TypeError(f"Expected a uint8 or int32 `array`, but found {array.dtype}")
    header = bytes([0, 0, codes[array.dtype], array.dim()]) + struct.pack(
        f">{array.dim()}I", *array.shape
    )
    if array.dtype == torch.uint8:
        body = bytes(array.flatten().tolist())
    else:
        body = struct.pack(f">{array.numel()}i", *array.flatten().tolist())
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as handle:
        handle.write(header + body)


def _find(folder: Path, stem: str) -> Path:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"Expected {stem} (or {stem}.gz) in {folder} for --data, but found neither"
    )


def load_idx_folder(folder: str | Path) -> Dataset:
    """MNIST-format IDX files from ``folder`` (see :data:`MNIST_FILES`; the command line
    checks them first with :func:`check_idx_folder`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"Expected a folder of IDX files for --data, but found {folder}")
    arrays = {key: read_idx(_find(folder, stem)) for key, stem in MNIST_FILES.items()}
    images = {k: v for k, v in arrays.items() if k.endswith("images")}
    for key, value in images.items():
        if value.dim() != 3:
            raise ValueError(
                f"Expected 3-d image arrays in {key}, but found shape {tuple(value.shape)}"
            )
    for split in ("train", "test"):
        n_images, n_labels = len(arrays[f"{split}_images"]), len(arrays[f"{split}_labels"])
        if n_images != n_labels:
            raise ValueError(
                f"Expected as many {split} labels as images, but found {n_labels} and {n_images}"
            )
    h, w = arrays["train_images"].shape[1:]
    scale = 255.0 if arrays["train_images"].dtype == torch.uint8 else 1.0
    return Dataset(
        f"idx:{folder}",
        (int(h), int(w)),
        arrays["train_images"].reshape(-1, h * w).float() / scale,
        arrays["train_labels"].long(),
        arrays["test_images"].reshape(-1, h * w).float() / scale,
        arrays["test_labels"].long(),
    )


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's 8x8 digits, ``x / 16``, split by a permutation seeded with ``seed``."""
    try:
        from sklearn.datasets import load_digits as _sklearn_digits
    except ImportError as error:  # pragma: no cover - the bench extra is missing
        raise ImportError(
            "the digits data need scikit-learn: pip install 'hardgrad[bench]'"
        ) from error
    bunch = _sklearn_digits()
    x = torch.tensor(bunch.data, dtype=torch.float32) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_test = round(test_fraction * len(x))
    test, train = order[:n_test], order[n_test:]
    return Dataset("digits", (8, 8), x[train], y[train], x[test], y[test])


def load_dataset(data: str | Path | None, seed: int = 0) -> Dataset:
    """``--data``: the IDX files in that folder, or the digits when ``None``."""
    return load_digits(seed) if data is None else load_idx_folder(data)
