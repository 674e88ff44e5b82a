"""Figure 15, energy balance: energy per FLOP and per byte of main memory across eras, beside the time balance.

Writes OUT/figures/energy_balance.png, .svg and .csv; experiments/README.md says how to read it.
It needs no simulation: the profiles' [energy] figures alone.
"""

from _common import parse

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, [], only=["energy_balance"])["energy_balance"]:
        print(path)
