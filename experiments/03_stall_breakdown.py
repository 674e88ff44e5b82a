"""Figure 3, stall breakdown: each machine's cycles for one network, compute then stall by level.

Writes OUT/figures/stall_breakdown.png and .svg; experiments/README.md says how to read it.
It runs (or resumes) the default study in OUT first.
"""

from _common import parse, study_rows

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, study_rows(args), only=["stall_breakdown"])["stall_breakdown"]:
        print(path)
