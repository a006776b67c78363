"""Benchmark of SafePub in the ``lattice`` (model ``ed-differential-privacy``) on ARX's Adult
(30,162 records, its 8 QIs and hierarchy files, 6,480 nodes), utility ``loss``: over 20 seeds
for epsilon in {0.5, 1, 2}, delta = 1e-6, ARX's defaults (10 % of epsilon to the search,
1000 checks // 8 QIs = 125 steps). Per epsilon: beta and k, then mean / min / max of the
records kept (published), suppressed (not sampled or in classes below k), classes, loss
(ARX's Loss: the mean over QIs of the records' domain shares, a suppressed record counting 1,
over all records) and the seconds of the whole run (sampling, search, publication)::

    python tests/benchmarks/bench_safepub.py [seeds]

With ``--arx DIR`` (a checkout of github.com/arx-deidentifier/arx: its src/main and lib), ARX's
SafePub runs on the same data beside ours: the Java driver below is compiled with javac
against ARX's sources and lib jars (two classes of jars absent from the snapshot -- pdfbox's
PDFont, used only by ARX's PDF certificates, and hadoop's Writable, used only by its
classifiers -- are stubbed so that javac can resolve them; neither runs), with ARX's settings
for the same run: EDDifferentialPrivacy(epsilon, 1e-6), suppression limit 1, search budget
0.1 epsilon, 1000 checks, the Loss metric. ARX samples with SecureRandom (not seedable):
its 20 runs are 20 independent draws, as ours are 20 seeds::

    python tests/benchmarks/bench_safepub.py 20 --arx /tmp/arxsrc

``--10m``: one run (epsilon 1) on ARX's Adult repeated 332 times (10,013,784 records), the
whole step and its search timed::

    python tests/benchmarks/bench_safepub.py --10m

Importing this module has no side effects.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "workflows" / "data" / "arx"
QI = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"]


DRIVER = r"""import java.nio.charset.StandardCharsets;
import java.util.*;
import org.deidentifier.arx.*;
import org.deidentifier.arx.criteria.EDDifferentialPrivacy;
import org.deidentifier.arx.metric.Metric;
import org.deidentifier.arx.AttributeType.Hierarchy;
import org.deidentifier.arx.ARXLattice.ARXNode;

/** ARX's SafePub on ARX's Adult: per run, epsilon, seconds, kept, suppressed, classes, loss, node. */
public class SafePubDriver {
    public static void main(String[] args) throws Exception {
        String dir = args[0];
        int runs = Integer.parseInt(args[1]);
        String[] qis = {"sex", "age", "race", "marital-status", "education", "native-country", "workclass", "occupation"};
        for (int a = 2; a < args.length; a++) {
            double eps = Double.parseDouble(args[a]);
            for (int r = 0; r < runs; r++) {
                Data data = Data.create(dir + "/adult.csv", StandardCharsets.UTF_8, ';');
                Map<String, String[][]> hier = new HashMap<>();
                for (String q : qis) {
                    Hierarchy h = Hierarchy.create(dir + "/adult_hierarchy_" + q + ".csv", StandardCharsets.UTF_8, ';');
                    hier.put(q, h.getHierarchy());
                    data.getDefinition().setAttributeType(q, h);
                }
                data.getDefinition().setAttributeType("salary-class", AttributeType.INSENSITIVE_ATTRIBUTE);
                ARXConfiguration config = ARXConfiguration.create();
                config.addPrivacyModel(new EDDifferentialPrivacy(eps, 1e-6));
                config.setSuppressionLimit(1d);
                config.setDPSearchBudget(eps * 0.1);
                config.setHeuristicSearchStepLimit(1000);
                config.setQualityModel(Metric.createLossMetric());
                long t0 = System.nanoTime();
                ARXResult result = new ARXAnonymizer().anonymize(data, config);
                double secs = (System.nanoTime() - t0) / 1e9;
                DataHandle out = result.getOutput();
                int n = out.getNumRows();
                ARXNode node = result.getGlobalOptimum();
                // shares: leaves under a label at its level / the hierarchy's leaves
                int kept = 0;
                double loss = 0;
                Set<String> classes = new HashSet<>();
                List<Map<String, Integer>> counts = new ArrayList<>();
                int[] levels = new int[qis.length];
                for (int i = 0; i < qis.length; i++) {
                    levels[i] = node.getGeneralization(qis[i]);
                    Map<String, Integer> c = new HashMap<>();
                    for (String[] row : hier.get(qis[i])) c.merge(row[levels[i]], 1, Integer::sum);
                    counts.add(c);
                }
                for (int row = 0; row < n; row++) {
                    if (out.isOutlier(row)) { loss += qis.length; continue; }
                    kept++;
                    StringBuilder key = new StringBuilder();
                    for (int i = 0; i < qis.length; i++) {
                        String v = out.getValue(row, out.getColumnIndexOf(qis[i]));
                        key.append(v).append('\u0001');
                        loss += counts.get(i).get(v) / (double) hier.get(qis[i]).length;
                    }
                    classes.add(key.toString());
                }
                loss /= (double) n * qis.length;
                System.out.println(eps + " " + secs + " " + kept + " " + (n - kept) + " " + classes.size() + " " + loss
                                   + " " + Arrays.toString(levels).replace(" ", ""));
            }
        }
    }
}
"""

STUBS = {
    "org/apache/pdfbox/pdmodel/font/PDFont.java": "package org.apache.pdfbox.pdmodel.font; public class PDFont {}",
    "org/apache/hadoop/io/Writable.java": (
        "package org.apache.hadoop.io; public interface Writable { void write(java.io.DataOutput out) throws "
        "java.io.IOException; void readFields(java.io.DataInput in) throws java.io.IOException; }"),
}


def arx_runs(arx: Path, runs: int, epsilons: tuple[float, ...]) -> dict[float, list[tuple[float, ...]]]:
    """ARX's SafePub on ARX's Adult, ``runs`` times per epsilon: (kept, suppressed, classes,
    loss, seconds of ARXAnonymizer.anonymize) per run."""
    import subprocess
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="arx-safepub-"))
    for rel, text in STUBS.items():
        (work / "stubs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / "stubs" / rel).write_text(text)
    (work / "SafePubDriver.java").write_text(DRIVER)
    cp = ":".join(str(j) for j in sorted((arx / "lib").rglob("*.jar")))
    subprocess.run(["javac", "-nowarn", "-d", str(work / "build"), "-cp", cp, "-sourcepath",
                    f"{arx / 'src' / 'main'}:{work / 'stubs'}", str(work / "SafePubDriver.java")],
                   check=True, capture_output=True)
    res = subprocess.run(["java", "-cp", f"{work / 'build'}:{cp}", "SafePubDriver", str(DATA), str(runs),
                          *map(str, epsilons)], check=True, capture_output=True, text=True)
    out: dict[float, list[tuple[float, ...]]] = {}
    for line in res.stdout.splitlines():
        eps, secs, kept, supp, classes, loss, _node = line.split()
        out.setdefault(float(eps), []).append((float(kept), float(supp), float(classes), float(loss), float(secs)))
    return out


def adult():
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from anonflow.testing import make_context, typed_table
    from anonflow_std.generalization.hierarchies import ArxFile

    raw = pacsv.read_csv(DATA / "adult.csv", parse_options=pacsv.ParseOptions(delimiter=";"))
    cols = {c: raw.column(c).to_pylist() for c in QI}
    t = typed_table(cols, quasi={q: "continuous" if q == "age" else "nominal" for q in QI})
    hier = {q: ArxFile().build(q, pa.array([]), {"file": str(DATA / f"adult_hierarchy_{q}.csv"), "delimiter": ";"},
                               make_context()) for q in QI}
    return t.replace(hierarchies=hier)


def main(seeds: int = 20, arx: Path | None = None) -> None:
    import os

    import numpy as np

    from anonflow import registry as plugins
    from anonflow.params import validate_params
    from anonflow.testing import make_context

    table = adult()
    lat = plugins.get_registry().get("algorithm", "lattice").obj
    print(f"ARX's Adult: {table.num_rows} records, {len(QI)} QIs; load {os.getloadavg()[0]:.2f}")
    theirs = arx_runs(arx, seeds, (0.5, 1.0, 2.0)) if arx is not None else {}
    if arx is not None:
        print(f"ARX ran; load {os.getloadavg()[0]:.2f}")
    for eps in (0.5, 1.0, 2.0):
        params = validate_params(lat.params, {"model": "ed-differential-privacy", "utility": "loss",
                                              "model_params": {"epsilon": eps, "delta": 1e-6}})
        lat.privacy_loss(params)  # derive beta and k once (cached), outside the timings
        rows = []
        for seed in range(seeds):
            ctx = make_context(seed=seed)
            t0 = time.perf_counter()
            lat.run(table, params, ctx)
            dt = time.perf_counter() - t0
            dp = ctx.fitted["differential_privacy"]
            note = next(n for n in ctx.notes if "SafePub" in n)
            score = float(note.split("loss score ")[1].split(";")[0])
            loss = -score * (dp["k"] - 1) / dp["records"]
            rows.append((dp["published"], dp["suppressed"], dp["classes"], loss, dt))
        a = np.array(rows)
        b = np.array(theirs[eps]) if eps in theirs else None
        print(f"epsilon {eps:g}, delta 1e-6: beta {dp['beta']!r}, k {dp['k']}, steps {dp['steps']}"
              + ("   | ARX" if b is not None else ""))
        for j, name in enumerate(("kept", "suppressed", "classes", "loss", "seconds")):
            fmt = "{:.4f}" if name in ("loss", "seconds") else "{:.1f}"

            def show(x):
                return ("mean " + fmt.format(x[:, j].mean()) + ", min " + fmt.format(x[:, j].min()) + ", max "
                        + fmt.format(x[:, j].max()))
            print(f"  {name:>10}: {show(a)}" + (f"   | {show(b)}" if b is not None else ""))


def ten_million() -> None:
    import os

    import pyarrow as pa

    from anonflow import registry as plugins
    from anonflow.params import validate_params
    from anonflow.testing import make_context

    t = adult()
    big = t.replace(data=pa.concat_tables([t.data] * 332).combine_chunks())
    lat = plugins.get_registry().get("algorithm", "lattice").obj
    params = validate_params(lat.params, {"model": "ed-differential-privacy",
                                          "model_params": {"epsilon": 1.0, "delta": 1e-6}})
    lat.privacy_loss(params)
    ctx = make_context(seed=1)
    t0 = time.perf_counter()
    lat.run(big, params, ctx)
    print(f"{big.num_rows:,} records: {time.perf_counter() - t0:.1f} s (load {os.getloadavg()[0]:.2f})")
    print(next(n for n in ctx.notes if "SafePub" in n))


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--10m" in args:
        ten_million()
        sys.exit(0)
    where = Path(args[args.index("--arx") + 1]) if "--arx" in args else None
    plain = [a for i, a in enumerate(args) if a != "--arx" and (i == 0 or args[i - 1] != "--arx")]
    main(int(plain[0]) if plain else 20, where)
