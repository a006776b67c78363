"""Source kinds as objects (anonflow.sources): the parquet-dataset source, and a third party's
source registered through the ``anonflow_register_sources`` hook."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pluggy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from anonflow import registry as plugins
from anonflow.store import Store

from tests.support.helpers import write


def _workflow(folder: Path, source: str) -> Path:
    return write(folder / "wf.yaml", f"""
        name: ds
        sources:
          ds: {source}
        steps:
          typed: {{uses: typing, input: ds, with: {{quasi: [x]}}}}
          out: {{uses: publish, input: typed, with: {{publisher: csv, path: out.csv}}}}
        """)


def _part(path: Path, xs: list[int]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": pa.array(xs, pa.int64()), "f": [path.name] * len(xs)}), path)
    return path


def _source_step(db: Path) -> dict:
    with Store(db, read_only=True) as store:
        run = store.runs(limit=1)[0]["run_id"]
        return next(s for s in store.steps(run) if s["kind"] == "source")


def _records(db: Path, step: dict) -> list[tuple]:
    with Store(db, read_only=True) as store:
        return [tuple(r.values()) for r in store.data(step["output_table"]).select(["_row", "x", "f"]).to_pylist()]


def _dataset(folder: Path, order: list[str]) -> None:
    """Three Parquet files (and a file that is not Parquet), written in ``order``."""
    parts = {"a/1.parquet": [1, 2], "b/10.parquet": [3], "b/9.parquet": [4, 5]}
    for rel in order:
        _part(folder / rel, parts[rel])
    (folder / "a" / "notes.txt").write_text("not a table\n")


def test_a_parquet_dataset_is_read_in_path_order_whatever_the_listing_and_hashed_by_content(cli, tmp_path):
    """The files are read sorted by their path under the named folder (b/10 before b/9: text
    order), whatever order the file system lists them in; the recorded sha256 is the sha256 of
    the ``relative path NUL file sha256 LF`` lines, so the same files elsewhere, written in
    another order, give the same content hash and the same stored table."""
    runs = []
    for i, order in enumerate((["a/1.parquet", "b/10.parquet", "b/9.parquet"],
                               ["b/9.parquet", "b/10.parquet", "a/1.parquet"])):
        folder = tmp_path / f"p{i}"
        _dataset(folder / "data", order)
        res = cli("run", _workflow(folder, "{format: parquet-dataset, path: data}"), "--db", folder / "s.duckdb")
        assert res.exit_code == 0, res.output
        step = _source_step(folder / "s.duckdb")
        lines = b"".join(f"{rel}\0{hashlib.sha256((folder / 'data' / rel).read_bytes()).hexdigest()}\n".encode()
                         for rel in ("a/1.parquet", "b/10.parquet", "b/9.parquet"))
        assert step["inputs"][0]["sha256"] == hashlib.sha256(lines).hexdigest()
        assert _records(folder / "s.duckdb", step) == [(0, 1, "1.parquet"), (1, 2, "1.parquet"),
                                                       (2, 3, "10.parquet"), (3, 4, "9.parquet"),
                                                       (4, 5, "9.parquet")]
        runs.append(step)
    assert runs[0]["output_hash"] == runs[1]["output_hash"]
    assert runs[0]["inputs"][0]["sha256"] == runs[1]["inputs"][0]["sha256"]


def test_a_parquet_dataset_glob_reads_only_its_matches(cli, tmp_path):
    _dataset(tmp_path / "data", ["a/1.parquet", "b/10.parquet", "b/9.parquet"])
    res = cli("run", _workflow(tmp_path, "{format: parquet-dataset, path: 'data/b/*.parquet'}"),
              "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 0, res.output
    step = _source_step(tmp_path / "s.duckdb")
    assert [r[1] for r in _records(tmp_path / "s.duckdb", step)] == [3, 4, 5]


@pytest.mark.parametrize("path, message", [
    ("data/empty", "data/empty names no Parquet file"),
    ("'data/*.csv'", "data/*.csv names no Parquet file"),
    ("missing", "folder not found: "),
    ("data/x.parquet", "is not a folder; a parquet-dataset names a folder or a glob pattern"),
])
def test_a_parquet_dataset_that_names_no_file_is_refused_in_one_line(cli, tmp_path, path, message):
    (tmp_path / "data" / "empty").mkdir(parents=True)
    _part(tmp_path / "data" / "x.parquet", [1])
    res = cli("run", _workflow(tmp_path, f"{{format: parquet-dataset, path: {path}}}"), "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert message in res.output and "source 'ds'" in res.output and "Traceback" not in res.output


def test_a_parquet_dataset_refuses_a_file_that_leads_outside_the_folder_it_names(cli, tmp_path):
    _part(tmp_path / "data" / "a.parquet", [1])
    secret = _part(tmp_path / "elsewhere" / "secret.parquet", [99])
    os.symlink(secret, tmp_path / "data" / "b.parquet")
    res = cli("run", _workflow(tmp_path, "{format: parquet-dataset, path: data}"), "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert "b.parquet lies outside" in res.output and "source 'ds'" in res.output


def test_a_parquet_dataset_declaration_is_checked_by_its_source(cli, tmp_path):
    _part(tmp_path / "data" / "a.parquet", [1])
    res = cli("run", _workflow(tmp_path, "{format: parquet-dataset, path: data, delimiter: ';'}"),
              "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2, res.output
    assert ("source 'ds': unknown key 'delimiter'; a parquet-dataset source takes path, format, description"
            in res.output)


# -- a third party's source ------------------------------------------------------------------

class Countdown:
    """A third party's source: ``{format: acme.countdown, n: N}`` holds the numbers N-1 .. 0."""

    @staticmethod
    def make():
        from anonflow.api import Source, SourceSpec
        from anonflow.errors import WorkflowError

        class CountdownSource(Source):
            name = "acme.countdown"
            description = "the numbers n-1 down to 0"

            def parse(self, name, data, base, tables):
                if not isinstance(data.get("n"), int):
                    raise WorkflowError("'n' must be an integer")
                return SourceSpec(name=name, format=self.name, options={"n": data["n"]}, kind=self)

            def describe(self, src):
                return f"countdown from {src.options['n']}"

            def columns(self, src):
                return [("x", "BIGINT")]

            def content_hash(self, src):
                return hashlib.sha256(json.dumps(src.options).encode()).hexdigest()

            def load(self, store, src, *, run_id):
                def fill(con, table):
                    con.execute(f'CREATE TABLE "{table}" AS SELECT (? - 1 - range)::BIGINT AS x FROM range(?)',
                                [src.options["n"], src.options["n"]])
                    return {}

                def check(columns, rows):
                    if rows == 0:
                        from anonflow.errors import InputError
                        raise InputError(f"{self.describe(src)} has no records", where=f"source {src.name!r}")

                return store.ingest(fill, step=src.name, run_id=run_id, check=check)

        return CountdownSource()


def _register(source) -> None:
    class Plugin:
        @pluggy.HookimplMarker("anonflow")
        def anonflow_register_sources(self, register):
            register(source)

    pm, dists = plugins.plugin_manager()
    pm.register(Plugin(), name="acme")
    plugins.set_registry(plugins.Registry(pm, dists))


def test_a_third_party_source_registered_by_the_hook_is_read_like_anonflows_own(cli, tmp_path):
    _register(Countdown.make())
    wf = _workflow(tmp_path, "{format: acme.countdown, n: 4}")
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 0, res.output
    step = _source_step(tmp_path / "s.duckdb")
    assert step["uses"] == "acme.countdown" and step["rows"] == 4
    with Store(tmp_path / "s.duckdb", read_only=True) as store:
        assert [r["x"] for r in store.data(step["output_table"]).to_pylist()] == [3, 2, 1, 0]
    # its own declaration errors are one line naming the source
    wf.write_text(wf.read_text().replace("n: 4", "n: four"))
    res = cli("run", wf, "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2 and "source 'ds': 'n' must be an integer" in res.output


def test_a_third_party_source_may_not_take_a_built_in_name(cli, tmp_path):
    source = Countdown.make()
    source.name = "csv-like"
    _register(source)
    from anonflow import sources

    assert sources.get("csv-like") is source
    source.name = "parquet"
    with pytest.raises(plugins.PluginError, match="'parquet' is registered by a plugin, but it is one of anonflow"):
        _register(source)
        sources.kinds()


def test_an_unknown_format_keeps_its_message(cli, tmp_path):
    write(tmp_path / "d.csv", "x\n1\n")
    res = cli("run", _workflow(tmp_path, "{path: d.csv, format: cvs}"), "--db", tmp_path / "s.duckdb")
    assert res.exit_code == 2 and "format must be one of csv, parquet, duckdb, got 'cvs'" in res.output
