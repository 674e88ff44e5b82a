"""Figure 6, synthetic balance sweep: one compute engine, memory bandwidth over four decades.

Writes OUT/figures/synthetic_balance.png and .svg; experiments/README.md says how to read it.
It runs (or resumes) the default study in OUT first.
"""

from _common import parse, study_rows

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, study_rows(args), only=["synthetic_balance"])["synthetic_balance"]:
        print(path)
