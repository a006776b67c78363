"""``anonflow verify --rerun``: a re-run's manifest and files compared with the release's,
field by field; with other versions or code, the published files as tables
(:func:`compare_rerun`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from anonflow.api import file_sha256, postgres_display, sandboxed_connection

from .audit import error_text
from .checks import show_value
from .findings import Findings, short
from .manifest import MANIFEST, PLAIN_NAME, not_regular, open_regular, regular_sha256
from .signing import unsigned_form


#: manifest fields that differ whenever the code does: the versions themselves and the step
#: fingerprints (which count every plugin's code digest). With the same versions and code
#: they are compared like every other field; with other ones their differences are expected,
#: reported as version and code differences, never as data differences.
CODE_FIELDS = re.compile(r"^(versions(\.|\[|$)|publisher\.version$|release\.fingerprint$|"
                         r"steps\[\d+\]\.(fingerprint|plugin_version)$)")
#: the sha256 of a published file: bytes a writer of another version may lay out differently
#: for the same table (the data files are then compared as tables, below)
FILE_SHA = re.compile(r"^files\[(\d+)\]\.sha256$")
#: the sha256 of another publish step's file (not in the release; its step's input hash and
#: rows are compared as fields)
STEP_FILE_SHA = re.compile(r"^steps\[\d+\]\.files\[\d+\]\.sha256$")
#: the sha256 of a file a step wrote, by the step's index: for a step that is not reproducible
#: (``reproducible: false``, noise from OpenDP's safe sampler) its noised bytes differ in every run
STEP_FILE_SHA_OF = re.compile(r"^steps\[(\d+)\]\.files\[(\d+)\]\.sha256$")
#: the sampler whose noise no seed reproduces, as findings name it
SAFE_SAMPLER = "OpenDP's cryptographically safe sampler, which no seed reproduces"
#: what an algorithm step fitted (``steps[i].fitted``): a release written before anonflow
#: recorded it has none, which a re-run with newer code adds (expected, not a data difference)
STEP_FITTED = re.compile(r"^steps\[\d+\]\.fitted$")
#: what an algorithm step declared it changed (``steps[i].perturbs``): likewise, a plugin whose
#: newer code declares it (Algorithm.perturbs) adds it in a re-run of an older release
STEP_PERTURBS = re.compile(r"^steps\[\d+\]\.perturbs$")
#: a parameter a plugin gained since the release was written (``steps[i].params.<name>``): the
#: step records its parameters with their defaults, so a re-run by newer code shows the new one
#: at its default; what it publishes is still compared, table by table
STEP_NEW_PARAM = re.compile(r"^steps\[\d+\]\.params\.[^.\[]+$")
#: the report's lineage plot (it draws every file and table the run wrote, those of a step not
#: replayed included)
LINEAGE_PLOT = re.compile(r'(<section id="lineage"><h2>Lineage</h2>(?:<div\b[^>]*>)?)<svg\b.*?</svg>', re.S)
#: what a publish step wrote (``steps[i].files``): not compared for a step not replayed
STEP_FILES = re.compile(r"^steps\[(\d+)\]\.files(\[|\.|$)")
#: the report page's parts that show the versions or are drawn by matplotlib
REPORT_VOLATILE = re.compile(r"<footer>.*?</footer>|<svg\b.*?</svg>", re.S)


def diff_json(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where two JSON values differ, as (path, a, b), paths like ``steps[2].output_hash``."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                out.append((p, a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                out += diff_json(a[k], b[k], p)
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            p = f"{path}[{i}]"
            if i >= len(a) or i >= len(b):
                out.append((p, a[i] if i < len(a) else "<absent>", b[i] if i < len(b) else "<absent>"))
            else:
                out += diff_json(a[i], b[i], p)
        return out
    return [] if a == b and type(a) is type(b) else [(path, a, b)]


def _role(manifest: Mapping[str, Any], index: int) -> Any:
    files = manifest.get("files") or []
    entry = files[index] if 0 <= index < len(files) else None
    return entry.get("role") if isinstance(entry, Mapping) else None


def _dest_text(destination: str) -> str:
    """A destination for a finding, a PostgreSQL URL as libpq reads it (no password)."""
    if destination.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        return f"postgresql://{postgres_display(destination)}"
    return destination


def _version_text(v: Any) -> str:
    return "absent" if v is None else (v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))


def version_changes(recorded: Any, rerun: Any) -> tuple[list[str], list[str]]:
    """What differs between the manifest's ``versions`` and the re-run's: ``(versions,
    code)``, each a list of short phrases. ``versions``: packages (``duckdb 1.1.0 -> 1.2.0``)
    and plugins (``plugin algorithm:mdav: anonflow-std 0.5.0 -> 0.6.0``); ``code``: the code
    digests (``versions.code``: anonflow's own, each plugin's), or that the manifest records
    none (a release written before anonflow recorded them)."""
    a = recorded if isinstance(recorded, Mapping) else {}
    b = rerun if isinstance(rerun, Mapping) else {}
    versions = [f"{k} {_version_text(a.get(k))} -> {_version_text(b.get(k))}"
                for k in sorted(set(a) | set(b), key=str) if k not in ("plugins", "code") and a.get(k) != b.get(k)]
    pa_, pb_ = (a.get("plugins") if isinstance(a.get("plugins"), Mapping) else {},
                b.get("plugins") if isinstance(b.get("plugins"), Mapping) else {})
    versions += [f"plugin {k}: {pa_.get(k) or 'not installed'} -> {pb_.get(k) or 'not installed'}"
                 for k in sorted(set(pa_) | set(pb_), key=str) if pa_.get(k) != pb_.get(k)]
    code: list[str] = []
    ca, cb = a.get("code"), b.get("code")
    if ca is None and cb is not None:
        code.append("the manifest records no code digests (written by an anonflow that did not record them), so "
                    "the re-run's code cannot be compared with the release's")
    elif ca is not None and cb is None:
        code.append("the re-run records no code digests, the manifest does")
    elif ca != cb:
        ca = ca if isinstance(ca, Mapping) else {}
        cb = cb if isinstance(cb, Mapping) else {}
        if ca.get("anonflow") != cb.get("anonflow"):
            code.append(f"anonflow's own code (sha256 {short(ca.get('anonflow'))} -> {short(cb.get('anonflow'))})")
        qa = ca.get("plugins") if isinstance(ca.get("plugins"), Mapping) else {}
        qb = cb.get("plugins") if isinstance(cb.get("plugins"), Mapping) else {}
        changed = [k for k in sorted(set(qa) | set(qb), key=str) if qa.get(k) != qb.get(k)]
        by_dist: dict[str, list[str]] = {}  # one package's plugins share its code digest: one phrase each
        for k in changed:
            dist = str(pa_.get(k) or pb_.get(k) or "?").split(" ")[0]
            by_dist.setdefault(dist, []).append(str(k))
        for dist, keys in sorted(by_dist.items()):
            code.append(f"the code of {len(keys)} plugin(s) of {dist} (" + ", ".join(keys[:8])
                        + (f", and {len(keys) - 8} more" if len(keys) > 8 else "") + ")")
        for k in sorted(set(ca) | set(cb), key=str):
            if k not in ("anonflow", "plugins") and ca.get(k) != cb.get(k):
                code.append(f"code digest {k}")
    return versions, code


def _noised(step: Mapping[str, Any] | None, index: int) -> bool:
    """Whether file ``index`` of a step record carries noise no seed reproduces: the step is not
    reproducible and, where it records what it released (``fitted.dp_release``: file name ->
    its columns, noised columns, rows, cells), the file is one it lists with noised columns (its
    other files, such as an accounting, must still be byte-identical)."""
    if not isinstance(step, Mapping):
        return False
    files = step.get("files") if isinstance(step.get("files"), list) else []
    released = (step.get("fitted") or {}).get("dp_release") if isinstance(step.get("fitted"), Mapping) else None
    if not isinstance(released, Mapping):
        return True
    entry = files[index] if 0 <= index < len(files) and isinstance(files[index], Mapping) else {}
    what = released.get(str(entry.get("path", "")).rsplit("/", 1)[-1])
    return isinstance(what, Mapping) and bool(what.get("noised"))


def compare_tables(a: Path, b: Path, fmt: str) -> dict[str, Any]:
    """Two published files (``parquet`` or ``csv``) compared as tables, with DuckDB: the same
    columns (names, in order, and types), and the same records, counted both ways as
    multisets (``EXCEPT ALL``) and in file order. Returns ``{same, in_order, rows: (a, b),
    only_a, only_b, detail}``; ``same`` means the same columns and the same multiset of records.
    Files are read through Arrow datasets (no glob expansion of their names); CSV columns are
    typed by the same inference on both sides."""
    import pyarrow.dataset as ds

    con = sandboxed_connection()  # one thread: a scan in file order (row_number() OVER () numbers records as stored)
    try:
        for name, path in (("a", a), ("b", b)):
            con.register(name, ds.dataset(str(path), format="parquet" if fmt == "parquet" else "csv"))
        cols_a = [(r[0], r[1]) for r in con.execute("DESCRIBE a").fetchall()]
        cols_b = [(r[0], r[1]) for r in con.execute("DESCRIBE b").fetchall()]
        rows = tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("a", "b"))
        out: dict[str, Any] = {"rows": rows, "in_order": False, "only_a": None, "only_b": None}
        if [c for c, _ in cols_a] != [c for c, _ in cols_b]:
            out.update(same=False, detail=f"other columns: the release's are {[c for c, _ in cols_a]}, the re-run's "
                                          f"{[c for c, _ in cols_b]}")
            return out
        typed = [f"column {c!r} is {t} in the release, {u} in the re-run"
                 for (c, t), (_, u) in zip(cols_a, cols_b) if t != u]
        only_a = con.execute("SELECT count(*) FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b)").fetchone()[0]
        only_b = con.execute("SELECT count(*) FROM (SELECT * FROM b EXCEPT ALL SELECT * FROM a)").fetchone()[0]
        out.update(only_a=only_a, only_b=only_b)
        if typed or only_a or only_b:
            parts = typed + ([f"{only_a} of the release's {rows[0]} records are not in the re-run's file, and "
                              f"{only_b} of the re-run's {rows[1]} records are not in the release's"]
                             if only_a or only_b else [])
            out.update(same=False, detail="; ".join(parts))
            return out
        numbered = "SELECT row_number() OVER () AS __anonflow_row, * FROM {}"
        moved = con.execute(f"SELECT count(*) FROM ({numbered.format('a')} EXCEPT ALL {numbered.format('b')})"
                            ).fetchone()[0]
        out.update(same=True, in_order=moved == 0,
                   detail=f"the same {len(cols_a)} columns and {rows[0]} records"
                          + (" in the same order" if moved == 0 else f", {moved} of them in another place"))
        return out
    finally:
        con.close()


def compare_rerun(release: Path, manifest: Mapping[str, Any], again_dir: Path, again: Mapping[str, Any],
                   f: Findings, not_replayed: Mapping[str, list[str]] | None = None) -> None:
    """Compare the re-run's release (``again_dir``, its manifest ``again``) with the recorded
    one and set ``f.rerun``'s verdict.

    With the same versions and code digests the re-run must give every manifest field and
    every file byte for byte (verdict ``identical``). When the versions or code differ (the
    ``versions`` field, code digests included: a plugin fixed without a version bump shows),
    the differences are reported in three parts: the versions and the code digests that
    changed (findings ``re-run versions`` and ``re-run code``, shown, not failures); the fields
    that differ because the code does (the versions, the step fingerprints, which count the
    code, the plugins' versions: expected, never data differences); and the data: every other
    manifest field (step output hashes, rows, metrics, checks, parameters, ...) must still be
    the recorded one, and every published data file must hold the same table (same columns,
    same records as a multiset; bytes may differ: another Arrow writes another Parquet layout).
    A re-run that publishes the same tables is verdict ``same-tables-different-code`` (a pass,
    with a shown note); one that publishes other records fails, naming the file and how many
    records differ. With other code ``report.html`` (it shows the versions, its plots are drawn
    by matplotlib) and ``manifest.json`` (compared field by field) are not compared byte for
    byte; the page is compared with its footer and plots left out, and a page that differs
    beyond them is said (shown), not failed: it is not attested by such a re-run."""
    skip = ("integrity", "signature")
    rec_versions, new_versions = manifest.get("versions"), again.get("versions")
    pub_a, pub_b = manifest.get("publisher") or {}, again.get("publisher") or {}
    code_differs = rec_versions != new_versions or pub_a.get("version") != pub_b.get("version")
    versions, code = version_changes(rec_versions, new_versions)
    if pub_a.get("version") != pub_b.get("version"):
        versions.append(f"publisher {(manifest.get('publisher') or {}).get('name')} "
                        f"{_version_text((manifest.get('publisher') or {}).get('version'))} -> "
                        f"{_version_text((again.get('publisher') or {}).get('version'))}")
    f.rerun = {"verdict": "different", "versions": versions, "code": code}
    # publish steps that write outside the output folder (a database) are not replayed
    # (anonflow.egress): what they recorded writing is not compared, and the verdict says so
    skipped = {i for i, st in enumerate(manifest.get("steps") or [])
               if isinstance(st, Mapping) and st.get("step") in (not_replayed or {})}
    if not_replayed:
        f.rerun["not_replayed"] = sorted(not_replayed)
        for name, dests in sorted(not_replayed.items()):
            f.add(True, f"step {name}", "not replayed: it writes outside the re-run's scratch folder ("
                  + ", ".join(_dest_text(d) for d in dests) + "); what it wrote is not attested by this re-run",
                  show=True)
    if code_differs:
        f.add(True, "re-run versions", ("the re-run runs other versions than the release records: " + "; ".join(
            versions)) if versions else "the re-run runs the versions the release records", show=True)
        f.add(True, "re-run code", ("the re-run's code differs from the release's: " + "; ".join(code)) if code else
              "the re-run's code digests are the ones the release records", show=True)

    diffs = diff_json({k: v for k, v in manifest.items() if k not in skip},
                      {k: v for k, v in again.items() if k not in skip})
    # steps whose output carries noise no seed reproduces (Plugin.reproducible): everything of
    # theirs is compared but the noised files' bytes (their columns, cells and rows are fields)
    noisy = {i: st for m in (manifest, again) for i, st in enumerate(m.get("steps") or [])
             if isinstance(st, Mapping) and st.get("reproducible") is False}
    noise_skipped: list[str] = []
    expected: list[str] = []        # fields that differ because the code does
    newly_fitted: list[str] = []    # steps[i].fitted the release (older code) does not record
    newly_declared: list[str] = []  # steps[i].perturbs likewise
    new_params: list[str] = []      # steps[i].params.<name> a plugin gained since
    data_diffs = 0
    for path, a, b in diffs:
        step_files = STEP_FILES.match(path)
        if step_files and int(step_files.group(1)) in skipped:
            continue  # a step not replayed wrote nothing in the re-run
        file_sha = FILE_SHA.match(path)
        if skipped and file_sha and _role(manifest, int(file_sha.group(1))) == "report":
            continue  # the page draws what that step wrote: judged below, with the page itself
        noisy_file = STEP_FILE_SHA_OF.match(path)
        if noisy_file and _noised(noisy.get(int(noisy_file.group(1))), int(noisy_file.group(2))):
            noise_skipped.append(path)
            continue
        if code_differs and CODE_FIELDS.match(path):
            expected.append(path)
            continue
        if code_differs and FILE_SHA.match(path):
            continue  # judged below, with the file itself compared as a table
        if code_differs and STEP_FILE_SHA.match(path):
            expected.append(path)
            continue
        if code_differs and STEP_FITTED.match(path) and a == "<absent>":
            newly_fitted.append(path)
            continue
        if code_differs and STEP_PERTURBS.match(path) and a == "<absent>":
            newly_declared.append(path)
            continue
        if code_differs and STEP_NEW_PARAM.match(path) and a == "<absent>":
            new_params.append(path)
            continue
        f.add(False, f"manifest field {path}", f"recorded {show_value(a)}, re-run gives {show_value(b)}")
        data_diffs += 1
    if expected:
        fps = sum(1 for p in expected if p.endswith("fingerprint"))
        others = sum(1 for p in expected if STEP_FILE_SHA.match(p))
        f.add(True, "re-run fingerprints", f"{fps} step fingerprint(s) differ (they count the code), and "
                                           f"{len(expected) - fps - others} version field(s)"
                                           + (f" and {others} sha256 of other publish steps' files" if others else "")
                                           + ": expected with other code, not data differences", show=True)

    if newly_fitted:
        f.add(True, "re-run fitted values", f"the re-run records what {len(newly_fitted)} algorithm step(s) fitted "
                                            f"({', '.join(p.removesuffix('.fitted') for p in newly_fitted)}.fitted), "
                                            "which the release, written before anonflow recorded it, does not: "
                                            "expected with newer code, not a data difference", show=True)

    if newly_declared:
        f.add(True, "re-run perturbation declarations", f"the re-run records what {len(newly_declared)} algorithm "
              f"step(s) declare they changed ({', '.join(newly_declared)}), which the release, written by older "
              "code, does not: expected with newer code, not a data difference", show=True)

    if new_params:
        f.add(True, "re-run new parameters", f"the re-run's plugins have {len(new_params)} parameter(s) the release, "
              f"written by older code, does not record ({', '.join(new_params)}), each at its default: expected with "
              "newer code; what the steps publish is compared below", show=True)

    for i, st in sorted(noisy.items()):
        files = [x for x in st.get("files") or [] if isinstance(x, Mapping)]
        differ = {int(m.group(1)) for p in noise_skipped if p.startswith(f"steps[{i}].")
                  for m in [re.search(r"\.files\[(\d+)\]", p)] if m}
        names = [str(files[j].get("path")) for j in sorted(differ) if j < len(files)]
        f.add(True, f"step {st.get('step')}", f"its output carries noise from {SAFE_SAMPLER}: the values of its "
              f"{len(names)} noised file(s) ({', '.join(names) or 'none differ'}) were not compared, their bytes differ "
              f"as expected; its parameters, privacy loss, its {len(files) - len(names)} other file(s) byte for byte, "
              "and every file's name, rows and what it released apart from the noise (columns, cells) were compared",
              show=True)

    signed = manifest.get("signature") is not None or again.get("signature") is not None
    entries = {e.get("path"): e for e in manifest.get("files") or [] if isinstance(e, Mapping)}
    again_entries = {e.get("path"): e for e in again.get("files") or [] if isinstance(e, Mapping)}
    names = sorted({e for e in entries if PLAIN_NAME.match(str(e))} | set(again_entries) | {MANIFEST})
    same_files = same_tables = 0
    for name in names:
        a, b = release / name, again_dir / name
        entry = entries.get(name) or again_entries.get(name) or {}
        why = not_regular(a)
        if why is not None and why != "does not exist":
            f.add(False, f"file {name}", f"{why} in the release: not compared")
            data_diffs += 1
            continue
        if why is not None or not b.is_file():
            f.add(False, f"file {name}", "exists only in the " + ("re-run" if b.is_file() else "release"))
            data_diffs += 1
            continue
        if name == MANIFEST:
            if code_differs or skipped or noise_skipped:
                same_files += 1  # it records the versions (or the report's digest, the noised files' digests):
                # compared field by field above
            elif signed and unsigned_form(manifest) != unsigned_form(again):
                f.add(False, f"file {name}", "differs from the re-run's (signatures aside)")
                data_diffs += 1
            elif not signed and regular_sha256(a) != file_sha256(b):
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {short(regular_sha256(a))} vs "
                                             f"{short(file_sha256(b))}")
                data_diffs += 1
            else:
                same_files += 1
            continue
        ha, hb = regular_sha256(a), file_sha256(b)
        if ha == hb:
            same_files += 1
            continue
        if entry.get("format") in ("parquet", "csv"):
            try:
                cmp = compare_tables(a, b, entry["format"])
            except Exception as exc:  # a file DuckDB cannot read: say so, never a traceback
                cmp = {"same": False, "detail": f"cannot be compared as tables: {error_text(exc)}"}
            if cmp["same"] and code_differs:
                same_files += 1
                same_tables += 1
                f.add(True, f"file {name}", f"holds the same table as the re-run's ({cmp['detail']}); its bytes differ "
                                            f"(sha256 {short(ha)} vs {short(hb)}), as another writer version may lay "
                                            "them out", show=True)
            elif cmp["same"]:
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {short(ha)} vs {short(hb)} "
                                             f"(the same table, {cmp['detail']}, but the same versions and code must "
                                             "give the same bytes)")
                data_diffs += 1
            else:
                f.add(False, f"file {name}", f"differs from the re-run's: sha256 {short(ha)} vs {short(hb)}: "
                                             f"{cmp['detail']}")
                data_diffs += 1
            continue
        if skipped and not code_differs and entry.get("role") == "report":
            try:
                with os.fdopen(open_regular(a), "rb") as fh:
                    page_a = fh.read().decode("utf-8", "replace")
                page_b = b.read_text(encoding="utf-8", errors="replace")
                alike = LINEAGE_PLOT.sub(r"\1", page_a) == LINEAGE_PLOT.sub(r"\1", page_b)
            except OSError:
                alike = False
            if alike:
                same_files += 1
                f.add(True, f"file {name}", "differs from the re-run's page only in its lineage plot, which draws "
                                            "what the steps not replayed wrote", show=True)
            else:
                f.add(False, f"file {name}", f"differs from the re-run's beyond its lineage plot: sha256 "
                                             f"{short(ha)} vs {short(hb)}")
                data_diffs += 1
            continue
        if code_differs and entry.get("role") == "report":
            same_files += 1
            try:
                with os.fdopen(open_regular(a), "rb") as fh:
                    page_a = fh.read().decode("utf-8", "replace")
                page_b = b.read_text(encoding="utf-8", errors="replace")
                alike = REPORT_VOLATILE.sub("", page_a) == REPORT_VOLATILE.sub("", page_b)
            except OSError:
                alike = False
            f.add(True, f"file {name}", "differs from the re-run's page only in its versions footer and plots "
                                        "(drawn by the re-run's matplotlib)" if alike else
                  "differs from the re-run's page beyond its versions footer and plots (another report version?): "
                  "with other code the page is not attested by the re-run; compare it with a re-run's page, or "
                  "re-run with the recorded versions", show=True)
            continue
        f.add(False, f"file {name}", f"differs from the re-run's: sha256 {short(ha)} vs {short(hb)}")
        data_diffs += 1
    if data_diffs or same_files != len(names):
        return
    steps = len(again.get("steps") or [])
    if not code_differs and noise_skipped:
        f.rerun["verdict"] = "identical-except-noise"
        f.rerun["noise_not_compared"] = sorted(str(st.get("step")) for st in noisy.values())
        f.add(True, "re-run", f"the recorded workflow re-run gives the same {steps} step hashes, {len(names) - 1} "
                              f"byte-identical files and the same {MANIFEST} fields but the sha256 of the noised files "
                              f"of step(s) {', '.join(f.rerun['noise_not_compared'])}: their values were not compared "
                              f"(noise from {SAFE_SAMPLER})", show=True)
        return
    if not code_differs:
        f.rerun["verdict"] = "identical"
        f.add(True, "re-run", f"the recorded workflow re-run gives the same {steps} step hashes and {len(names)} "
                              "byte-identical files" + (" (manifest.json compared without its signature)" if signed
                                                        else ""))
        return
    f.rerun["verdict"] = "same-tables-different-code"
    tables = sum(1 for n in names if (entries.get(n) or {}).get("format") in ("parquet", "csv"))
    f.add(True, "re-run", f"same published tables, different code: the recorded workflow re-run with other "
                          f"versions or code gives the same {steps} step output hashes, metrics and checks, and the "
                          f"same {tables} published table(s)"
                          + (f" ({same_tables} of them the same table in other bytes)" if same_tables else
                             ", byte for byte")
                          + "; it differs in its versions and code only (re-run versions, re-run code)", show=True)
