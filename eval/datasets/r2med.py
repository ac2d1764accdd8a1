"""R2MED's layout: its qrels files (``qrels.jsonl`` {"q_id", "p_id", "score"}, or TREC
``qrels.txt``, ``qid 0 docid grade``), and its tasks fetched from the Hugging Face hub at their
pinned revisions, or found in the hub cache without the network."""

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from eval.datasets.checks import (
    DataError,
    QrelsBuilder,
    as_grade,
    as_id,
    checked_id,
    field_value,
    first_line_hint,
    jsonl_objects,
    numbered_lines,
)
from eval.datasets.vocabulary import R2MED_FILES, R2MED_REVISIONS, R2MED_TASKS, r2med_task_name


def read_qrels_jsonl(path: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    builder = QrelsBuilder(path)
    for where, obj in jsonl_objects(path):
        builder.add(
            as_id(field_value(obj, "q_id", where), "q_id", where),
            as_id(field_value(obj, "p_id", where), "p_id", where),
            as_grade(field_value(obj, "score", where), "score", where),
        )
    return builder.result()


_TREC_NO_HEADER = "TREC qrels have no header line"


def read_qrels_trec(path: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    """TREC qrels: ``qid iteration docid grade``, any whitespace between columns, no header."""
    builder = QrelsBuilder(path)
    for i, (number, line) in enumerate(numbered_lines(path)):
        where = f"{path} line {number}"
        cols = line.split()
        try:
            if len(cols) != 4:
                raise DataError(f"{where}: expected 4 columns 'qid 0 docid grade', got {len(cols)}")
            builder.add(
                checked_id(cols[0], "qid", where),
                checked_id(cols[2], "docid", where),
                as_grade(cols[3], "grade", where),
            )
        except DataError as err:
            raise first_line_hint(err, i == 0, _TREC_NO_HEADER) from None
    return builder.result()


def unknown_task(spec: str) -> DataError:
    return DataError(
        f"{spec!r} is neither a folder nor an R2MED task; valid names: "
        f"{', '.join(R2MED_TASKS)} (or 'r2med' for all), or 'demo'"
    )


def fetch_r2med(task: str, cache_dir: Path) -> Path:
    """Download (or find in the cache) one R2MED task at its pinned revision; return its folder."""
    canonical = r2med_task_name(task)
    if canonical is None:
        raise unknown_task(task)
    cached = hub_copy(canonical, cache_dir)
    if cached is not None:  # no network: a pinned revision's files never change
        return cached
    why = hub_unreachable()
    if why is not None:
        raise download_error(canonical, f"not in the hub cache {Path(cache_dir) / 'hf'}; {why}")
    # Imported here so that loading local folders never pays for huggingface_hub's import.
    from huggingface_hub import hf_hub_download

    folder: Path | None = None
    for filename in R2MED_FILES:
        try:
            local = hf_hub_download(
                f"R2MED/{canonical}",
                filename,
                repo_type="dataset",
                revision=R2MED_REVISIONS[canonical],
                cache_dir=Path(cache_dir) / "hf",
            )
        except Exception as err:  # offline, hub down, auth, missing file: all end the same way
            raise download_error(canonical, type(err).__name__, filename) from err
        folder = Path(local).parent
    assert folder is not None
    return folder


def download_error(canonical: str, why: str, filename: str = "") -> DataError:
    what = f"R2MED/{canonical} {filename}".rstrip()
    return DataError(
        f"cannot download {what} ({why}; offline?): "
        f"put {', '.join(R2MED_FILES)} in a folder and pass --dataset <folder>"
    )


def hub_copy(canonical: str, cache_dir: Path) -> Path | None:
    """The task's folder in the local hub cache at its pinned revision, when it holds every
    file; None otherwise. Reads the cache's layout only: no network."""
    from huggingface_hub import try_to_load_from_cache  # light: the client loads on download

    found = [
        try_to_load_from_cache(
            f"R2MED/{canonical}", filename, cache_dir=Path(cache_dir) / "hf",
            revision=R2MED_REVISIONS[canonical], repo_type="dataset",
        )
        for filename in R2MED_FILES
    ]  # fmt: skip
    if all(isinstance(path, str) for path in found):
        return Path(found[0]).parent
    return None


_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why the Hugging Face hub cannot be reached now (offline mode, or its host does not
    resolve or answer), else None. Asked before a download: offline, the hub client retries
    each file five times (about 25 s) before it gives up. Behind a proxy the client's own
    error says why, so the host is not probed."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return None
    url = urlsplit(constants.ENDPOINT)
    host = url.hostname or ""
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"{host} cannot be reached: {err.strerror or type(err).__name__}"
    return None
