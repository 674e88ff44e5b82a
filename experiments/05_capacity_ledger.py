"""Figure 5, the capacity ledger: saved activations against parameters as the batch grows.

Writes OUT/figures/capacity_ledger.png and .svg; experiments/README.md says how to read it.
It needs no simulation.
"""

from _common import parse

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, [], only=["capacity_ledger"])["capacity_ledger"]:
        print(path)
