"""hardgrad.bench.data: the digits and MNIST-format IDX files written by the test."""

from __future__ import annotations

import gzip

import pytest
import torch

pytest.importorskip("sklearn")

from hardgrad.bench import data
from hardgrad.bench.cli import main


def test_digits_split_is_seeded_scaled_and_disjoint():
    a, b, c = data.load_digits(0), data.load_digits(0), data.load_digits(1)
    assert a.name == "digits" and a.image_shape == (8, 8) and a.features == 64
    assert len(a.x_train) + len(a.x_test) == 1797 and len(a.x_test) == 359
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.y_train, c.y_train)
    assert a.x_train.dtype == torch.float32 and a.y_train.dtype == torch.int64
    assert float(a.x_train.min()) == 0.0 and float(a.x_train.max()) == 1.0
    assert set(a.y_train.tolist()) == set(range(10))
    # train and test together are the whole data set, each image once
    from sklearn.datasets import load_digits

    full = torch.tensor(load_digits().data, dtype=torch.float32) / 16
    every = torch.cat([a.x_train, a.x_test])
    assert torch.equal(every.sum(0), full.sum(0)) and torch.equal(
        every.sort(0).values, full.sort(0).values
    )


def _write_mnist(folder, n_train=12, n_test=5, size=(4, 3), gz=False):
    g = torch.Generator().manual_seed(0)
    suffix = ".gz" if gz else ""
    arrays = {
        "train_images": torch.randint(0, 256, (n_train, *size), generator=g, dtype=torch.int64).to(
            torch.uint8
        ),
        "train_labels": torch.randint(0, 10, (n_train,), generator=g).to(torch.uint8),
        "test_images": torch.randint(0, 256, (n_test, *size), generator=g).to(torch.uint8),
        "test_labels": torch.randint(0, 10, (n_test,), generator=g).to(torch.uint8),
    }
    for key, stem in data.MNIST_FILES.items():
        data.write_idx(folder / f"{stem}{suffix}", arrays[key])
    return arrays


@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip_and_mnist_folder(tmp_path, gz):
    arrays = _write_mnist(tmp_path, gz=gz)
    ds = data.load_dataset(tmp_path)
    assert ds.image_shape == (4, 3) and ds.features == 12
    assert torch.equal(ds.x_train, arrays["train_images"].reshape(12, 12).float() / 255)
    assert torch.equal(ds.y_test, arrays["test_labels"].long())
    assert float(ds.x_train.max()) <= 1.0


def test_idx_int32_and_bad_files(tmp_path):
    values = torch.tensor([[1, -2, 300], [4, 5, -6]], dtype=torch.int32)
    data.write_idx(tmp_path / "a.idx", values)
    assert torch.equal(data.read_idx(tmp_path / "a.idx"), values)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="IDX"):
        data.read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05\x01")
    with pytest.raises(ValueError, match="data bytes"):
        data.read_idx(tmp_path / "short")
    (tmp_path / "type").write_bytes(b"\x00\x00\x07\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="type code"):
        data.read_idx(tmp_path / "type")
    with gzip.open(tmp_path / "g.gz", "wb") as handle:
        handle.write(b"\x00\x00\x08\x01\x00\x00\x00\x02\x07\x09")
    assert data.read_idx(tmp_path / "g.gz").tolist() == [7, 9]


def test_missing_files_and_mismatched_counts(tmp_path):
    with pytest.raises(FileNotFoundError, match="folder"):
        data.load_idx_folder(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        data.load_idx_folder(tmp_path)
    arrays = _write_mnist(tmp_path)
    data.write_idx(tmp_path / data.MNIST_FILES["test_labels"], arrays["test_labels"][:3])
    with pytest.raises(ValueError, match="labels"):
        data.load_idx_folder(tmp_path)


def test_cli_rejects_a_data_path_that_is_not_a_folder(tmp_path, capsys):
    assert main(["bench", "toy", "--data", str(tmp_path / "missing")]) == 2
    assert "--data" in capsys.readouterr().err


# --------------------------------------------------------------------------- torchrun env


def test_each_rank_takes_its_share_of_the_cores(monkeypatch):
    from hardgrad.bench import available_threads

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    cores = available_threads()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert available_threads() == max(1, cores // 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * cores))
    assert available_threads() == 1


def test_cuda_means_one_gpu_per_local_rank(monkeypatch):
    from hardgrad.bench._distributed import local_device

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert local_device("cuda") == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert local_device("cuda") == "cuda:3"
    assert local_device("cuda:1") == "cuda:1"  # an explicit index is kept
    assert local_device("cpu") == "cpu"
