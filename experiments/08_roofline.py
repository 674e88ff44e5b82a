"""Figure 8, the roofline explorer: every kernel of the stored steps against the machine's roofs

Writes OUT/figures/roofline.png, .svg and .csv; experiments/README.md says how to read it.
It runs (or resumes) the default study in OUT first.
"""

from _common import parse, study_rows

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, study_rows(args), only=["roofline"])["roofline"]:
        print(path)
