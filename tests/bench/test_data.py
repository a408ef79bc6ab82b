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


# --------------------------------------------------------------------------- issue 38: --data errors


def _no_run(monkeypatch):
    """Fail the test if a task starts: the errors must come before any work."""

    def refuse(*args, **kwargs):
        raise AssertionError("the tasks ran despite a bad --data or environment")

    monkeypatch.setattr("hardgrad.bench.run_tasks", refuse)


def _truncate(path, keep):
    path.write_bytes(path.read_bytes()[:keep])


def _mnist_then(change):
    def make(folder):
        _write_mnist(folder, gz=change == "gz truncated")
        train = folder / data.MNIST_FILES["train_images"]
        if change == "garbage":
            train.write_bytes(b"not an IDX file at all")
        elif change == "truncated":
            _truncate(train, 40)
        elif change == "short header":
            train.write_bytes(b"\x00\x00\x08\x03\x00\x00")
        elif change == "gz truncated":
            gz = folder / (data.MNIST_FILES["train_images"] + ".gz")
            _truncate(gz, len(gz.read_bytes()) // 2)
        elif change == "not gzip":
            gz = folder / (data.MNIST_FILES["train_images"] + ".gz")
            train.rename(gz)  # plain IDX bytes under a .gz name
        elif change == "2-d labels":
            data.write_idx(
                folder / data.MNIST_FILES["test_labels"], torch.zeros(5, 2, dtype=torch.uint8)
            )
        elif change == "counts":
            data.write_idx(
                folder / data.MNIST_FILES["test_labels"], torch.zeros(3, dtype=torch.uint8)
            )
        return folder

    return make


DATA_ERRORS = {
    "missing folder": (lambda folder: folder / "nope", "does not exist"),
    "a file": (lambda folder: _file(folder), "is not a folder"),
    "empty folder": (lambda folder: folder, "train-images-idx3-ubyte"),
    "garbage": (_mnist_then("garbage"), "Expected an IDX file"),
    "truncated": (_mnist_then("truncated"), "truncated or corrupt"),
    "short header": (_mnist_then("short header"), "16-byte IDX header"),
    "gz truncated": (_mnist_then("gz truncated"), "gzip"),
    "not gzip": (_mnist_then("not gzip"), "gzip"),
    "2-d labels": (_mnist_then("2-d labels"), "1-d labels"),
    "counts": (_mnist_then("counts"), "as many test labels as images"),
}


def _file(folder):
    path = folder / "mnist.tar"
    path.write_bytes(b"x")
    return path


@pytest.mark.parametrize("task", ["vq", "l0"])
@pytest.mark.parametrize("case", list(DATA_ERRORS))
def test_cli_data_errors_name_the_option_and_exit_2(tmp_path, capsys, monkeypatch, task, case):
    """Issue 38: an empty folder, or missing, truncated or corrupt IDX files, ended in a
    FileNotFoundError/ValueError/struct.error/EOFError traceback from inside the task."""
    _no_run(monkeypatch)
    make, words = DATA_ERRORS[case]
    folder = make(tmp_path)
    assert main(["bench", task, "--quick", "--data", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" in err, err
    assert f"--data {str(folder)!r}" in err and words in err, err


def test_a_valid_data_folder_is_accepted(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr("hardgrad.bench.run_tasks", lambda *a, **k: ran.append(a))
    _write_mnist(tmp_path, gz=True)
    assert main(["bench", "l0", "--quick", "--data", str(tmp_path)]) == 0
    assert len(ran) == 1


def test_read_idx_reports_a_short_header_and_broken_gzip_as_value_errors(tmp_path):
    """These raised struct.error and EOFError, which no caller expects."""
    (tmp_path / "h").write_bytes(b"\x00\x00\x08\x02\x00\x00\x00\x02")
    with pytest.raises(ValueError, match="12-byte IDX header"):
        data.read_idx(tmp_path / "h")
    with gzip.open(tmp_path / "g.gz", "wb") as handle:
        handle.write(bytes(range(200)))
    _truncate(tmp_path / "g.gz", 30)
    with pytest.raises(ValueError, match="gzip"):
        data.read_idx(tmp_path / "g.gz")


# --------------------------------------------------------------------------- issue 38: torchrun env


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"WORLD_SIZE": "abc"}, ["WORLD_SIZE", "'abc'"]),
        ({"WORLD_SIZE": "0"}, ["WORLD_SIZE", ">= 1"]),
        ({"RANK": "1.5"}, ["RANK", "'1.5'"]),
        ({"RANK": "-1"}, ["RANK", "'-1'"]),
        ({"LOCAL_RANK": "x"}, ["LOCAL_RANK", "'x'"]),
        ({"LOCAL_WORLD_SIZE": ""}, ["LOCAL_WORLD_SIZE", "''"]),
        ({"RANK": "2", "WORLD_SIZE": "2"}, ["RANK", "below WORLD_SIZE"]),
    ],
)
def test_cli_bad_torchrun_environment_exits_2(capsys, monkeypatch, env, words):
    """Issue 38: WORLD_SIZE=abc raised int()'s ValueError from inside the run."""
    _no_run(monkeypatch)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["bench", "l0", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" in err, err
    for word in words:
        assert word in err, (word, err)


def test_cli_valid_torchrun_environment_is_accepted(monkeypatch):
    ran = []
    monkeypatch.setattr("hardgrad.bench.run_tasks", lambda *a, **k: ran.append(a))
    env = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": " 0", "LOCAL_WORLD_SIZE": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["bench", "l0", "--quick"]) == 0
    assert len(ran) == 1
