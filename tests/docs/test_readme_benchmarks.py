"""The README's performance table is made from the committed benchmark results, and says so.

`python -m benchmarks.results` writes the table between the README's markers from
`benchmarks/results/*.json`; these tests fail when the README and those files disagree and when a
results file is malformed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from benchmarks import results

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_table_matches_the_committed_results(capsys: pytest.CaptureFixture[str]) -> None:
    status = results.main(["--check"])
    assert status == 0, capsys.readouterr().out + "\nrun: .venv/bin/python -m benchmarks.results"


def test_every_results_file_is_complete() -> None:
    documents = sorted(results.RESULTS.glob("*.json"))
    assert documents, "no committed benchmark results"
    for path in documents:
        document = json.loads(path.read_text())
        assert document["benchmark"] == path.stem, path
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", document["date"]), path
        assert document["commit"] and document["command"].startswith("python benchmarks/"), path
        assert len(document["load_average"]) == 3 and document["cpus"] >= 1, path
        assert document["rows"], f"{path}: no rows"
        for row in document["rows"]:
            assert set(row) == {"figure", "measured", "floor", "ratio", "target", "met"}, path
            assert row["figure"] and row["measured"], path
            assert row["met"] in (True, False, None), path
            assert (row["met"] is None) == (row["target"] == ""), (
                f"{path}: a target needs met, and met a target"
            )


def test_every_recording_benchmark_has_committed_results() -> None:
    """A benchmark that can `--record` has its results committed, so its figures are in the table."""
    recorders = {
        path.stem
        for path in (ROOT / "benchmarks").glob("*_bench.py")
        if "from benchmarks.results import" in path.read_text(encoding="utf-8")
    }
    assert recorders, "no benchmark records its results"
    committed = {path.stem for path in results.RESULTS.glob("*.json")}
    assert recorders <= committed, (
        f"no committed results for {sorted(recorders - committed)}: "
        "run python benchmarks/<name>.py --record, then python -m benchmarks.results"
    )


def test_a_changed_result_makes_the_check_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "results"
    monkeypatch.setattr(results, "RESULTS", folder)
    monkeypatch.setattr(results, "README", tmp_path / "README.md")
    monkeypatch.setattr(results, "_commit", lambda: "abc1234567")
    results.record(
        "runtime_bench",
        [results.Row("fs_read p50", "p50 1.00 ms", "echo p50 0.90 ms", "1.10/1.11/1.12", "<= 1.3", True)],
        command="python benchmarks/runtime_bench.py --record",
    )
    (tmp_path / "README.md").write_text(f"# x\n\n{results.BEGIN}\nold\n{results.END}\n\n## next\n")
    assert results.main(["--check"]) == 1
    assert results.main([]) == 0
    text = (tmp_path / "README.md").read_text()
    assert (
        "| fs_read p50 | p50 1.00 ms | echo p50 0.90 ms | 1.10/1.11/1.12 | <= 1.3 | yes | runtime_bench |"
        in text
    )
    assert "commit abc1234567" in text and text.endswith(f"{results.END}\n\n## next\n")
    assert results.main(["--check"]) == 0
    document = json.loads((folder / "runtime_bench.json").read_text())
    document["rows"][0]["measured"] = "p50 1.50 ms"
    (folder / "runtime_bench.json").write_text(json.dumps(document))
    assert results.main(["--check"]) == 1
    (tmp_path / "README.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        results.main(["--check"])
