"""Figure 2, the regime flip: stall fraction against machine balance for per-example training.

Writes OUT/figures/regime_flip.png and .svg; experiments/README.md says how to read it.
It runs (or resumes) the default study in OUT first.
"""

from _common import parse, study_rows

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, study_rows(args), only=["regime_flip"])["regime_flip"]:
        print(path)
