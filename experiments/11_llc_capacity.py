"""Figure 11, the cache each network needs: main-memory bytes against last-level capacity

Writes OUT/figures/llc_capacity.png, .svg and .csv; experiments/README.md says how to read it.
Each curve is one replay of a training step through the machine's hierarchy, its last
level counted at every capacity at once (memwall.engine.CapacitySweep).
"""

from _common import parse

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, [], only=["llc_capacity"])["llc_capacity"]:
        print(path)
