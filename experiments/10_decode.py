"""Figure 8, decode: tokens per second against batch, at a short and a long context.

Writes OUT/figures/decode.png and .svg; experiments/README.md says how to read it.
It runs (or resumes) the default study in OUT first.
"""

from _common import parse, study_rows

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, study_rows(args), only=["decode"])["decode"]:
        print(path)
