"""Figure 9, the activation high-water: live bytes by tensor class over the step's kernels

Writes OUT/figures/activation_highwater.png, .svg and .csv; experiments/README.md says how to read it.
It needs no simulation.
"""

from _common import parse

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, [], only=["activation_highwater"])["activation_highwater"]:
        print(path)
