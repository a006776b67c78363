"""What plugin authors found (issue 28, section 7), each driven through the CLI:

1. the code digest covers every module and package the plugin's distribution installs (a
   helper in ``py-modules`` too), whether it is installed as a wheel or editable;
2. whatever class ids an algorithm returns, the published order and ``_class`` never reveal
   the source order;
3. a claim survives a chain of algorithms when it is re-checked on the later output, and the
   report's per-attribute loss compares the published table with the typed original.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from anonflow import codehash
from anonflow import registry as plugins
from anonflow.api import CLASS, Algorithm, Param, hookimpl

from tests.support.helpers import write
from tests.plugins.publishing.test_release import verify

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
import numpy as np
import pyarrow as pa
from anonflow.api import CLASS, Algorithm, Param, hookimpl

from stalehelper import OFFSET


class Blocks(Algorithm):
    name = "stale.blocks"
    version = "1.0.0"
    params = (Param("k", "int", default=5, min=2),)

    def claims(self, params):
        return {"k-anonymity": {"k": params["k"]}}

    def run(self, table, params, ctx):
        q = table.typing.quasi[0]
        x = table.data.column(q).to_numpy().astype(float)
        rank = np.empty(len(x), dtype=np.int64)
        rank[np.argsort(x, kind="stable")] = np.arange(len(x))
        labels = np.minimum(rank // params["k"], max(len(x) // params["k"] - 1, 0))
        data = table.data
        for q in table.typing.quasi:
            col = data.column(q).to_numpy().astype(float)
            means = np.bincount(labels, weights=col) / np.bincount(labels)
            data = data.set_column(data.column_names.index(q), q, pa.array(means[labels] + OFFSET))
        return table.replace(data=data.append_column(CLASS, pa.array(labels, pa.int64())))


@hookimpl
def anonflow_register_algorithms(register):
    register(Blocks())
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "stale-blocks"
version = "1.0.0"

[project.entry-points.anonflow]
stale = "stalecache"

[tool.setuptools]
packages = ["stalecache"]
py-modules = ["stalehelper"]
'''


def _distribution(folder: Path) -> Path:
    """A third-party plugin distribution whose algorithm reads a constant from a helper module
    outside its package (``py-modules``)."""
    write(folder / "pyproject.toml", PYPROJECT)
    write(folder / "stalecache" / "__init__.py", PLUGIN)
    write(folder / "stalehelper.py", "OFFSET = 0.0\n")
    return folder


def _pip_install(src: Path, target: Path, editable: bool) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), *(["-e"] if editable else []), str(src)], check=True)


def _forget_plugin() -> None:
    for name in ("stalecache", "stalehelper"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    codehash.clear_caches()
    plugins.set_registry(None)


@pytest.fixture(params=["wheel", "editable"])
def installed(request, tmp_path):
    """The distribution installed into a site folder on ``sys.path`` (as a wheel, or editable:
    then through its ``.pth`` file and setuptools' import finder, as ``site`` would); yields
    the helper module's file that the run imports."""
    src = _distribution(tmp_path / "src")
    site_dir = tmp_path / "site"
    editable = request.param == "editable"
    _pip_install(src, site_dir, editable)
    saved_path, saved_meta = list(sys.path), list(sys.meta_path)
    if editable:
        import site

        site.addsitedir(str(site_dir))  # runs the .pth file: installs the editable finder
    else:
        sys.path.insert(0, str(site_dir))
    _forget_plugin()
    try:
        yield (src if editable else site_dir) / "stalehelper.py"
    finally:
        sys.path[:], sys.meta_path[:] = saved_path, saved_meta
        _forget_plugin()


def _blocks_workflow(project: Path) -> Path:
    return write(project / "wf.yaml", """
        name: stale-cache
        seed: 1
        sources:
          census: {path: data/sdcmicro/CASCrefmicrodata.csv}
        steps:
          typed: {uses: typing, input: census, with: {quasi: [AFNLWGT, AGI]}}
          grouped: {uses: stale.blocks, input: typed, with: {k: 5}}
          release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
        """)


def test_a_helper_module_of_the_distribution_is_part_of_the_code_digest(cli, project, installed, scratch_root):
    helper = installed
    wf, db = _blocks_workflow(project), project / "s.duckdb"

    def run() -> tuple[dict[str, str], bytes]:
        res = cli("run", wf, "--db", db, "--json")
        assert res.exit_code == 0, res.output
        return ({s["step"]: s["status"] for s in json.loads(res.stdout)["steps"]},
                (project / "out" / "release" / "published.csv").read_bytes())

    first, published = run()
    assert first["grouped"] == "succeeded"
    code = plugins.get_registry().get("algorithm", "stale.blocks").code
    assert "stalehelper" in codehash.code_names(["stalecache"], ["stale-blocks"])
    again, same = run()
    assert again["grouped"] == "cached" and same == published
    before = project / "before"
    (project / "out" / "release").rename(before)
    # the fix: the helper alone changes, the plugin's package and version do not
    helper.write_text("OFFSET = 0.5\n")
    _forget_plugin()
    fixed, changed = run()
    assert fixed["typed"] == "cached" and fixed["grouped"] == "succeeded"
    assert changed != published
    assert plugins.get_registry().get("algorithm", "stale.blocks").code != code
    # the release made before the fix no longer reproduces, and verify names the changed code
    status, result = verify(cli, before, "--rerun", "--sources", project / "data" / "sdcmicro")
    assert status == 1 and result["rerun"]["verdict"] == "different"
    assert result["rerun"]["code"] == ["the code of 1 plugin(s) of stale-blocks (algorithm:stale.blocks)"]


def test_an_editable_install_without_a_finder_is_digested_from_the_folders_its_pth_names(tmp_path, monkeypatch):
    """Other build backends' editable installs (hatchling, flit, pdm) put the source folder on
    ``sys.path`` with a ``.pth`` line: every module and package in that folder counts."""
    src = tmp_path / "src"
    write(src / "plainpkg" / "__init__.py", "X = 1\n")
    write(src / "plainhelper.py", "Y = 1\n")
    (src / "notes").mkdir()  # not a package: no __init__.py
    site_dir = tmp_path / "site"
    info = site_dir / "plain_dist-1.0.dist-info"
    write(info / "METADATA", "Metadata-Version: 2.1\nName: plain-dist\nVersion: 1.0\n")
    write(site_dir / "_plain_dist.pth", f"{src}\n")
    write(info / "RECORD", "_plain_dist.pth,,\nplain_dist-1.0.dist-info/METADATA,,\nplain_dist-1.0.dist-info/RECORD,,\n")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.syspath_prepend(str(site_dir))
    codehash.clear_caches()
    try:
        assert codehash.distribution_names("plain-dist") == {"plainpkg", "plainhelper"}
        before = codehash.code_digest("plainpkg", distributions=["plain-dist"])
        (src / "plainhelper.py").write_text("Y = 2\n")
        codehash.clear_caches()
        assert codehash.code_digest("plainpkg", distributions=["plain-dist"]) != before
    finally:
        codehash.clear_caches()


def test_the_digest_does_not_depend_on_where_the_distribution_is_installed(tmp_path):
    src = _distribution(tmp_path / "src")
    digests = []
    for where in ("a", "b/c"):
        target = tmp_path / where
        _pip_install(src, target, editable=False)
        sys.path.insert(0, str(target))
        _forget_plugin()
        try:
            digests.append(codehash.code_digest("stalecache", distributions=["stale-blocks"]))
        finally:
            sys.path.remove(str(target))
            _forget_plugin()
    assert digests[0] == digests[1] and len(digests[0]) == 64


# -- 3. claims through chains; the report's loss against the typed original ------------------


class ChainBlocks(Algorithm):
    """Groups of k records by rank of the first QI; every QI replaced by its group mean."""

    name = "chain.blocks"
    version = "1.0.0"
    params = (Param("k", "int", default=5, min=2),)

    def claims(self, params):
        return {"k-anonymity": {"k": params["k"]}}

    def run(self, table, params, ctx):
        x = table.data.column(table.typing.quasi[0]).to_numpy().astype(float)
        rank = np.empty(len(x), dtype=np.int64)
        rank[np.argsort(x, kind="stable")] = np.arange(len(x))
        labels = np.minimum(rank // params["k"], max(len(x) // params["k"] - 1, 0))
        data = table.data
        for q in table.typing.quasi:
            col = data.column(q).to_numpy().astype(float)
            means = np.bincount(labels, weights=col) / np.bincount(labels)
            data = data.set_column(data.column_names.index(q), q, pa.array(means[labels]))
        return table.replace(data=data.append_column(CLASS, pa.array(labels, pa.int64())))


class ChainNoise(Algorithm):
    """A perturbation that groups nothing: noise added to one column, each record its own
    class (``arange(n)``, the natural answer a plugin author gives)."""

    name = "chain.noise"
    version = "1.0.0"
    params = (Param("column", "str"), Param("scale", "float", default=1000.0, min=0.0))

    def run(self, table, params, ctx):
        data = table.data
        c = params["column"]
        col = data.column(c).to_numpy().astype(float) + ctx.rng.normal(0.0, params["scale"], data.num_rows)
        data = data.set_column(data.column_names.index(c), c, pa.array(col))
        return table.replace(data=data.append_column(CLASS, pa.array(np.arange(data.num_rows), pa.int64())))


class ChainProvider:
    @hookimpl
    def anonflow_register_algorithms(self, register):
        register(ChainBlocks())
        register(ChainNoise())


@pytest.fixture
def chain_plugins():
    pm, dists = plugins.plugin_manager()
    pm.register(ChainProvider(), name="chain-test")
    plugins.set_registry(plugins.Registry(pm, dists))
    yield
    plugins.set_registry(None)


def _chain_workflow(project: Path, steps: str) -> Path:
    head = textwrap.dedent("""\
        name: chain
        seed: 5
        sources:
          census: {path: data/sdcmicro/CASCrefmicrodata.csv}
        steps:
          typed:
            uses: typing
            input: census
            with: {quasi: [AFNLWGT, AGI], insensitive: [FEDTAX], others: drop}
        """)
    path = project / "wf.yaml"
    path.write_text(head + textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ") + "\n")
    return path


def _notes(result: dict, step: str) -> list[str]:
    return next(s for s in result["steps"] if s["step"] == step).get("notes") or []


def _loss_rows(report: Path) -> dict[str, list[str]]:
    """The report's per-attribute loss table: attribute -> its cells."""
    html = report.read_text()
    section = html[html.index('<section id="loss">'):]
    section = section[:section.index("</section>")]
    rows = re.findall(r"<tr>(.*?)</tr>", section[section.index("<tbody>"):])
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    return {re.sub(r"<[^>]+>", "", c[0]): c[1:] for c in cells}


def _run(cli, wf: Path, project: Path) -> dict:
    res = cli("run", wf, "--db", project / "s.duckdb", "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_a_claim_survives_a_later_step_when_it_still_holds_on_its_output(cli, project, chain_plugins, scratch_root):
    wf = _chain_workflow(project, """
        grouped: {uses: chain.blocks, input: typed, with: {k: 5}}
        noised: {uses: chain.noise, input: grouped, with: {column: FEDTAX}}
        release: {uses: publish, input: noised, with: {publisher: release, path: release}}
        """)
    result = _run(cli, wf, project)
    assert 'claim k-anonymity {"k":5} of the input (an earlier algorithm) kept: re-checked on this step\'s output' \
        in _notes(result, "noised")
    manifest = json.loads((project / "out" / "release" / "manifest.json").read_text())
    assert manifest["release"]["claims"] == {"k-anonymity": {"k": 5}}
    status, checked = verify(cli, project / "out" / "release")
    assert status == 0, checked
    # the loss of AFNLWGT (which only chain.blocks changed) is measured against the typed
    # table: the same as a release of chain.blocks' output alone, never 0
    chained = _loss_rows(project / "out" / "release" / "report.html")
    assert "from the original (<code>typed</code>)" in (project / "out" / "release" / "report.html").read_text()
    wf = _chain_workflow(project, """
        grouped: {uses: chain.blocks, input: typed, with: {k: 5}}
        release: {uses: publish, input: grouped, with: {publisher: release, path: release}}
        """)
    _run(cli, wf, project)
    alone = _loss_rows(project / "out" / "release" / "report.html")
    assert chained["AFNLWGT"] == alone["AFNLWGT"] and chained["AFNLWGT"][2] != "0"


def test_a_claim_a_later_step_breaks_is_dropped_with_a_note_and_the_release_claims_nothing(cli, project,
                                                                                          chain_plugins):
    wf = _chain_workflow(project, """
        grouped: {uses: chain.blocks, input: typed, with: {k: 5}}
        noised: {uses: chain.noise, input: grouped, with: {column: AGI}}
        release: {uses: publish, input: noised, with: {publisher: release, path: release}}
        """)
    result = _run(cli, wf, project)
    dropped = [n for n in _notes(result, "noised") if n.startswith('claim k-anonymity {"k":5} of the input')]
    assert len(dropped) == 1 and "dropped: this step's output does not satisfy it (k-anonymity = 1" in dropped[0]
    manifest = json.loads((project / "out" / "release" / "manifest.json").read_text())
    assert manifest["release"]["claims"] == {}


def test_a_filter_after_an_algorithm_rechecks_its_claims(cli, project, chain_plugins):
    """Records left out of an algorithm's output can break its claim: the claim is checked
    again on what the filter keeps."""
    wf = _chain_workflow(project, """
        grouped: {uses: chain.blocks, input: typed, with: {k: 5}}
        kept: {uses: filter, input: grouped, with: {where: "FEDTAX > 5000"}}
        release: {uses: publish, input: kept, with: {publisher: release, path: release}}
        """)
    result = _run(cli, wf, project)
    assert any(n.startswith('claim k-anonymity {"k":5} of the input (an earlier algorithm) dropped')
               for n in _notes(result, "kept")), _notes(result, "kept")
    manifest = json.loads((project / "out" / "release" / "manifest.json").read_text())
    assert manifest["release"]["claims"] == {}


def test_first_party_chain_lattice_then_local_suppression_keeps_only_what_rechecks(cli, tmp_path):
    """lattice claims l-diversity, local-suppression k-anonymity: with nothing suppressed the
    release claims both; once cells are suppressed, l-diversity (not defined for overlapping
    classes) is dropped with a note and the release claims k-anonymity alone."""
    data, arx = ROOT / "workflows" / "data" / "adult" / "adult_full.csv", ROOT / "workflows" / "data" / "arx"
    wf = write(tmp_path / "wf.yaml", f"""
        name: chain-first-party
        seed: 3
        sources:
          adult: {{path: {data}}}
        steps:
          typed:
            uses: typing
            input: adult
            with: {{quasi: [age, sex, race, marital-status], sensitive: [occupation], others: drop}}
          hier:
            uses: hierarchy
            input: typed
            with:
              age: {{interval: {{widths: [5, 10, 20, 40], anchor: 0}}}}
              sex: {{arx: {arx / "adult_hierarchy_sex.csv"}}}
              race: {{arx: {arx / "adult_hierarchy_race.csv"}}}
              marital-status: {{arx: {arx / "adult_hierarchy_marital-status.csv"}}}
          some: {{uses: sample, input: hier, with: {{n: 4000}}}}
          anon:
            uses: lattice
            input: some
            with: {{model: l-diversity, model_params: {{l: 2}}, utility: generalization-rl}}
          blanked: {{uses: local-suppression, input: anon, with: {{k: 2}}}}
          release: {{uses: publish, input: blanked, with: {{publisher: release, path: release}}}}
        """)
    manifest = tmp_path / "out" / "release" / "manifest.json"
    result = _run(cli, wf, tmp_path)
    assert json.loads(manifest.read_text())["release"]["claims"] == {"k-anonymity": {"k": 2}, "l-diversity": {"l": 2}}
    assert 'claim l-diversity {"l":2} of the input (an earlier algorithm) kept: re-checked on this step\'s output' \
        in _notes(result, "blanked")
    assert "from the original (<code>typed</code>)" in (tmp_path / "out" / "release" / "report.html").read_text()
    res = cli("run", wf, "--db", tmp_path / "s.duckdb", "--json", "--set", "blanked.k=10")
    assert res.exit_code == 0, res.output
    notes = _notes(json.loads(res.stdout), "blanked")
    assert any(n.startswith('claim l-diversity {"l":2} of the input (an earlier algorithm) dropped: its check cannot '
                            "take this step's output (l-diversity: ") for n in notes), notes
    assert json.loads(manifest.read_text())["release"]["claims"] == {"k-anonymity": {"k": 10}}


# -- 2. record order and class ids of an algorithm that groups nothing ----------------------


class ChainRound(Algorithm):
    """A deterministic perturbation: one column rounded to hundreds; each record its own
    class, numbered in source order (``arange(n)``)."""

    name = "chain.round"
    version = "1.0.0"
    params = (Param("column", "str"),)

    def run(self, table, params, ctx):
        data = table.data
        c = params["column"]
        col = np.round(data.column(c).to_numpy().astype(float), -2)
        data = data.set_column(data.column_names.index(c), c, pa.array(col))
        return table.replace(data=data.append_column(CLASS, pa.array(np.arange(data.num_rows), pa.int64())))


@pytest.fixture
def round_plugin():
    class Provider:
        @hookimpl
        def anonflow_register_algorithms(self, register):
            register(ChainRound())
            register(ChainNoise())

    pm, dists = plugins.plugin_manager()
    pm.register(Provider(), name="round-test")
    plugins.set_registry(plugins.Registry(pm, dists))
    yield
    plugins.set_registry(None)


def _published(cli, project: Path, source: str, steps: str, out: str) -> bytes:
    wf = _chain_workflow(project, steps + f"\npublished: {{uses: publish, input: perturbed, with: {{publisher: csv, "
                                          f"path: {out}}}}}\n")
    wf.write_text(wf.read_text().replace("data/sdcmicro/CASCrefmicrodata.csv", source))
    _run(cli, wf, project)
    return (project / "out" / out).read_bytes()


def test_a_non_grouping_algorithm_publishes_nothing_of_the_source_order(cli, project, round_plugin):
    """The same records in another source order publish the same bytes: neither the file's
    order nor ``_class`` follows the source (the classes are numbered by published values)."""
    lines = (project / "data" / "sdcmicro" / "CASCrefmicrodata.csv").read_text().splitlines(keepends=True)
    body = lines[1:]
    np.random.default_rng(11).shuffle(body)
    (project / "data" / "shuffled.csv").write_text(lines[0] + "".join(body))
    steps = "perturbed: {uses: chain.round, input: typed, with: {column: AGI}}"
    first = _published(cli, project, "data/sdcmicro/CASCrefmicrodata.csv", steps, "a.csv")
    shuffled = _published(cli, project, "data/shuffled.csv", steps, "b.csv")
    assert first == shuffled
    table = pacsv.read_csv(project / "out" / "a.csv")
    assert table.column(CLASS).to_pylist() == list(range(1080))
    # the file lists the records by their published values, not in source order
    keys = list(zip(*(table.column(c).to_pylist() for c in ("AFNLWGT", "AGI", "FEDTAX"))))
    assert keys == sorted(keys)


def test_noise_classes_follow_the_published_values(cli, project, round_plugin):
    steps = "perturbed: {uses: chain.noise, input: typed, with: {column: AGI}}"
    _published(cli, project, "data/sdcmicro/CASCrefmicrodata.csv", steps, "n.csv")
    table = pacsv.read_csv(project / "out" / "n.csv")
    source = pacsv.read_csv(project / "data" / "sdcmicro" / "CASCrefmicrodata.csv")
    assert table.column(CLASS).to_pylist() == list(range(1080))
    keys = list(zip(*(table.column(c).to_pylist() for c in ("AFNLWGT", "AGI", "FEDTAX"))))
    assert keys == sorted(keys)
    # AFNLWGT is published as it is: its file order is its sorted order, not the source's
    assert table.column("AFNLWGT").to_pylist() == sorted(source.column("AFNLWGT").to_pylist())
    assert table.column("AFNLWGT").to_pylist() != source.column("AFNLWGT").to_pylist()


def test_an_editable_distribution_the_plugin_requires_counts_too(tmp_path):
    """A plugin's own library, installed editable beside it (both worked on at once): a change
    to the library changes the plugin's digest; anonflow itself is left to the engine digest."""
    core = tmp_path / "core"
    write(core / "pyproject.toml", """
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "stale-core"
        version = "0.1.0"
        [tool.setuptools]
        py-modules = ["stalecore"]
        """)
    write(core / "stalecore.py", "SCALE = 1\n")
    src = _distribution(tmp_path / "src")
    text = (src / "pyproject.toml").read_text()
    (src / "pyproject.toml").write_text(text.replace('version = "1.0.0"\n',
                                                     'version = "1.0.0"\ndependencies = ["stale-core", "anonflow"]\n'))
    site_dir = tmp_path / "site"
    _pip_install(core, site_dir, editable=True)
    _pip_install(src, site_dir, editable=False)
    saved_path, saved_meta = list(sys.path), list(sys.meta_path)
    import site

    site.addsitedir(str(site_dir))
    _forget_plugin()
    try:
        required = codehash.requirements("stale-blocks")  # transitive, sorted: anonflow's own included
        assert {"anonflow", "click"} <= set(required) and list(required) == sorted(required)
        before = codehash.code_digest("stalecache", distributions=["stale-blocks"])
        engine = codehash.engine_digest()
        (core / "stalecore.py").write_text("SCALE = 2\n")
        codehash.clear_caches()
        assert codehash.code_digest("stalecache", distributions=["stale-blocks"]) != before
        assert codehash.engine_digest() == engine
    finally:
        sys.path[:], sys.meta_path[:] = saved_path, saved_meta
        _forget_plugin()


class OddIds(Algorithm):
    """Each record its own class, with ids a plugin might choose: text, or int32 counting down."""

    name = "chain.odd-ids"
    version = "1.0.0"
    params = (Param("ids", "str", choices=("arange", "text", "int32-down")),)

    def run(self, table, params, ctx):
        n = table.num_rows
        ids = {"arange": lambda: pa.array(np.arange(n), pa.int64()),
               "text": lambda: pa.array([f"r{i}" for i in range(n)]),
               "int32-down": lambda: pa.array(np.arange(n)[::-1].copy(), pa.int32())}[params["ids"]]()
        return table.replace(data=table.data.append_column(CLASS, ids))


def test_whatever_ids_a_plugin_returns_the_published_file_is_the_same(cli, project):
    class Provider:
        @hookimpl
        def anonflow_register_algorithms(self, register):
            register(OddIds())

    pm, dists = plugins.plugin_manager()
    pm.register(Provider(), name="odd-ids")
    plugins.set_registry(plugins.Registry(pm, dists))
    try:
        files = {ids: _published(cli, project, "data/sdcmicro/CASCrefmicrodata.csv",
                                 f"perturbed: {{uses: chain.odd-ids, input: typed, with: {{ids: {ids}}}}}", f"{ids}.csv")
                 for ids in ("arange", "text", "int32-down")}
    finally:
        plugins.set_registry(None)
    assert files["text"] == files["arange"] == files["int32-down"]
    assert pacsv.read_csv(project / "out" / "text.csv").column(CLASS).to_pylist() == list(range(1080))
