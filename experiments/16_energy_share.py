"""Figure 16, where a step's energy goes: data movement against arithmetic and static power, NETtalk and Llama 3 8B decode.

Writes OUT/figures/energy_share.png, .svg and .csv; experiments/README.md says how to read it.
It runs its own steps (a few seconds; cached while the model and profiles are unchanged).
"""

from _common import parse

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, [], only=["energy_share"])["energy_share"]:
        print(path)
