"""Figure 17, joules per token against batch for decode, beside seconds per token: the energy knee beside the time knee.

Writes OUT/figures/energy_per_token.png, .svg and .csv; experiments/README.md says how to read it.
It runs (or resumes) the default study in OUT first.
"""

from _common import parse, study_rows

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, study_rows(args), only=["energy_per_token"])["energy_per_token"]:
        print(path)
