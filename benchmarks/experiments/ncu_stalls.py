"""Per-instruction warp-stall samples of one kernel from an ncu report (session 15).

``python benchmarks/experiments/ncu_stalls.py REPORT.ncu-rep [TOP]``: exports the report's source page (SASS) as CSV
through ``ncu --import``, and prints the instructions with the most warp-stall samples, with their share of all
samples and the stall-reason columns that are non-zero for them.
"""
import csv
import io
import subprocess
import sys


def main():
    rep, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    text = subprocess.run(["ncu", "--import", rep, "--page", "source", "--csv", "--print-source", "sass"],
                          capture_output=True, text=True).stdout
    # one CSV block per profiled kernel, each starting with its header line
    blocks, cur = [], []
    for line in text.splitlines():
        if line.startswith('"Address"') or line.startswith('"#"'):
            if cur:
                blocks.append(cur)
            cur = [line]
        elif cur:
            cur.append(line)
    if cur:
        blocks.append(cur)
    for b, block in enumerate(blocks):
        rows = list(csv.DictReader(io.StringIO("\n".join(block))))
        if not rows:
            continue
        cols = list(rows[0].keys())
        allc = next((c for c in cols if c.startswith("Warp Stall Sampling (All")), None)
        src = next((c for c in cols if c == "Source"), cols[1])
        if allc is None:
            print("columns:", cols)
            continue

        def num(v):
            try:
                return float(v.replace(",", ""))
            except (ValueError, AttributeError):
                return 0.0

        total = sum(num(r[allc]) for r in rows)
        reasons = [c for c in cols if c.lower().startswith("stall_") or "(stall" in c.lower()]
        print(f"\n== kernel {b}: {len(rows)} SASS lines, {total:.0f} samples; reason columns: {len(reasons)}")
        for r in sorted(rows, key=lambda r: -num(r[allc]))[:top]:
            nz = sorted(((num(r[c]), c) for c in reasons if num(r[c]) > 0), reverse=True)[:3]
            print(f"{100 * num(r[allc]) / max(total, 1):5.1f}% {r.get('Address', ''):>6s} {r[src][:70]:70s} "
                  + " ".join(f"{c}={v:.0f}" for v, c in nz))


if __name__ == "__main__":
    main()
