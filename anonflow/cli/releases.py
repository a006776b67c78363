"""The release commands: ``verify``, ``apply`` and ``keygen``. Parse, hand the release
publisher the engine (a :class:`~anonflow.session.Session`, as :class:`anonflow.api.Engine`),
print."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import click

from .. import egress
from ..errors import InputError
from ..session import Session
from ..sources import recorded_in_memory
from .shared import echo_json, guard, printable, release_publisher


@click.command()
@click.argument("release", type=click.Path(path_type=Path))
@click.option("--rerun", is_flag=True, help="Also re-run the recorded workflow and compare every hash.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Store to record the re-run in (default: a scratch store, removed afterwards).")
@click.option("--sources", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder the sources' recorded paths are relative to (the workflow file's folder; default: "
                   "the folder above the release's output folder, if it holds them all); a file missing there, "
                   "or a source recorded by absolute path, is looked for by its file name in it.")
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Public key file (KEY.pub from 'anonflow keygen KEY'): check the release's signature with it.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
              help="With --rerun: a host the re-run may read a PostgreSQL source from, and offer your credentials "
                   "(PGPASSWORD, .pgpass) to (repeatable); the manifest never chooses one (docs/egress.md).")
@guard
def verify(release: Path, rerun: bool, db: Path | None, sources: Path | None, key: Path | None,
           as_json: bool, allow_hosts: tuple[str, ...]) -> None:
    """Check a release directory: file hashes against its manifest, each CSV against its
    Parquet partner, the signature (--key), the privacy checks re-run on the published files
    alone, and (--rerun) a confined re-run of the recorded workflow. Exit 0 only if everything
    holds; otherwise each difference is named and the exit code is 1."""
    name = "release"  # which publisher verifies: named by the manifest, read only if it is a regular file
    in_memory: list[str] = []  # sources given in Python (anonflow.Workflow / run(sources=...)): no file to re-run
    try:
        if stat.S_ISREG(os.lstat(release / "manifest.json").st_mode):
            fd = os.open(release / "manifest.json", os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, encoding="utf-8") as fh:
                recorded = json.loads(fh.read())
            name = (recorded.get("publisher") or {}).get("name", "release")
            in_memory = [str(s.get("name")) for s in recorded.get("sources") or []
                         if isinstance(s, dict) and recorded_in_memory(s)]
    except (OSError, ValueError, AttributeError, RecursionError):
        name, in_memory = "release", []
    if not release.is_dir():
        raise InputError(f"{release} is not a directory (expected a release directory)")
    publisher = release_publisher(name)
    refused = rerun and bool(in_memory)
    if refused:  # the checks that need no re-run still run; the re-run is refused in one line
        rerun = False
    engine = Session()  # what re-runs the recorded workflow (anonflow.api.Engine)
    with egress.use(egress.for_rerun(allow_hosts)):  # someone else's workflow: external sinks are not replayed
        result = (publisher.verify(release, rerun=rerun, db=db, sources=sources, key=key, engine=engine)
                  if key is not None else publisher.verify(release, rerun=rerun, db=db, sources=sources,
                                                           engine=engine))
    if refused:
        what = ", ".join(repr(n) for n in in_memory)
        were = f"sources {what} were in-memory tables" if len(in_memory) > 1 else f"source {what} was an in-memory table"
        result["findings"].append({"ok": False, "what": "re-run", "detail": (
            f"not attempted: {were} given in Python (recorded by its content hash only), which neither the release nor "
            "--sources DIR can supply; 'anonflow verify' without --rerun checks the release's files, hashes and "
            "privacy claims, and re-running the workflow in Python on the same table reproduces it")})
        result["ok"] = False
        result["rerun"] = {"verdict": "not-attempted"}
    if as_json:
        echo_json(result)
    else:
        for item in result["findings"]:
            if not item["ok"] or item.get("show"):
                # a finding quotes the release's own fields: a forged one must not drive the terminal
                click.echo(f"{'ok  ' if item['ok'] else 'FAIL'}  {printable(item['what'])}: {printable(item['detail'])}")
        bad = sum(not i["ok"] for i in result["findings"])
        if result["ok"]:
            verdict = (result.get("rerun") or {}).get("verdict")
            skipped = (result.get("rerun") or {}).get("not_replayed") or []
            said = {"same-tables-different-code": ", the re-run with other versions or code publishes the same tables",
                    "identical-except-noise": ", the re-run reproduces it byte for byte except the values of the "
                                              "differentially private noise, which no seed reproduces (compared: "
                                              "their files' columns, cells and accounting)"}
            click.echo(f"release {release} verified: {len(result['findings'])} checks hold"
                       + (said.get(verdict, ", the re-run reproduces it byte for byte") if rerun else "")
                       + (f" (step{'s' if len(skipped) > 1 else ''} {', '.join(skipped)} not replayed: "
                          "it writes outside the re-run's scratch folder)" if rerun and skipped else ""))
        else:
            click.echo(f"release {release} does NOT verify: {bad} of {len(result['findings'])} checks failed")
    if not result["ok"]:
        raise SystemExit(1)


@click.command("apply", short_help="Publish new records as a release published its table.")
@click.argument("release", type=click.Path(path_type=Path))
@click.argument("new_data", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), default=None, metavar="OUT",
              help="Folder to write (it must not exist, or be empty; default: RELEASE-applied beside the release).")
@click.option("--hierarchies", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Folder holding the hierarchy (and grading) files the release was made with, found by their "
                   "recorded sha256 (default: beside the workflow, the folder above the release's output folder).")
@click.option("--suppression", type=click.FloatRange(0.0, 1.0), default=None, metavar="FRACTION",
              help="Largest fraction of the new records that may be withheld (the records of classes failing a "
                   "claimed model), in [0, 1]; default: the algorithm step's recorded cap.")
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Public key file (KEY.pub from 'anonflow keygen KEY'): the release's signature must verify "
                   "under it.")
@click.option("--json", "as_json", is_flag=True, help="Print the application's record as JSON.")
@guard
def apply_cmd(release: Path, new_data: Path, out: Path | None, hierarchies: Path | None, suppression: float | None,
              key: Path | None, as_json: bool) -> None:
    """Publish NEW_DATA (a CSV or Parquet file with the original columns) as the
    release directory RELEASE published its table, without searching again: the
    recorded preparation (typing, hierarchies), then the algorithm's recorded result
    -- the lattice node it chose, or each record assigned to the nearest published
    group on z-scores by the original table's standardization (microaggregation).

    A release that 'anonflow verify RELEASE [--key KEY]' would fail is refused
    (exit 2); with --key its signature must verify. The release's checks (those
    verify runs) are re-run on the new batch alone; when one would not hold,
    nothing is written (exit 1). The output folder (never inside RELEASE) holds the
    data files and application.json. See docs/releases.md, "Applying a release to
    new data"."""
    if not release.is_dir():
        raise InputError(f"{release} is not a directory (expected a release directory)")
    publisher = release_publisher()
    if not hasattr(publisher, "apply"):
        raise InputError("the installed release publisher cannot apply releases to new data")
    engine = Session()  # what prepares the new batch and writes the folder (anonflow.api.Engine)
    result = (publisher.apply(release, new_data, out, hierarchies=hierarchies, suppression=suppression, key=key,
                              engine=engine)
              if key is not None else publisher.apply(release, new_data, out, hierarchies=hierarchies,
                                                      suppression=suppression, engine=engine))
    if as_json:
        echo_json(result)
        return
    applied = result.get("applied") or {}
    if "node" in applied:
        what = "node [" + ", ".join(f"{q}={lv}" for q, lv in applied["node"].items()) + "]"
    elif "rule" in applied:  # a recoding: the release's fixed rule, column by column
        what = "the release's rule (" + "; ".join(
            f"{c}: {r.get('method')}" for c, r in sorted((applied["rule"] or {}).items())) + ")"
    else:
        what = f"{applied.get('groups_used')} of the release's {applied.get('groups')} groups"
    sup = result["suppression"]
    for line in result.get("notes") or []:
        click.echo(f"note: {line}")
    click.echo(result["signature_sentence"])
    click.echo(f"applied {release} to {new_data}: {result['files'][0]['rows']} record(s) published with {what}"
               + (f", {sup['withheld']} withheld" if sup["withheld"] else "")
               + f"; checked on the new batch alone: {result['checked_sentence']}")
    click.echo(f"written to {result['out']}")


@click.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@guard
def keygen(path: Path) -> None:
    """Write a new Ed25519 key pair for signed releases: PATH (the private key, PEM, mode 0600)
    and PATH.pub (the public key, for 'anonflow verify --key'). Never overwrites a file."""
    if not path.name or str(path).endswith(os.sep) or path.is_dir():
        raise InputError(f"keygen: {str(path) or repr('')} names no file; give the private key's file name, "
                         "e.g. anonflow keygen release.key")
    publisher = release_publisher()
    if not hasattr(publisher, "keygen"):
        raise InputError("the installed release publisher cannot sign releases")
    try:
        pub, fingerprint = publisher.keygen(path)
    except OSError as exc:  # a folder not writable, a name too long, a read-only file system
        raise InputError(f"keygen: cannot write {exc.filename or path}: {exc.strerror or exc}") from None
    click.echo(f"private key {path} (keep it secret; give it to the release publisher's 'sign')")
    click.echo(f"public key  {pub} (sha256 {fingerprint}; give it to 'anonflow verify --key')")
