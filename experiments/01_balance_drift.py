"""Figure 1, balance drift: machine balance against year, by kind, with fitted growth rates of peak FLOP/s and memory bandwidth beside Gholami et al.'s.

Writes OUT/figures/balance_drift.png and .svg; experiments/README.md says how to read it.
It needs no simulation.
"""

from _common import parse

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, [], only=["balance_drift"])["balance_drift"]:
        print(path)
