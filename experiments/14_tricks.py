"""Figure 14, what each trick buys: time per token and memory per device as modern training's tricks are added in turn

Writes OUT/figures/tricks.png and .svg and the ladders as tricks.csv; experiments/README.md
says how to read it. It simulates its own cases (no sweep needed; a few minutes) and
reuses its data while the model, the profiles and the presets are unchanged.
"""

import time

from _common import parse

from memwall.study.draw import figure_data, write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    start = time.perf_counter()
    for path in write_figures(args.out, [], only=["tricks"])["tricks"]:
        print(path)
    for row in figure_data(args.out, "tricks")["data"]["ladder"]:
        print(f"{row['network']:11} on {row['machine']:11} {row['trick']:16} {row['seconds_per_token']:.3g} s/token, "
              f"{row['device_bytes'] / 2**30:8.2f} GiB a device, {row['bound']}")
    print(f"{time.perf_counter() - start:.1f} s")
