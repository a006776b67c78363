#!/usr/bin/env python
"""Mutation testing of the code that carries anonflow's guarantees.

    python tests/mutation/run.py                 # every target, a sample of tool mutants each
    python tests/mutation/run.py --list          # what would run, nothing runs
    python tests/mutation/run.py --target lattice --sample 40 --report mutation.md

Two kinds of mutant, both judged by the target's own test command (a fast subset of the suite,
``-m "not slow"``); a mutant is *killed* when the command fails (or runs past its timeout):

* tool mutants: cosmic-ray enumerates every mutation of its operators (comparison, arithmetic,
  boolean, constant, loop and exception operators; see ``OPERATORS``) inside the functions a
  target names; a deterministic sample (``--sample`` per target, ``--seed``) of them is applied,
  one at a time, with cosmic-ray's own ``mutate_and_test``;
* hand mutants (``targets.HAND``): one-line changes a mutation tool cannot make -- the SQL inside
  strings (a ``<`` for a ``<=``, a dropped condition, a count of the wrong column) -- and the
  plausible bugs past reviews found no test for. Every hand mutant runs, every time.

Everything happens in a scratch copy of the working tree (tracked and untracked, not ignored,
files), put first on ``PYTHONPATH``, so the checkout is never modified and a crash leaves it
intact. Survivors whose change is listed in ``targets.EQUIVALENT`` (with why it cannot change
behaviour) are reported as equivalent and left out of the score. The exit status is 1 when a
non-equivalent mutant survives, so the script can gate a change.

Needs the test extra plus cosmic-ray (``pip install -e '.[test,mutation]'``).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from targets import EQUIVALENT, HAND, TARGETS, HandMutant, Target  # noqa: E402

#: cosmic-ray's operators, less the ones whose mutants are almost all trivially killed by a
#: TypeError (shifts, powers, xor on floats) or almost all equivalent (``==`` -> ``is`` on
#: interned values), and the two that pick variables at random.
OPERATOR_EXCLUDE = ("*_Pow*", "*Pow_*", "*RShift*", "*LShift*", "*BitXor*", "*_Mod*", "*Mod_*",
                    "core/ReplaceComparisonOperator_*_Is", "core/ReplaceComparisonOperator_*_IsNot",
                    "core/VariableReplacer", "core/VariableInserter")


def operators() -> list[str]:
    import cosmic_ray.plugins

    names = cosmic_ray.plugins.operator_names()
    return sorted(n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in OPERATOR_EXCLUDE))


# -- the scratch tree --------------------------------------------------------------------------


def scratch_tree(dest: Path) -> Path:
    """Copy the working tree's tracked and untracked (not ignored) files to ``dest``."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"mutation: {ROOT} must be a git checkout (git ls-files failed: {exc})")
    tree = dest / "tree"
    for rel in sorted(set(listed.decode().split("\0")) - {""}):
        src = ROOT / rel
        if not src.is_file() or src.is_symlink():
            continue  # deleted in the working tree, or a link: not copied
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, tree / rel)
    return tree


def environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "plugins"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant applied within the same second must not reuse a .pyc
    return env


def check_imports_from(tree: Path, env: dict[str, str]) -> None:
    code = "import anonflow, anonflow_std; print(anonflow.__file__); print(anonflow_std.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    where = out.stdout.split()
    if out.returncode or len(where) != 2 or not all(Path(w).is_relative_to(tree) for w in where):
        sys.exit(f"mutation: the scratch copy is not what Python imports ({out.stdout or out.stderr}); "
                 f"install anonflow with 'pip install -e .' and run from the checkout")


# -- which mutations -------------------------------------------------------------------------


def function_spans(path: Path, patterns: list[str]) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of every function in ``path`` matching a pattern."""
    tree = ast.parse(path.read_text(), str(path))
    spans: list[tuple[str, int, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and any(fnmatch.fnmatchcase(name, p) for p in patterns):
                    spans.append((name, child.lineno, child.end_lineno or child.lineno))
                walk(child, name + ".")

    walk(tree, "")
    return spans


def annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the type annotations of ``path`` are: a mutant there changes nothing at run time
    (``from __future__ import annotations``), so none is made there."""
    spans = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        notes = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            notes.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            notes.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        spans += [((a.lineno, a.col_offset), (a.end_lineno or a.lineno, a.end_col_offset or 0)) for a in notes]
    return spans


def enumerate_mutants(tree: Path, target: Target, scratch: Path):
    """Every cosmic-ray mutation inside the target's functions: (work item, function name)."""
    from cosmic_ray.commands.init import init
    from cosmic_ray.work_db import WorkDB

    found = []
    for rel, patterns in target.functions.items():
        path = tree / rel
        spans = function_spans(path, patterns)
        notes = annotation_spans(path)
        missing = [p for p in patterns if not any(fnmatch.fnmatchcase(s[0], p) for s in spans)]
        if missing:
            sys.exit(f"mutation: target {target.name!r}: no function {', '.join(missing)} in {rel} "
                     f"(targets.py is out of date)")
        db = WorkDB(scratch / f"{target.name}-{path.stem}.sqlite", WorkDB.Mode.create)
        try:
            init([path], db, {})
            wanted = set(operators())
            for item in db.pending_work_items:
                m = item.mutations[0]
                if m.operator_name not in wanted:
                    continue
                line = m.start_pos[0]
                if any(a <= tuple(m.start_pos) < b for a, b in notes):
                    continue
                inside = [s for s in spans if s[1] <= line <= s[2]]
                if inside:
                    # the innermost function names the mutant
                    found.append((item, min(inside, key=lambda s: s[2] - s[1])[0]))
        finally:
            db.close()
    found.sort(key=lambda f: (str(f[0].mutations[0].module_path), f[0].mutations[0].start_pos,
                              f[0].mutations[0].operator_name, f[0].mutations[0].occurrence))
    return found


# -- running --------------------------------------------------------------------------------


@dataclass
class Outcome:
    target: str
    kind: str            # "tool" or "hand"
    where: str           # file:function:line, or the hand mutant's name
    killed: bool
    timeout: bool
    diff: str
    equivalent: str | None = None
    seconds: float = 0.0
    file: str = ""


@dataclass
class Tally:
    ran: int = 0
    killed: int = 0
    equivalent: int = 0
    survivors: list[Outcome] = field(default_factory=list)

    def score(self) -> float | None:
        judged = self.ran - self.equivalent
        return None if judged <= 0 else self.killed / judged


def change_key(rel: str, diff: str) -> str:
    """A mutant's identity that survives edits elsewhere: the file and its changed lines."""
    minus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return f"{rel}: {' / '.join(minus)} => {' / '.join(plus)}"


def run_command(command: str, tree: Path, env: dict[str, str], timeout: float) -> tuple[bool, bool, str]:
    """(failed, timed out, output tail) of the test command in the scratch tree."""
    try:
        proc = subprocess.run(shlex.split(command), cwd=tree, env=env, capture_output=True, text=True,
                              timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        return True, True, "timeout"
    return proc.returncode != 0, False, (proc.stdout + proc.stderr)[-3000:]


def baseline(target: Target, tree: Path, env: dict[str, str]) -> float:
    t0 = time.monotonic()
    failed, _, tail = run_command(target.command, tree, env, timeout=1800)
    took = time.monotonic() - t0
    if failed:
        sys.exit(f"mutation: target {target.name!r}: its tests fail before any mutation "
                 f"({target.command}):\n{tail}")
    return took


def run_tool_mutant(item, fn: str, target: Target, tree: Path, timeout: float) -> Outcome:
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    m = item.mutations[0]
    rel = str(Path(m.module_path).relative_to(tree))
    t0 = time.monotonic()
    res = mutate_and_test(item.mutations, target.command, timeout)
    took = time.monotonic() - t0
    if res.worker_outcome == WorkerOutcome.NO_TEST:
        return Outcome(target.name, "tool", f"{rel}:{fn}:{m.start_pos[0]}", True, False, "", seconds=took,
                       equivalent="no mutation possible")
    if res.worker_outcome != WorkerOutcome.NORMAL:
        sys.exit(f"mutation: cosmic-ray could not apply {m.operator_name} at {rel}:{m.start_pos}: {res.output}")
    diff = res.diff or ""
    killed = res.test_outcome != TestOutcome.SURVIVED
    out = Outcome(target.name, "tool", f"{rel}:{fn}:{m.start_pos[0]} {m.operator_name.removeprefix('core/')}",
                  killed, res.output == "timeout", diff, seconds=took, file=rel)
    if not killed:
        out.equivalent = EQUIVALENT.get(change_key(rel, diff))
    return out


def run_hand_mutant(h: HandMutant, target: Target, tree: Path, env: dict[str, str], timeout: float) -> Outcome:
    path = tree / h.file
    original = path.read_text()  # main() checked that h.old occurs exactly once
    mutated = original.replace(h.old, h.new)
    diff = "".join(f"-{a}\n" for a in h.old.splitlines()) + "".join(f"+{b}\n" for b in h.new.splitlines())
    t0 = time.monotonic()
    try:
        path.write_text(mutated)
        failed, timed_out, _ = run_command(h.command or target.command, tree, env, timeout)
    finally:
        path.write_text(original)
    return Outcome(target.name, "hand", h.name, failed, timed_out, diff, seconds=time.monotonic() - t0,
                   equivalent=None if failed else h.equivalent, file=h.file)


# -- report ---------------------------------------------------------------------------------


def report(outcomes: list[Outcome], planned: dict[str, tuple[int, int]], seconds: float, seed: int) -> str:
    lines = [f"# Mutation run: {len(outcomes)} mutants in {seconds / 60:.1f} min (seed {seed})", "",
             "| target | tool mutants (ran / in scope) | hand mutants | killed | equivalent | survived | score |",
             "|---|---|---|---|---|---|---|"]
    total = Tally()
    for name in planned:
        mine = [o for o in outcomes if o.target == name]
        t = Tally(ran=len(mine), killed=sum(o.killed for o in mine),
                  equivalent=sum(bool(not o.killed and o.equivalent) for o in mine),
                  survivors=[o for o in mine if not o.killed and not o.equivalent])
        total.ran += t.ran
        total.killed += t.killed
        total.equivalent += t.equivalent
        total.survivors += t.survivors
        tool = sum(o.kind == "tool" for o in mine)
        hand = sum(o.kind == "hand" for o in mine)
        score = t.score()
        lines.append(f"| {name} | {tool} / {planned[name][0]} | {hand} | {t.killed} | {t.equivalent} | "
                     f"{len(t.survivors)} | {'-' if score is None else f'{100 * score:.0f} %'} |")
    score = total.score()
    lines.append(f"| **all** | | | {total.killed} | {total.equivalent} | {len(total.survivors)} | "
                 f"{'-' if score is None else f'{100 * score:.0f} %'} |")
    lines += ["", "| module | mutants | killed | equivalent | survived | score |", "|---|---|---|---|---|---|"]
    for file in sorted({o.file for o in outcomes}):
        mine = [o for o in outcomes if o.file == file]
        t = Tally(ran=len(mine), killed=sum(o.killed for o in mine),
                  equivalent=sum(bool(not o.killed and o.equivalent) for o in mine))
        score = t.score()
        lines.append(f"| {file} | {t.ran} | {t.killed} | {t.equivalent} | {t.ran - t.killed - t.equivalent} | "
                     f"{'-' if score is None else f'{100 * score:.0f} %'} |")
    timeouts = sum(o.timeout for o in outcomes)
    if timeouts:
        lines += ["", f"{timeouts} mutant(s) were killed by the timeout (an endless loop counts as caught)."]
    if total.survivors:
        lines += ["", "## Survivors", ""]
        for o in total.survivors:
            lines += [f"### {o.target}: {o.where}", "", "```diff", o.diff.rstrip(), "```", ""]
    eq = [o for o in outcomes if not o.killed and o.equivalent]
    if eq:
        lines += ["", "## Equivalent (survived, cannot change behaviour)", ""]
        lines += [f"- {o.target}: {o.where}: {o.equivalent}" for o in eq]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", action="append", choices=[t.name for t in TARGETS],
                    help="run only this target (repeatable); default: all")
    ap.add_argument("--sample", type=int, default=12, help="tool mutants per target (0: none, -1: all); default 12")
    ap.add_argument("--seed", type=int, default=13, help="seed of the sample; default 13")
    ap.add_argument("--no-hand", action="store_true", help="skip the hand-written mutants")
    ap.add_argument("--budget", type=float, default=60,
                    help="stop starting mutants after this many minutes (0: no limit); default 60")
    ap.add_argument("--list", action="store_true", help="list the mutants that would run and stop")
    ap.add_argument("--report", type=Path, help="also write the report (markdown) to this file")
    args = ap.parse_args(argv)
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        sys.exit("mutation: cosmic-ray is not installed: pip install -e '.[test,mutation]'")

    chosen = [t for t in TARGETS if not args.target or t.name in args.target]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="anonflow-mutation-") as tmp:
        scratch = Path(tmp)
        tree = scratch_tree(scratch)
        env = environment(tree)
        check_imports_from(tree, env)
        os.environ.update(env)  # cosmic-ray's mutate_and_test runs the command with this environment
        os.chdir(tree)
        plan: dict[str, tuple[list, list[HandMutant]]] = {}
        planned: dict[str, tuple[int, int]] = {}
        for t in chosen:
            found = enumerate_mutants(tree, t, scratch)
            rng = random.Random(f"{args.seed}:{t.name}")
            if args.sample < 0 or args.sample >= len(found):
                picked = found
            else:
                picked = sorted(rng.sample(range(len(found)), args.sample))
                picked = [found[i] for i in picked]
            hand = [] if args.no_hand else [h for h in HAND if h.target == t.name]
            for h in hand:  # a stale hand mutant fails now, not after an hour of others
                count = (tree / h.file).read_text().count(h.old)
                if count != 1:
                    sys.exit(f"mutation: hand mutant {h.name!r}: the text it changes occurs {count} times in "
                             f"{h.file}, expected once (targets.py is out of date)")
            plan[t.name] = (picked, hand)
            planned[t.name] = (len(found), len(hand))
        if args.list:
            for name, (picked, hand) in plan.items():
                print(f"{name}: {len(picked)} of {planned[name][0]} tool mutants, {len(hand)} hand mutants")
                for item, fn in picked:
                    m = item.mutations[0]
                    print(f"  tool  {Path(m.module_path).relative_to(tree)}:{fn}:{m.start_pos[0]} {m.operator_name}")
                for h in hand:
                    print(f"  hand  {h.name}")
            return 0
        outcomes: list[Outcome] = []
        skipped = 0
        todo = sum(len(p) + len(h) for p, h in plan.values())
        done = 0
        for t in chosen:
            picked, hand = plan[t.name]
            if not picked and not hand:
                continue
            base = baseline(t, tree, env)
            timeout = max(3 * base, base + 30)
            print(f"{t.name}: baseline {base:.0f} s, timeout {timeout:.0f} s; "
                  f"{len(picked)} tool + {len(hand)} hand mutants", flush=True)
            work = [("tool", x) for x in picked] + [("hand", h) for h in hand]
            for kind, x in work:
                if args.budget and time.monotonic() - started > 60 * args.budget:
                    print(f"budget of {args.budget:g} min spent: {todo - done} mutants not run", flush=True)
                    skipped = todo - done
                    break
                o = (run_tool_mutant(x[0], x[1], t, tree, timeout) if kind == "tool"
                     else run_hand_mutant(x, t, tree, env, timeout))
                done += 1
                if o.equivalent == "no mutation possible":
                    continue
                outcomes.append(o)
                verdict = "killed" if o.killed else ("equivalent" if o.equivalent else "SURVIVED")
                print(f"  [{done}/{todo}] {verdict:10} {o.seconds:5.0f} s  {o.where}", flush=True)
            else:
                continue
            break
        os.chdir(ROOT)
    text = report(outcomes, planned, time.monotonic() - started, args.seed)
    if skipped:
        text += f"\n{skipped} planned mutant(s) not run: the --budget of {args.budget:g} min was spent.\n"
    print()
    print(text)
    if args.report:
        args.report.write_text(text)
    return 1 if any(not o.killed and not o.equivalent for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
